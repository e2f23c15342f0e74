"""A request the TensorRT-LLM engine steps (`Stepped`: backends/trtllm/generation.py's planning call and
backends/trtllm/prefix_reuse.py's pin request are two), and what such a request knows of its engine
(`EngineView`, backends/trtllm/engine.py's TrtllmEngine).

A `Stepped` is a request as runtime/backend.py's `Request` has it, like runtime/generate.py's
`Generation`: the engine's `step` advances it to its next text delta (`advance`: one more response of
the executor, or several while they decide no text), the caller reads `take()`, `done`, `error`,
`result`; iterating it submits it and steps the engine, and closing the iterator (or `abort`) cancels
the request in flight. A step whose response has not come yields `WAIT`, and the engine steps the next
request (in-flight batching: backends/trtllm/generation.py's module doc)."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any, Optional, Protocol

from ...runtime.generate import Result
from ...runtime.sampling import SamplingParams
from ...runtime.speculative import LookupDrafter
from .grammar import GrammarProcessor
from .responses import Mailbox

WAIT = object()  # what a request's step yields when its response has not come: no progress


class EngineView(Protocol):
    """What a generation uses of its engine (backends/trtllm/engine.py's TrtllmEngine)."""

    tokenizer: Any
    eos_ids: set[int]
    max_input_len: int
    max_seq_len: int
    draft_len: int
    block_reuse: bool
    tokens_per_block: int
    target_executor: Any
    draft_executor: Optional[Any]
    lookup: LookupDrafter
    grammar: Optional[GrammarProcessor]
    pins: list[tuple[int, ...]]
    target_enqueues: int

    @property
    def executors(self) -> list[Any]: ...

    def request(self, ids: list[int], max_new_tokens: int, streaming: bool, sampling: Any,
                draft: Optional[list[int]] = None, stop_ids: Iterable[int] = (),
                grammar_client: Optional[int] = None) -> Any: ...

    def enqueue(self, executor: Any, request: Any) -> int: ...

    def mailbox(self, executor: Any) -> Mailbox: ...

    def cached_prefix(self, prompt_ids: list[int]) -> int: ...

    def reused_blocks(self, read: bool = False) -> Optional[int]: ...

    def greedy_config(self) -> Any: ...

    def sampled_config(self, params: SamplingParams, seed: int) -> Any: ...

    def submit(self, request: Any) -> None: ...

    def step(self) -> list: ...

    def abort(self, request: Any) -> None: ...



class Stepped:
    """A request the engine advances one step at a time: its `_steps()` generator, run to its next
    yield per step (a text delta, or "" where a step decided none). What the engine's caller reads
    between steps: `take()`, `done`, `error`, `result`, `timings`."""

    def __init__(self, engine: EngineView, prompt_ids: list[int]):
        self.engine, self.prompt_ids = engine, list(prompt_ids)
        self.started: Optional[float] = None  # as Generation.started: when the request began (submit sets it)
        self.deadline: Optional[float] = None  # backend.Request.deadline: the executor's steps do not read it
        self.error: Optional[BaseException] = None
        self.result: Optional[Result] = None
        self.pin: Optional[tuple[int, ...]] = None  # a pin request's handle, once done
        self._over = False
        self.pending: deque[str] = deque()
        self._it: Optional[Iterator[str]] = None

    def _steps(self) -> Iterator[Any]:
        """Text deltas ("" where a step decided none), or WAIT while a response has not come."""
        raise NotImplementedError

    @property
    def done(self) -> bool:
        """Over: finished, failed or ended early."""
        return self._over

    @property
    def report(self) -> dict:
        return {}  # served by this engine, always

    def advance(self) -> bool:
        """One step (engine.step calls it): the request's next text delta, its end, or its error;
        False when it only waited for a response (WAIT)."""
        if self._over:
            return False
        if self._it is None:
            self._it = self._steps()
        try:
            delta = next(self._it)
        except StopIteration:
            self._over = True
            return True
        except Exception as e:  # the request failed (its generator cancelled what was in flight)
            self.error, self._over = e, True
            return True
        if delta is WAIT:
            return False
        if delta:
            self.pending.append(delta)
        return True

    def fail(self, error: BaseException) -> None:
        """End it with `error`, leaving the executor alone (a stalled one: watchdog.py)."""
        self.forget()
        if self._it is not None:
            self._it.close()
        self.error, self._over = error, True

    def forget(self) -> None:
        """Drop what closing would cancel on the executor (a request's: TrtllmGeneration's)."""

    def close(self) -> None:
        """End it early (engine.abort calls it): the request in flight is cancelled."""
        if self._it is not None:
            self._it.close()
        self._over = True

    def take(self) -> list[str]:
        """The text deltas decided since the last call."""
        out = list(self.pending)
        self.pending.clear()
        return out

    def __iter__(self) -> Iterator[str]:
        """Text deltas as they are decided, stepping the engine (this request and any others it runs)."""
        engine = self.engine
        engine.submit(self)
        try:
            while True:
                while self.pending:
                    yield self.pending.popleft()
                if self.done:
                    break
                engine.step()
            if self.error is not None:
                raise self.error
        finally:
            if not self.done:
                engine.abort(self)  # closed early: cancel what is in flight
