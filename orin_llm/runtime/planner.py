"""Planning calls on a pinned home environment.

The environment's chat prefix (system prompt + home + few-shot turns) is tokenized once and its
K/V pinned in the engine's cache (cache.py): other traffic cannot evict it, and a planning request
computes only its own turn. Token identity (invariant 2, docs/ARCHITECTURE.md): the request's ids
are the prefix's ids followed by the ids of the text that follows the prefix, never the joined
text re-tokenized.

A new environment gets a new version: its prefix is pinned, then the previous one unpinned.
Requests already running keep their own references to the old prefix's blocks, so they finish on
the version they began with, and a request never mixes versions.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Optional

from ..environment import Environment, Step, parse_steps, prefix_messages, task_message
from ..errors import OrinError
from .cache import Pin
from .engine import Engine
from .generate import Generation, Result
from .sampling import SamplingParams


@dataclass
class Plan:
    text: str
    steps: list[Step]
    result: Result
    environment_version: int


@dataclass(frozen=True)
class Prefix:
    version: int
    environment: Environment
    text: str
    ids: tuple[int, ...]
    messages: tuple[dict[str, str], ...]  # rendered once: every request starts with them


class Planner:
    def __init__(self, engine: Engine, environment: Environment):
        self.engine = engine
        self.prefix: Optional[Prefix] = None
        self.pin: Optional[Pin] = None
        self.prefill_s = 0.0  # how long the last environment's prefix took to compute
        self.set_environment(environment)

    @property
    def version(self) -> int:
        assert self.prefix is not None
        return self.prefix.version

    def render(self, environment: Environment) -> Prefix:
        """The environment as the next version's prefix (rendered and tokenized, not yet pinned);
        PromptTooLong if it leaves no room for a task."""
        messages = tuple(prefix_messages(environment))
        text = self.engine.chat_text(list(messages), add_generation_prompt=False)
        ids = tuple(self.engine.encode(text))
        self.engine.check_prompt(len(ids))
        return Prefix(self.prefix.version + 1 if self.prefix else 1, environment, text, ids, messages)

    def set_environment(self, environment: Environment) -> int:
        """Render, tokenize and pin a new environment; returns its version."""
        prefix = self.render(environment)
        t0 = time.perf_counter()
        pin = self.engine.pin(list(prefix.ids))
        return self.use(prefix, pin, time.perf_counter() - t0)

    def use(self, prefix: Prefix, pin: Pin, prefill_s: Optional[float] = None) -> int:
        """Make a computed, pinned prefix the current one (and unpin the previous)."""
        old = self.pin
        self.prefix, self.pin = prefix, pin
        if old is not None:
            self.engine.unpin(old)
        if prefill_s is not None:
            self.prefill_s = prefill_s
        return prefix.version

    def messages(self, task: str, observations: Optional[list[str]] = None) -> list[dict[str, str]]:
        assert self.prefix is not None
        return [dict(m) for m in self.prefix.messages] + [task_message(task, observations)]

    def prompt_ids(self, messages: list[dict[str, str]]) -> list[int]:
        """Ids for a conversation: the pinned prefix's ids + the rest, when it starts with the prefix."""
        assert self.prefix is not None
        full = self.engine.chat_text(messages)
        if not full.startswith(self.prefix.text):
            return self.engine.encode(full)
        rest = full[len(self.prefix.text):]
        if not rest:
            raise OrinError("the conversation adds nothing after the environment prefix")
        return list(self.prefix.ids) + self.engine.encode(rest)

    def start(self, task: str, params: SamplingParams, observations: Optional[list[str]] = None,
              speculation: str = "auto", constraint=None) -> Generation:
        started = time.perf_counter()  # the request's TTFT and total include rendering and tokenizing it
        extra = {"constraint": constraint} if constraint is not None else {}
        gen = self.engine.generate(self.prompt_ids(self.messages(task, observations)), params, speculation,
                                   **extra)
        gen.started = started
        return gen

    def finish(self, generation: Generation, prefix: Prefix) -> Plan:
        """Plan text and steps, parsed against the environment the request ran on."""
        result = generation.result if generation.result is not None else generation.run()
        return Plan(result.text.strip(), parse_steps(result.text, prefix.environment), result, prefix.version)

    def plan(self, task: str, params: SamplingParams, observations: Optional[list[str]] = None,
             speculation: str = "auto") -> Plan:
        prefix = self.prefix
        assert prefix is not None
        return self.finish(self.start(task, params, observations, speculation), prefix)
