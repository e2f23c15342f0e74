"""A planning call: the home environment's messages + the task → plan text and parsed steps."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..environment import Environment, Step, parse_steps, prefix_messages, task_message
from .engine import Engine
from .generate import Generation, Result
from .sampling import SamplingParams


@dataclass
class Plan:
    text: str
    steps: list[Step]
    result: Result


def plan_messages(env: Environment, task: str, observations: Optional[list[str]] = None) -> list[dict]:
    return prefix_messages(env) + [task_message(task, observations)]


def start_plan(engine: Engine, env: Environment, task: str, params: SamplingParams,
               observations: Optional[list[str]] = None) -> Generation:
    return engine.generate(engine.chat_ids(plan_messages(env, task, observations)), params)


def finish_plan(env: Environment, generation: Generation) -> Plan:
    result = generation.result if generation.result is not None else generation.run()
    return Plan(result.text.strip(), parse_steps(result.text, env), result)
