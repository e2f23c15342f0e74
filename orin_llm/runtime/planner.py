"""Planning calls on a pinned home environment.

The environment's chat prefix (system prompt + home + few-shot turns) is tokenized once and its
K/V kept in the engine's cache; a planning request computes only its own turn. Token identity
(docs/ARCHITECTURE.md, invariant 2): the request's ids are the prefix's ids followed by the ids of
the text that follows the prefix, never the joined text re-tokenized.

Not thread-safe by design: one worker owns the engine (the daemon serializes calls), so an
environment switch happens between requests and a request never mixes versions.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Optional

from ..environment import Environment, Step, parse_steps, prefix_messages, task_message
from ..errors import EnvironmentTooLong, OrinError, PromptTooLong
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
        self.prefill_s = 0.0
        self._active: Optional[Generation] = None  # the request using the cache right now
        self._pending: Optional[Prefix] = None  # an environment waiting for it to finish
        self.set_environment(environment)

    @property
    def version(self) -> int:
        assert self.prefix is not None
        return self.prefix.version

    def set_environment(self, environment: Environment) -> int:
        """Render, tokenize and prefill a new environment; returns its version. While a request
        is running the switch waits for it, so that request finishes on the version it began."""
        messages = tuple(prefix_messages(environment))
        text = self.engine.chat_text(list(messages), add_generation_prompt=False)
        latest = self._pending or self.prefix
        ids = tuple(self.engine.encode(text))
        prefix = Prefix(latest.version + 1 if latest else 1, environment, text, ids, messages)
        try:
            self.engine.check_prompt(len(prefix.ids) + 1)  # room for a task: at least one token
        except PromptTooLong as e:
            raise EnvironmentTooLong(environment.name, len(prefix.ids), e.limit) from None
        if self._active is not None:
            self._pending = prefix
        else:
            self.prefix = prefix
            self._ensure_pinned()
        return prefix.version

    def _done(self) -> None:
        self._active = None
        if self._pending is not None:
            self.prefix, self._pending = self._pending, None
            self._ensure_pinned()

    def _ensure_pinned(self) -> int:
        """Prefill the prefix again if the cache lost it; returns the tokens prefilled (0: it was there)."""
        assert self.prefix is not None
        if self.engine.pinned == list(self.prefix.ids):
            return 0
        t0 = time.perf_counter()  # e.g. a chat request with another system prompt used the cache
        self.engine.pin(list(self.prefix.ids))
        self.prefill_s = time.perf_counter() - t0
        return len(self.prefix.ids)

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
              speculation: str = "auto") -> Generation:
        if self._active is not None:
            raise RuntimeError("one request at a time: finish or close the running generation first")
        started = time.perf_counter()  # the request's TTFT and total include rendering and tokenizing it
        # A re-pin here is this request's work: its TTFT includes it, and its prefix tokens count as
        # prefill, never as cached (Timings.begin).
        repinned = self._ensure_pinned()
        ids = self.prompt_ids(self.messages(task, observations))
        try:
            gen = self.engine.generate(ids, params, speculation)
        except PromptTooLong as e:
            n = len(self.prefix.ids)
            raise PromptTooLong(e.tokens, e.limit, f"the prompt has {e.tokens} tokens, over this engine's "
                                f"max_input_len of {e.limit}: the environment takes {n} of them, which leaves "
                                f"{e.limit - n} for the task and observations; shorten those") from None
        gen.started = started
        gen.repinned = repinned
        gen.on_done = self._done
        self._active = gen
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
