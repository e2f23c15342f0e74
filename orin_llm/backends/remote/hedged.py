"""`HedgedBackend`: the robot's engine, with plans generated on a remote engine first.

It is a runtime/backend.py `Backend` that wraps the local one: the daemon's worker, the planner and
every route see one engine. Everything but generating (text, pins, homes, histories, stats) is the
local engine's. A request made by `generate` is a `HedgedRequest`:

- it goes to the remote engine (client.py) when the remote is not resting after a failure and its
  constraint, if any, has Lark text (the home's plan grammar: Grammar.lark); else the local engine
  answers at once, and the answer says why (`fallback`). A plan under the home's state goes one step
  per request, each with the grammar of the steps feasible now (stepwise.py, `plans: stepwise`), or
  whole with the home's grammar (`plans: whole`);
- the local engine starts too (hedged) when the remote has no first token by `first_token_share` of the
  request's budget (its deadline, else `timeout_s`), or has been silent that long, or failed;
- the first valid answer wins and the other is ended: a late remote answer is dropped;
- a remote answer is checked here before it counts: it must be well formed, and with a grammar every
  token of it must be one the home's grammar allows (llguidance, the same matcher the local engine
  decodes with). One that is not is a failure: the local engine answers;
- each failure makes the remote rest (`backoff_s`, doubling, up to `backoff_max_s`); the next request
  after that tries it again, and a success ends the resting. A well-formed answer on the home's grammar
  with a step the home's state does not allow is the planner's problem, not the link's or the server's:
  the local engine answers, and the remote is not rested.

Every answer says why the local engine answered in words (`fallback`) and as one of REASONS
(`fallback_reason`, what /metrics counts).

A remote answer is not streamed while it races: its text reaches the client once it has won and been
checked (a streamed plan then arrives in one piece). The check runs on a fork of the request's
constraint, so under the home's state (issue #32) it simulates the steps as the local engine's
narrowing would; the planner's own check then runs on the text, the same for both engines:
`HedgedRequest.result` is an ordinary generate.Result.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any, Optional

from ...runtime.backend import Backend, Capabilities, EngineStats, Request
from ...runtime.constraint import Constraint
from ...runtime.generate import Result, SpecStats, Timings
from ...runtime.sampling import SamplingParams
from .answer_check import check_answer
from .client import RemoteCall, RemoteError, served_model
from .settings import RemoteSettings
from .stepwise import StepwiseCall

log = logging.getLogger("orin_llm.remote")
WAIT_S = 0.02  # the longest the engine's thread waits for remote news when the local engine is idle
# why the local engine answered: before asking (resting, no_grammar_text), the link (unreachable, cut_off),
# the engine (http_error, engine_error, malformed), the answer (off_grammar, infeasible, incomplete,
# finish_reason), the clock (no_first_token, silent, timeout)
REASONS = ("resting", "no_grammar_text", "unreachable", "cut_off", "http_error", "engine_error", "malformed",
           "off_grammar", "infeasible", "incomplete", "finish_reason", "no_first_token", "silent", "timeout",
           "error")


class Breaker:
    """Whether the remote may be tried now: after a failure it rests, longer after each failure in a row."""

    def __init__(self, settings: RemoteSettings):
        self.settings = settings
        self.failures = 0
        self.resting_until = 0.0  # time.monotonic()
        self.last_error: Optional[str] = None

    def why_not(self) -> Optional[str]:
        left = self.resting_until - time.monotonic()
        if left > 0:
            return f"the remote engine is resting {left:.1f} s more after: {self.last_error}"
        return None

    def failed(self, error: str) -> None:
        self.failures += 1
        rest = min(self.settings.backoff_max_s, self.settings.backoff_s * 2 ** (self.failures - 1))
        self.resting_until = time.monotonic() + rest
        self.last_error = error
        log.warning("remote engine %s failed (%s); resting %.1f s", self.settings.host, error, rest)

    def succeeded(self) -> None:
        self.failures, self.resting_until = 0, 0.0


class HedgedRequest:
    """A plan (or chat) request raced between the remote engine and the local one (module doc)."""

    def __init__(self, backend: HedgedBackend, local: Request, prompt_ids: list[int], params: SamplingParams,
                 constraint: Optional[Constraint], check: Optional[Constraint],
                 remote_why_not: Optional[tuple[str, str]]):
        self.backend, self.local, self.params = backend, local, params
        self.prompt_ids = list(prompt_ids)
        self.constraint = constraint  # what the planner reads: the plan was constrained
        self._check = check  # a copy of the grammar's matcher, to check a remote answer with
        self.started: Optional[float] = None  # perf_counter(): the caller's (planner.start)
        self.deadline: Optional[float] = None  # time.monotonic(); the worker sets the job's before submitting
        self.pin = None
        self.remote: Optional[RemoteCall] = None
        self.remote_why_not = remote_why_not  # set, (reason, words): the remote is not asked at all
        self.fallback_reason, self.fallback = remote_why_not or (None, None)  # why the local engine answered
        self.winner: Optional[str] = "local" if remote_why_not else None
        self.local_submitted = False
        self.submitted_at = 0.0
        self._error: Optional[BaseException] = None
        self._result: Optional[Result] = None
        self._remote_taken = False

    # -- what the worker and the planner read
    @property
    def done(self) -> bool:
        if self.winner == "local":
            return self.local.done
        return self._result is not None or self._error is not None

    @property
    def error(self) -> Optional[BaseException]:
        return self.local.error if self.winner == "local" else self._error

    @error.setter
    def error(self, value: Optional[BaseException]) -> None:
        self._error = value

    @property
    def result(self) -> Optional[Result]:
        return self.local.result if self.winner == "local" else self._result

    @property
    def timings(self) -> Timings:
        if self.winner == "local":
            return self.local.timings
        return self._result.timings if self._result is not None else Timings()

    def take(self) -> list[str]:
        if self.winner == "local":
            return self.local.take()
        if self.winner == "remote" and not self._remote_taken:
            self._remote_taken = True
            return [self._result.text] if self._result and self._result.text else []
        return []

    @property
    def report(self) -> dict:
        """What the answer says about who served it (server/worker.py adds it to the payload)."""
        out: dict[str, Any] = {"served_by": self.winner or "remote"}
        if self.winner == "local" and self.fallback:
            out["fallback"] = self.fallback
            out["fallback_reason"] = self.fallback_reason or "error"
        if self.remote is not None and self.winner == "remote":
            out["remote"] = {"url": self.backend.settings.url, **self.remote.split(),
                             "cached_tokens": self.remote.cached_tokens, "requests": self.remote.requests}
        return out

    # -- the race, advanced by HedgedBackend.step on the engine's thread
    def budget(self) -> tuple[float, float]:
        """(hedge_after_s, abandon_after_s) since submission."""
        s = self.backend.settings
        total = s.timeout_s if self.deadline is None else max(0.0, self.deadline - self.submitted_at)
        return total * s.first_token_share, total

    def start_local(self, why: str, reason: str) -> None:
        if not self.local_submitted:
            self.local_submitted = True
            if self.fallback is None:
                self.fallback, self.fallback_reason = why, reason
            self.local.started = self.started
            self.backend.local.submit(self.local)

    def advance(self, now: float) -> None:
        if self.winner is not None:
            return
        call = self.remote
        assert call is not None
        if self.local_submitted and self.local.done and self.local.error is None:
            self._lose_remote(call, "slower than the local engine")
            self.winner = "local"
            return
        if call.done:
            if call.error is None:
                problem = check_answer(call, self._check, self.backend.local.encode, self.backend.local.eos_ids)
                if problem is None:
                    self._win_remote(call)
                    return
                call.error = RemoteError(*reversed(problem))
            if call.error.kind == "infeasible":  # the server did its part (module doc): no rest
                self.backend.breaker.succeeded()
            else:
                self.backend.breaker.failed(str(call.error))
            self.fallback, self.fallback_reason = f"remote failed: {call.error}", call.error.kind
            self.start_local(self.fallback, self.fallback_reason)
            self.winner = "local"
            return
        hedge_after, abandon_after = self.budget()
        since = now - self.submitted_at
        silent = since if call.first_at is None else time.perf_counter() - (call.last_at or call.first_at)
        if not self.local_submitted and (silent >= hedge_after):
            what, reason = ("no first token", "no_first_token") if call.first_at is None else ("no answer", "silent")
            self.start_local(f"{what} from the remote engine within {hedge_after * 1e3:.0f} ms", reason)
        if since >= abandon_after:
            self._lose_remote(call, f"no answer within {abandon_after * 1e3:.0f} ms")
            self.start_local("remote timed out", "timeout")
            self.winner = "local"

    def _lose_remote(self, call: RemoteCall, why: str) -> None:
        call.cancel()
        self.backend.breaker.failed(why)

    def _win_remote(self, call: RemoteCall) -> None:
        if self.local_submitted and not self.local.done:
            self.backend.local.abort(self.local)
        self.backend.breaker.succeeded()
        text = call.text
        ids = self.backend.local.encode(text) if text else []
        usage = call.usage
        prompt = usage["prompt_tokens"] or len(self.prompt_ids)
        cached = call.cached_tokens
        sent = call.sent_at or time.perf_counter()
        timings = Timings(prompt_tokens=prompt, cached_prompt_tokens=cached, computed_prompt_tokens=prompt - cached,
                          completion_tokens=usage["completion_tokens"] or len(ids),
                          ttft_s=(call.first_at or call.done_at or sent) - sent,
                          total_s=(call.done_at or sent) - sent,
                          queue_s=max(0.0, sent - call.first_connect_s - (self.started or sent)))
        reason = "length" if call.finish_reason == "length" else "stop"
        self._result = Result(text, ids, reason, timings, SpecStats(drafter="remote"))
        self.winner = "remote"


class HedgedBackend:
    """The local Backend, with requests raced against a remote engine (module doc)."""

    def __init__(self, local: Backend, settings: RemoteSettings):
        self.local, self.settings = local, settings
        self.breaker = Breaker(settings)
        self.racing: list[HedgedRequest] = []
        self.changed = threading.Event()
        self._model: Optional[str] = settings.model

    # -- the local engine's, as is
    manifest = property(lambda self: self.local.manifest)
    tokenizer = property(lambda self: self.local.tokenizer)
    eos_ids = property(lambda self: self.local.eos_ids)
    max_input_len = property(lambda self: self.local.max_input_len)
    max_seq_len = property(lambda self: self.local.max_seq_len)

    @classmethod
    def load(cls, engine_dir: str | Path, **options: Any) -> Backend:
        raise TypeError("HedgedBackend wraps a loaded engine: HedgedBackend(load_engine(...), settings)")

    @property
    def name(self) -> str:
        return self.local.name

    @property
    def capabilities(self) -> Capabilities:
        return self.local.capabilities

    def encode(self, text: str) -> list[int]:
        return self.local.encode(text)

    def chat_text(self, messages: list[dict], add_generation_prompt: bool = True,
                  tools: Optional[list[dict]] = None) -> str:
        return self.local.chat_text(messages, add_generation_prompt, tools)

    def chat_ids(self, messages: list[dict[str, str]]) -> list[int]:
        return self.local.chat_ids(messages)

    def check_prompt(self, n: int) -> None:
        self.local.check_prompt(n)

    def vocabulary(self):
        return self.local.vocabulary()

    def pin_request(self, ids: list[int]) -> Request:
        return self.local.pin_request(ids)

    def pin(self, ids: list[int]) -> Any:
        return self.local.pin(ids)

    def unpin(self, pin: Any, /) -> None:
        self.local.unpin(pin)

    def cached_prefix(self, prompt_ids: list[int]) -> int:
        return self.local.cached_prefix(prompt_ids)

    def tune(self, max_running: Optional[int] = None, prefill_chunk_tokens: Optional[int] = None) -> None:
        self.local.tune(max_running, prefill_chunk_tokens)

    def persist_histories(self, directory: Path) -> None:
        self.local.persist_histories(directory)

    def save_histories(self) -> None:
        self.local.save_histories()

    def stats(self) -> EngineStats:
        return self.local.stats()

    def kv_usage(self) -> dict:
        return self.local.kv_usage()

    def kernels(self) -> dict:
        return self.local.kernels()

    def close(self) -> None:
        for r in self.racing:
            if r.remote is not None:
                r.remote.cancel()
        self.local.close()

    # -- requests
    def generate(self, prompt_ids: list[int], params: SamplingParams, speculation: str = "auto",
                 constraint: Optional[Constraint] = None, history: str = "chat") -> HedgedRequest:
        check = None
        resting = self.breaker.why_not()
        why_not = ("resting", resting) if resting else None
        if constraint is not None:
            if constraint.lark is None:
                why_not = why_not or ("no_grammar_text",
                                      "this constraint has no Lark form to send to the remote engine")
            else:  # the local request consumes `constraint`; the remote's answer is checked on a copy
                # (with the home's state too, where the plan's constraint is narrowed by it)
                check = constraint.fork()
        extra = {"constraint": constraint} if constraint is not None else {}
        local = self.local.generate(prompt_ids, params, speculation, history=history, **extra)
        return HedgedRequest(self, local, prompt_ids, params, constraint, check, why_not)

    def submit(self, request: Request, /) -> None:
        if not isinstance(request, HedgedRequest):
            return self.local.submit(request)
        request.submitted_at = time.monotonic()
        if request.started is None:
            request.started = time.perf_counter()
        if request.winner == "local":
            return request.start_local(request.fallback or "local", request.fallback_reason or "error")
        hedge_after, abandon_after = request.budget()
        p = request.params
        lark = request.constraint.lark if request.constraint else None
        prompt = request.prompt_ids
        if self.settings.text_prompt:  # the same prompt as text (flavors.py): the chat template is in it already
            prompt = self.local.tokenizer.decode(request.prompt_ids, skip_special_tokens=False)
        args = (self.settings, self._served_model, prompt, p.max_tokens, p.temperature, p.top_p, p.seed,
                p.stop, lark, self.changed)
        steps = request.constraint.steps() if request.constraint is not None else None
        if self.settings.plans == "stepwise" and steps is not None:
            request.remote = StepwiseCall(*args, timeout_s=max(0.05, abandon_after), steps=steps,
                                          encode=self.local.encode)
        else:
            request.remote = RemoteCall(*args, timeout_s=max(0.05, abandon_after))
        request.remote.start()
        self.racing.append(request)

    def _served_model(self) -> str:
        """On a remote call's thread: --remote-model, else the engine's first /v1/models entry (asked once)."""
        if self._model is None:
            self._model = served_model(self.settings, self.settings.timeout_s)
        return self._model

    def step(self) -> list[Request]:
        self._advance()
        ran: list[Request] = []
        if self.local.busy:
            ran = self.local.step()
        elif self.racing:
            self.changed.wait(WAIT_S)
        self.changed.clear()
        self._advance()
        return ran

    def _advance(self) -> None:
        now = time.monotonic()
        for r in list(self.racing):
            r.advance(now)
            if r.winner is not None:
                self.racing.remove(r)

    def abort(self, request: Request, /) -> None:
        if not isinstance(request, HedgedRequest):
            return self.local.abort(request)
        if request.remote is not None and not request.remote.done:
            request.remote.cancel()
        if request in self.racing:
            self.racing.remove(request)
        if request.local_submitted and not request.local.done:
            self.local.abort(request.local)
        if request.winner is None:
            request.winner = "local" if request.local_submitted else "remote"
            request._error = request._error or RemoteError("aborted")

    @property
    def busy(self) -> bool:
        return self.local.busy or bool(self.racing)
