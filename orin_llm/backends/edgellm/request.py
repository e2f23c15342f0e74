"""A request of the Edge-LLM backend: one streamed chat completion on its server (or one per plan step),
stepped by the engine like any other `Request`.

Its text streams as the server sends it (`take`). A plan under the home's state goes one step per request,
each with the grammar of the steps feasible now (backends/remote/stepwise.py); any other constraint goes
whole as EBNF. Either way the answer is checked at its end with the request's own matcher
(backends/remote/answer_check.py): the server decoded under the grammar we sent, and an answer that is
not the grammar's (or steps the state does not allow) fails the request instead of reaching the planner.

What the server cannot say is not made up: it reports no cached-token count (its usage has prompt and
completion tokens only), so `cached_prompt_tokens` stays 0 and `computed_prompt_tokens` is the whole prompt.

The server takes text, and tokenizes it whole: where the planner joined parts it tokenized apart (the
home's pinned prefix, the state after it, the task), the server's tokens can differ from the planner's ids
at those joins (the example home: 608 planner ids, 609 server tokens, "\n\n" one token in the planner's
state part and two where the text is tokenized whole). The pinned prefix ends at such a join, so its own
tokens are the same. The prompt's tokens are therefore counted as the server will see them
(`server_prompt_tokens`: the engine's tokenizer, the same tokenizer.json, on the text), and a server that
counts otherwise fails the request: its tokenizer is not the engine's, so nothing the planner counted holds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Optional, Protocol

from ...errors import OrinError
from ...runtime.block_manager import NoBlocks
from ...runtime.constraint import Constraint
from ...runtime.generate import Result, SpecStats, Timings
from ...runtime.sampling import SamplingParams
from ..remote.answer_check import check_answer
from ..remote.client import RemoteCall, RemoteError
from ..remote.settings import RemoteSettings
from ..remote.stepwise import StepwiseCall


class EngineView(Protocol):
    """What a request reads of its engine (engine.py's EdgellmEngine)."""

    tokenizer: Any
    settings: RemoteSettings
    timeout_s: float
    eos_ids: set[int]
    pins: list[tuple[int, ...]]
    encode: Callable[[str], list[int]]
    served_model: Callable[[], str]


class EdgellmRequest:
    """One generation (or, with `pin`, a prefix committed to the context cache)."""

    def __init__(self, engine: EngineView, prompt_ids: list[int], params: SamplingParams,
                 constraint: Optional[Constraint] = None, pin: bool = False):
        self.engine, self.params, self.constraint = engine, params, constraint
        self.prompt_ids = list(prompt_ids)
        self.is_pin = pin
        # the answer is checked on a copy: the planner keeps reading the request's own constraint
        self._check = constraint.fork() if constraint is not None else None
        self.started: Optional[float] = None
        self.deadline: Optional[float] = None  # time.monotonic(); the daemon's worker sets the job's
        self.error: Optional[BaseException] = None
        self.result: Optional[Result] = None
        self.pin: Any = None
        self.call: Optional[RemoteCall] = None
        self.submitted_at: Optional[float] = None
        self._taken = 0
        self.prompt_text = engine.tokenizer.decode(self.prompt_ids, skip_special_tokens=False)
        self.server_prompt_tokens = len(engine.encode(self.prompt_text))  # as the server tokenizes it (module doc)
        self.timings = Timings(prompt_tokens=self.server_prompt_tokens,
                               computed_prompt_tokens=self.server_prompt_tokens)

    @property
    def done(self) -> bool:
        return self.result is not None or self.error is not None

    @property
    def report(self) -> dict:
        return {}  # served by this engine's server, always

    def take(self) -> list[str]:
        if self.call is None or self.is_pin:
            return []
        text = self.call.text
        new, self._taken = text[self._taken:], len(text)
        return [new] if new else []

    # -- driven by the engine, on its thread

    def start(self, changed: threading.Event) -> None:
        engine, p = self.engine, self.params
        budget = engine.timeout_s if self.deadline is None else max(0.05, self.deadline - time.monotonic())
        prompt = self.prompt_text
        lark = self.constraint.lark if self.constraint is not None else None
        max_tokens, temperature = (1, 0.0) if self.is_pin else (p.max_tokens, p.temperature)
        args = (engine.settings, engine.served_model, prompt, max_tokens, temperature, p.top_p, p.seed,
                [] if self.is_pin else list(p.stop), lark, changed)
        steps = self.constraint.steps() if self.constraint is not None else None
        if steps is not None:
            self.call = StepwiseCall(*args, timeout_s=budget, steps=steps, encode=engine.encode)
        else:
            self.call = RemoteCall(*args, timeout_s=budget)
        self.submitted_at = time.perf_counter()
        self.call.start()

    def advance(self) -> bool:
        """Whether it ended now (its result or its error set)."""
        call = self.call
        if call is None or not call.done or self.done:
            return False
        if call.error is not None:
            self.error = self._error(call.error)
            return True
        problem = check_answer(call, self._check, self.engine.encode, self.engine.eos_ids)
        counted = call.usage["prompt_tokens"]
        if problem is None and call.requests == 1 and counted not in (0, self.server_prompt_tokens):
            problem = ("prompt_tokens", f"the Edge-LLM server counted {counted} prompt tokens where the engine's "
                                        f"tokenizer makes {self.server_prompt_tokens} of the same text: it tokenizes "
                                        "otherwise, so the prefix it computed is not the one pinned")
        if problem is not None:
            self.error = OrinError(f"Edge-LLM's answer refused ({problem[0]}): {problem[1]}")
            return True
        self._finish(call)
        return True

    def _error(self, e: RemoteError) -> BaseException:
        if e.kind == "http_error" and " 429 " in f" {e} ".replace(":", " "):
            # its queue is full (--max-queued-requests): as a full KV pool, come back shortly
            return NoBlocks(f"the Edge-LLM server's queue is full: {e}")
        return OrinError(f"Edge-LLM server: {e}")

    def _finish(self, call: RemoteCall) -> None:
        sent = call.sent_at or time.perf_counter()
        ids = self.engine.encode(call.text) if call.text else []
        t = self.timings
        t.completion_tokens = call.usage["completion_tokens"] or len(ids)
        t.ttft_s = (call.first_at or call.done_at or sent) - sent
        t.total_s = (call.done_at or sent) - sent
        t.queue_s = max(0.0, (self.submitted_at or sent) - (self.started or sent))
        if self.is_pin:
            self.pin = tuple(self.prompt_ids)
            self.engine.pins.append(self.pin)
            self.result = Result("", [], "length", t, SpecStats())
            return
        reason = "length" if call.finish_reason == "length" else "stop"
        self.result = Result(call.text, ids, reason, t, SpecStats(drafter="none"))

    def close(self) -> None:
        """Cancelled: the connection closes, and the server cancels the request when it sees it closed."""
        if self.call is not None and not self.call.done:
            self.call.cancel()
        if not self.done:
            self.error = OrinError("cancelled")
