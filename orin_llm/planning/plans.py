"""What the planner holds and answers: a plan, a home's rendered prefix, a conversation, a home.

Plain data (no engine calls), so the planner's parts (planner.py, goal_search.py, goal_infer.py)
share the types without importing one another.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from ..runtime.cache import Pin
from ..runtime.constraint import Grammar
from ..runtime.generate import Result
from .feasibility import StepSets
from .home import Environment, Step
from .home.state import HomeState
from .home.steps import Rejected
from .state_pins import StatePart

FEASIBILITY = ("enforce", "report", "off")


@dataclass
class Plan:
    text: str
    steps: list[Step]  # lines that call a declared action with things of the home of the right types
    result: Result
    environment_version: int
    rejected: list[Rejected] = field(default_factory=list)  # the other lines, and why
    constrained: bool = False
    # what the simulator says of it (planning/home/world.py); "off" and plain-text homes: nothing
    violations: list = field(default_factory=list)  # world.Violation per step that cannot run ("enforce": none)
    final_state: Optional[HomeState] = None  # the state predicted after the plan
    goal_reached: Optional[bool] = None  # None: no goal given
    goal_missing: list[str] = field(default_factory=list)  # the goal's facts still false after the plan
    search: Optional[dict] = None  # with a goal: {"candidates", "source": model|search|none, "reason", ...}
    feasibility: str = "off"  # the mode the plan was checked in (an unconstrained plan: report at most)
    goal_inferred: Optional[list[str]] = None  # goal "infer": the facts the model read in the task
    # goal "infer": facts the model wrote that contradicted an earlier one, left out, each with why
    goal_dropped: list[str] = field(default_factory=list)
    goal_reading_s: float = 0.0  # goal "infer": how long reading the goal in the task took
    goal: Optional[list[str]] = None  # the facts the plan aimed at (given, or read in the task)
    goal_source: Optional[str] = None  # "given" or "inferred"
    goal_doubts: list[str] = field(default_factory=list)  # why a goal read in the task may not be the speaker's


@dataclass(frozen=True)
class Prefix:
    version: int
    environment: Environment
    text: str
    ids: tuple[int, ...]
    messages: tuple[dict[str, str], ...]  # rendered once: every request starts with them
    grammar: Optional[Grammar] = None  # the home's plan grammar, compiled once per version
    steps: Optional[StepSets] = None  # the feasible steps per simulated state, made as plans meet them


@dataclass
class Conversation:
    """An agent loop's turns (task, plan, observations, plan, ...) on one environment version. The
    next turn's ids are this turn's ids (prompt + the plan's own tokens) followed by the ids of
    what the template adds after them: the cache then holds every earlier turn, and only the new
    text is computed (never the joined text re-tokenized, which could split the plan differently)."""

    id: str
    version: int
    messages: list[dict[str, str]]
    ids: list[int] = field(default_factory=list)  # prompt + output of the last turn
    text: str = ""  # what those ids spell (prompt text + the plan's text)
    turns: int = 0


MAX_CONVERSATIONS = 64  # kept in memory, least recently used dropped first


def history_key(environment: Environment) -> str:
    """The lookup history plans in this environment draft from: per home, across its versions."""
    return f"env:{environment.name}"


@dataclass
class Home:
    """A home the planner serves: its current prefix and the pin that keeps it cached."""

    prefix: Prefix
    pin: Pin
    state: Optional[HomeState] = None  # reported by the robot (set_state); None: the home's own `state:`
    state_version: int = 0  # set_state calls since this version of the home
    part: Optional[StatePart] = None  # the current state rendered after the prefix
    state_pin: Optional[Pin] = None  # the prefix and the part, pinned by the last set_state
    goal_prompt: Optional[Any] = None  # goal_infer.GoalPrompt: rendered on the first inferred goal
