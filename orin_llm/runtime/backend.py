"""The one interface both engines implement: the torch `Engine` (runtime/engine.py) and the
TensorRT-LLM `TrtllmEngine` (backends/trtllm/engine.py).

The planner and the server see an engine through `Backend` only. What the two can do differs, and
the difference is data: `Capabilities`, fixed at load, read by whoever must choose (the daemon's
options, /health, the planner's grammar), never found out by probing for attributes.

A request's life is the same on both: `generate` (or `pin_request`) makes it, `submit` queues it,
each `step` advances every running request by one step (torch: one forward over all their rows;
TensorRT-LLM: the executor's next response for each), `abort` ends it early. Whoever steps reads
the request's news (`take`, `done`, `error`, `result`) between steps: one worker loop serves both.

This module imports nothing of the engines: they import it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Protocol, runtime_checkable

from ..manifest import Manifest
from .constraint import Constraint, Vocabulary
from .sampling import SamplingParams


@dataclass(frozen=True)
class Capabilities:
    """What an engine can do, fixed when it is loaded."""

    backend: str  # the manifest's: "torch" or "trtllm"
    max_batch: int  # the most requests that run together (what its KV cache is sized for)
    tunable_batch: bool  # the daemon may lower max_batch (--max-batch); else the executor batches itself
    paced_prefill: bool  # prompts prefill in chunks of prefill_chunk_tokens per step (--prefill-chunk-tokens)
    persistent_histories: bool  # one lookup history per environment that the daemon persists (--state-dir);
    # else one history per engine, in memory
    grammars: bool  # vocabulary() serves plan grammars and structured outputs
    kernels: bool  # kernels() says which of our CPU fast paths run, or why not (/health)
    pins_hold: bool  # a pinned prefix is never evicted; else its stored blocks are evicted like any others
    speculation: tuple[str, ...]  # the `speculation` values a request may name
    # those a request with a grammar (a constrained plan, a structured answer) may name; None: the same
    constrained_speculation: Optional[tuple[str, ...]] = None


@dataclass(frozen=True)
class EngineStats:
    """What /health and /metrics report of the engine's requests, read on the worker's thread or
    scraped (an int read is atomic enough)."""

    waiting: int  # submitted, not yet running
    running: int  # in the running batch
    max_running: int  # the most that run together now (Capabilities.max_batch, or less with --max-batch)
    max_step_tokens: Optional[int] = None  # rows one step may run (None: the executor decides)
    prefill_chunk_tokens: Optional[int] = None  # prompt tokens a request prefills per step (None: not paced)


class Request(Protocol):
    """One request of either engine (runtime/generate.py's `Generation`, backends/trtllm/generation.py's
    `TrtllmGeneration` and `TrtllmPin`), as the one stepping the engine reads it."""

    prompt_ids: list[int]
    started: Optional[float]  # time.perf_counter() when the request began (submit sets it if no one did)
    # time.monotonic() by which its caller needs the answer (None: none), set before it is submitted: a
    # request that waits on a server or races one budgets by it; the engines' own steps do not read it
    # (the daemon's worker ends a request at its deadline)
    deadline: Optional[float]
    error: Optional[BaseException]  # set when it failed
    # generate.Result once it is done, and its Timings (queue_s, total_s, ...). Typed loosely: until the core
    # branch lands, runtime/generate.py imports the engine, so importing it here would close a circle.
    result: Any
    timings: Any
    pin: Any  # a pin request's handle for unpin(), once done

    @property
    def done(self) -> bool: ...

    @property
    def report(self) -> dict:
        """What the answer says of who served it (`served_by` and a remote's figures, where a remote
        races the local engine); {} for an engine that serves everything itself."""
        ...

    def take(self) -> list[str]:
        """The text deltas decided since the last call."""
        ...


@runtime_checkable
class Backend(Protocol):
    """An engine directory, loaded. One thread uses it (the caller, or the daemon's worker). Parameters
    before a `/` are passed by position: their names are each engine's own."""

    manifest: Manifest
    tokenizer: Any  # runtime/tokenizer.py's Tokenizer
    eos_ids: set[int]
    max_input_len: int
    max_seq_len: int

    @classmethod
    def load(cls, engine_dir: str | Path, **options: Any) -> Backend:
        """Load an engine directory of this backend (backends/loader.py picks the class by the manifest)."""
        ...

    @property
    def name(self) -> str: ...

    @property
    def capabilities(self) -> Capabilities: ...

    # -- text
    def encode(self, text: str) -> list[int]: ...

    def chat_text(self, messages: list[dict], add_generation_prompt: bool = True,
                  tools: Optional[list[dict]] = None) -> str: ...

    def chat_ids(self, messages: list[dict[str, str]]) -> list[int]: ...

    def check_prompt(self, n: int) -> None:
        """PromptTooLong when n tokens are over max_input_len."""
        ...

    def vocabulary(self) -> Vocabulary:
        """The tokenizer as the grammar library sees it (Capabilities.grammars)."""
        ...

    # -- requests
    def generate(self, prompt_ids: list[int], params: SamplingParams, speculation: str = "auto",
                 constraint: Optional[Constraint] = None, history: str = "chat") -> Request:
        """A request, not yet submitted. `history`: the lookup history it drafts from (one per environment
        where Capabilities.persistent_histories; else ignored). Iterating it submits it and steps the engine."""
        ...

    def submit(self, request: Request, /) -> None:
        """Queue a request: it runs in the next steps, with the others."""
        ...

    def step(self) -> list[Request]:
        """Advance every running request by one step (admitting waiting ones first); returns those that ran."""
        ...

    def abort(self, request: Request, /) -> None:
        """End a request early (cancelled, closed, failed); what it computed stays cached."""
        ...

    @property
    def busy(self) -> bool:
        """Whether it holds requests (waiting or running)."""
        ...

    # -- environment prefixes
    def pin_request(self, ids: list[int]) -> Request:
        """A request that computes `ids` and, when done, keeps them cached (its `pin`, for unpin); submitted
        and stepped like any other, so requests in flight advance meanwhile. Refused at once when too long."""
        ...

    def pin(self, ids: list[int]) -> Any:
        """pin_request, submitted and stepped until done; returns its pin."""
        ...

    def unpin(self, pin: Any, /) -> None: ...

    def cached_prefix(self, prompt_ids: list[int]) -> int:
        """Tokens of this prompt a request would not compute (what the pins or the cache serve)."""
        ...

    # -- the daemon's settings and reports
    def tune(self, max_running: Optional[int] = None, prefill_chunk_tokens: Optional[int] = None) -> None:
        """Scheduler settings (Capabilities.tunable_batch, paced_prefill); OrinError for one it cannot honour."""
        ...

    def persist_histories(self, directory: Path) -> None:
        """Keep the lookup histories in `directory` (Capabilities.persistent_histories)."""
        ...

    def save_histories(self) -> None:
        """Write the histories that changed, where they persist (OSError: the disk's)."""
        ...

    def stats(self) -> EngineStats: ...

    def kv_usage(self) -> dict:
        """The KV cache: device, tokens, capacity_tokens, bytes (and torch's pool, batch, preemptions)."""
        ...

    def kernels(self) -> dict:
        """Which of our CPU fast paths run, or why not (Capabilities.kernels; else empty)."""
        ...

    def close(self) -> None:
        """Free what the engine holds; unusable after."""
        ...

