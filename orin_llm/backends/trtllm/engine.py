"""A TensorRT-LLM 0.12.0-jetson engine directory behind runtime/backend.py's `Backend`.

`TrtllmEngine` implements the interface runtime/engine.py's `Engine` implements (load, generate,
submit, step, abort, pin_request/pin/unpin, stats, capabilities, ...), and its requests
(backends/trtllm/generation.py) are `Request`s as runtime/generate.py's `Generation` is, so the planner
and the server do not care which backend serves them. What differs is in `capabilities`.

Stepping: `step` starts what has room and advances each running request to its next text delta (the
executor's next response, or several while they decide no text). Up to `max_running` requests run at
once: the target engine's max_batch_size (its config.json, what trtllm-build sized the engine and the
memory plan its KV for), so the daemon runs as many as the plan reserved KV for, and their requests are
in the executor together, which batches them in flight (generation.py: a request whose response has not
come yields and the next one is stepped; the target's responses are read for all of them at once).

Every binding call goes through `bindings.executor_module()`; the keyword names are those
of `tensorrt_llm.bindings.executor` at v0.12.0 (R) / v0.12.0-jetson (J), see
docs/trtllm-0.12-jetson.md §4. Citations "R≡J path Lx" are lines of tag v0.12.0 (28fb9aac), the
file being unchanged on the jetson branch; "J" is read at the jetson tip (20a7cec).

Loading (the engines' config.json, the memory plan's KV tokens, 0.12's load-time rules, one Executor
per model with its KvCacheConfig and ExecutorConfig): backends/trtllm/loading.py. Prefix reuse (the pin
request; what the pins can serve, `cached_prefix()` here, and what a request was really served, measured
from the target's KvCacheStats): backends/trtllm/prefix_reuse.py. The KV figures of /health and /metrics
(`kv_usage`) and the reading of the target's iteration stats: backends/trtllm/kv_stats.py. The executor's
Request and SamplingConfig: backends/trtllm/request.py.

The requests of a planning call, plain or speculative, and their responses are
backends/trtllm/generation.py's; what a request knows of the engine, backends/trtllm/stepped.py's.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Optional

from ...errors import OrinError, PromptTooLong
from ...manifest import Manifest
from ...runtime.backend import Capabilities, EngineStats
from ...runtime.constraint import Constraint, Vocabulary
from ...runtime.drafters import AUTO_SPECULATION, DEFAULT_HISTORY
from ...runtime.engine_files import EngineText, eos_ids, lookup_seed
from ...runtime.generate import Result
from ...runtime.sampling import SamplingParams
from ...runtime.speculative import LookupDrafter
from ...runtime.tasks import run_pin
from .generation import TrtllmGeneration
from .grammar import GrammarProcessor
from .kv_stats import KvStats, kv_usage
from .loading import DEFAULT_MAX_BATCH, load_engine_dir
from .prefix_reuse import TrtllmPin
from .request import greedy_config, make_request, sampled_config
from .responses import STEP_WAIT, Mailbox, enqueue_request, follow
from .stepped import Stepped
from .watchdog import SHUTDOWN_WAIT_S, ExecutorStalled, Watchdog, shut_down

log = logging.getLogger(__name__)


class TrtllmEngine(EngineText):
    """An engine directory built with backend "trtllm": TensorRT-LLM executors + our tokenizer."""

    backend = "trtllm"

    def __init__(self, engine_dir: Path, manifest: Manifest, tokenizer, module: Any, target: Any,
                 draft: Optional[Any] = None, *, block_reuse: bool, tokens_per_block: int, draft_len: int,
                 chunked_context: bool = False, max_running: int = DEFAULT_MAX_BATCH, lookup: bool = True):
        self.dir, self.manifest, self.tokenizer, self.module = engine_dir, manifest, tokenizer, module
        self.target_executor, self.draft_executor = target, draft
        self.block_reuse, self.tokens_per_block = block_reuse, tokens_per_block
        self.chunked_context = chunked_context
        self.kv_stats = KvStats(target)  # the target's KvCacheStats as last read (kv_stats.py)
        self.draft_len = draft_len  # 0: the target engine takes no external draft tokens
        self.lookup_on = lookup  # --trtllm-features: the lookup drafter may propose (features.py)
        self.max_input_len = manifest.limits["max_input_len"]
        self.max_seq_len = manifest.limits["max_seq_len"]
        # generation_config.json (Llama 3's <|eot_id|>) is copied into <engine>/tokenizer by the build
        self.eos_ids = eos_ids(tokenizer, engine_dir / "tokenizer")
        if not self.eos_ids:
            raise OrinError(f"{engine_dir}/tokenizer: no EOS token id (tokenizer_config.json or "
                            "generation_config.json); rebuild the engine")
        # Request takes one end_id (R≡J bindings.cpp L226-240); the other EOS ids go in its stop_words.
        eos = tokenizer.eos_token_id
        self.end_id = eos if eos in self.eos_ids else min(self.eos_ids)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.end_id
        # The prefixes whose KV blocks pin() stored (block reuse) or recorded, one per pinned home, the
        # latest last. 0.12's block pool has no pinning: stored blocks are evicted least-recently-used
        # like any others (a request's cached_prompt_tokens measures what it really found).
        self.pins: list[tuple[int, ...]] = []
        self.lookup_seed = lookup_seed(engine_dir, manifest)
        self.lookup = LookupDrafter(seed=self.lookup_seed)  # one per engine: its history is the point
        self.grammar: Optional[GrammarProcessor] = None  # set by load(): the target's logits post-processor
        self._vocab: Optional[Vocabulary] = None
        self._closed = False
        self.waiting: deque[Stepped] = deque()  # submitted requests, in order
        self.running: list[Stepped] = []  # at most max_running
        self.max_running = max_running  # the target engine's max_batch_size (module doc)
        self._mailboxes: dict[int, Mailbox] = {}  # id(executor) -> its responses, sorted by request
        self.target_enqueues = 0  # requests enqueued on the target since load (prefix_reuse.py's measurement)
        # set by load(): new executors from the same engine files, and what watches the ones running (watchdog.py)
        self.make_executors: Optional[Callable[[], dict[str, Any]]] = None
        self.watchdog = Watchdog()

    @classmethod
    def load(cls, engine_dir: str | Path, draft: bool = True, manifest: Optional[Manifest] = None,
             features: Optional[frozenset[str]] = None) -> TrtllmEngine:
        """draft=False leaves the draft engine unloaded (no draft_model/combined speculation). manifest: the
        directory's manifest, read and verified already (backends/loader.py); else read here. features: the
        ones turned on (features.py; None: all the engine was built for). How: loading.py."""
        return load_engine_dir(cls, engine_dir, draft, manifest, features)

    # ------------------------------------------------------------------ the Engine surface

    def check_prompt(self, n: int) -> None:
        if n > self.max_input_len:
            raise PromptTooLong(n, self.max_input_len)

    @property
    def executors(self) -> list[Any]:
        return [self.target_executor] + ([self.draft_executor] if self.draft_executor is not None else [])

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(backend="trtllm", max_batch=self.max_running, tunable_batch=False, paced_prefill=False,
                            persistent_histories=False, grammars=self.grammar is not None, kernels=False,
                            pins_hold=False,
                            speculation=tuple(self.speculation_modes),
                            constrained_speculation=tuple(self.speculation_modes))

    # ------------------------------------------------------------------ stepping requests

    def submit(self, request: Stepped) -> None:
        if request.started is None:
            request.started = time.perf_counter()
        self.waiting.append(request)

    def step(self) -> list[Stepped]:
        """Start what has room, then advance each running request to its next delta (or its end). When
        none could move (each waits for the executor), wait at most STEP_WAIT for any response."""
        while self.waiting and len(self.running) < self.max_running:
            self.running.append(self.waiting.popleft())
        ran = list(self.running)
        moved = ended = False
        for request in ran:
            moved |= request.advance()  # a failure is the request's (request.error), not the step's
            if request.done:
                self.running.remove(request)
                ended = True
        if ran and not moved:
            self.mailbox(self.target_executor).pump(STEP_WAIT)
        stalled = self.watchdog.check(len(self.running), moved)
        if stalled is not None:
            self.restart(f"TensorRT-LLM's executor made no progress for {stalled:.0f} s with {len(self.running)} "
                         f"request(s) in flight (over the profile's executor_stall_s, {self.watchdog.stall_s:g} s: "
                         "0.12's cancel race, docs/trtllm-0.12-jetson.md §13); it was restarted, send the request "
                         "again")
            return ran
        if ended or (ran and self.kv_stats.due()):
            self.reused_blocks(read=True)  # the KV figures kv_usage reports
        return ran

    def restart(self, reason: str) -> None:
        """Fail the requests in flight with `reason`, replace the executors with new ones from the same
        engine files and keep the waiting requests for them (watchdog.py says why and what it cannot do)."""
        if self.make_executors is None:
            raise OrinError(f"{reason}; this engine cannot make new executors")
        log.error("%s", reason)
        for request in self.running:
            request.fail(ExecutorStalled(reason))
        self.running.clear()
        left = shut_down(self.executors)
        if left:
            log.error("%d old executor(s) did not shut down in %.0f s: their engine and KV memory stay held until "
                      "the daemon restarts", left, SHUTDOWN_WAIT_S)
        made = self.make_executors()
        self.target_executor, self.draft_executor = made["target"], made.get("draft")
        self._mailboxes.clear()
        self.kv_stats = KvStats(self.target_executor)
        self.pins.clear()  # the stored prefix blocks went with the old executor's pool
        self.watchdog.restarted(reason, left)
        log.warning("TensorRT-LLM executors restarted (%d so far); %d waiting request(s) go on", self.watchdog.restarts,
                    len(self.waiting))

    def abort(self, request: Stepped) -> None:
        """End a request early: the executor's request in flight is cancelled."""
        if request in self.running:
            self.running.remove(request)
        elif request in self.waiting:
            self.waiting.remove(request)
        request.close()

    @property
    def busy(self) -> bool:
        return bool(self.waiting or self.running)

    def stats(self) -> EngineStats:
        return EngineStats(waiting=len(self.waiting), running=len(self.running), max_running=self.max_running)

    def tune(self, max_running: Optional[int] = None, prefill_chunk_tokens: Optional[int] = None) -> None:
        if max_running is not None or prefill_chunk_tokens is not None:
            raise OrinError("a TensorRT-LLM engine batches and paces prompts inside its executor: it takes no "
                            "scheduler settings")

    def persist_histories(self, directory: Path) -> None:
        raise OrinError(f"a TensorRT-LLM engine keeps one lookup history in memory; it cannot persist in {directory}")

    def save_histories(self) -> None:
        pass  # nothing persists (persist_histories)

    def kernels(self) -> dict:
        return {}  # TensorRT-LLM's own kernels: none of our CPU fast paths

    # ------------------------------------------------------------------ pins

    def pin_request(self, ids: list[int]) -> TrtllmPin:
        """A request that runs `ids` once on each engine so their KV blocks are stored for reuse (see
        prefix_reuse.py: whole blocks only), stepped like any other; its `pin` is the handle `unpin` takes."""
        self.check_prompt(len(ids))
        return TrtllmPin(self, list(ids))

    def pin(self, ids: list[int]) -> tuple[int, ...]:
        """pin_request, run now. Without block reuse there is nothing to keep: the ids are only recorded."""
        return run_pin(self, ids)

    def unpin(self, handle: Optional[tuple[int, ...]]) -> None:
        """Forget a pinned prefix (a home replaced or removed). Its blocks stay in the executor's pool
        until evicted: 0.12 has no call that frees stored blocks."""
        if handle in self.pins:
            self.pins.remove(handle)

    @property
    def pinned(self) -> list[int]:
        """The latest pinned prefix (the default home's, unless a named home was pinned after it)."""
        return list(self.pins[-1]) if self.pins else []

    def cached_prefix(self, prompt_ids: list[int]) -> int:
        """Prompt tokens whose KV blocks a pinned prefix stored: whole blocks of the longest one the
        prompt starts with. What a request was really served is measured (TrtllmGeneration:
        timings.cached_prompt_tokens); this is what the pins can serve at most (TensorRT-LLM evicts
        blocks least-recently-used when full)."""
        if not self.block_reuse:
            return 0
        n = max((len(p) for p in self.pins if 0 < len(p) < len(prompt_ids) and tuple(prompt_ids[:len(p)]) == p),
                default=0)
        return n // self.tokens_per_block * self.tokens_per_block

    @property
    def speculation_modes(self) -> list[str]:
        modes = ["auto", "none"]
        if self.draft_len > 0:  # the target was built with --speculative_decoding_mode draft_tokens_external
            if self.lookup_on:
                modes.append("lookup")
            if self.draft_executor is not None:
                modes += ["draft_model", "combined"] if self.lookup_on else ["draft_model"]
        return modes

    def resolve_speculation(self, speculation: str, params: SamplingParams) -> str:
        """The mode a request runs in; unavailable or unsupported ones are an error, never plain decoding."""
        if speculation not in self.speculation_modes:
            raise OrinError(f"speculation {speculation!r} is not available in engine {self.name!r} "
                            f"(available: {', '.join(self.speculation_modes)})")
        if speculation == "auto":
            # Speculation pays only when re-sending the context each step is cheap, i.e. with block
            # reuse (generation.py's module doc). Sampled requests decode plainly: the speculative path is verified
            # here for greedy decoding only (sampled lookup relies on the runtime's per-position
            # sampling, read in the sources but not yet run on the device).
            usable = self.block_reuse and params.greedy and AUTO_SPECULATION in self.speculation_modes
            return AUTO_SPECULATION if usable else "none"
        if speculation in ("draft_model", "combined") and not params.greedy:
            raise OrinError(
                f"speculation {speculation!r} with temperature > 0 needs the draft model's logits "
                "(ExternalDraftTokensConfig(logits=...) from a draft engine built with "
                "--gather_generation_logits), which this build does not produce; use temperature 0, or "
                "speculation \"lookup\" or \"none\"")
        return speculation

    def generate(self, prompt_ids: list[int], params: SamplingParams, speculation: str = "auto",
                 constraint: Optional[Constraint] = None, history: str = DEFAULT_HISTORY) -> TrtllmGeneration:
        """`constraint`: the request's grammar, applied by the target's logits post-processor on every
        step it decides, draft positions included; drafts are cut on the host at the first token it
        forbids (generation.py), so a constrained request speculates as an unconstrained one does.
        `history` is the torch engine's (one lookup history per engine here)."""
        if constraint is not None and self.grammar is None:
            raise OrinError("this TensorRT-LLM engine was loaded without its grammar post-processor")
        mode = self.resolve_speculation(speculation, params)
        prompt_ids = list(prompt_ids)
        if not prompt_ids:
            raise OrinError("empty prompt")
        self.check_prompt(len(prompt_ids))
        return TrtllmGeneration(self, prompt_ids, params, mode, constraint=constraint)

    def deltas(self, gen: TrtllmGeneration) -> Iterator[str]:
        """`gen`'s text deltas as they are decided (as Engine.deltas); closing the iterator cancels it."""
        return iter(gen)

    def run(self, gen: TrtllmGeneration) -> Result:
        """`gen` to its end: its result (as Engine.run)."""
        return gen.run()

    def vocabulary(self) -> Vocabulary:
        """The tokenizer as the grammar library sees it (built on first use), for the planner's grammar."""
        if self._vocab is None:
            vocab_size = self.manifest.target.arch.vocab_size
            self._vocab = Vocabulary(self.tokenizer, vocab_size, self.eos_ids)
        return self._vocab

    def stream(self, executor: Any, ids: list[int], max_new_tokens: int) -> Iterator[list[int]]:
        """Plain greedy decoding of `ids` on one executor, the target's or the draft's, streamed: each
        response's new tokens as they arrive (the benchmark times each engine with it; a Generation runs
        the target only). Read it to the end: an abandoned request is not cancelled."""
        request = self.request(ids, max_new_tokens, streaming=True, sampling=self.greedy_config())
        for tokens, _final in follow(self.mailbox(executor), self.enqueue(executor, request)):
            yield tokens

    def kv_usage(self) -> dict:
        """The target executor's KV pool as its KvCacheStats last said (kv_stats.py's kv_usage)."""
        return {**kv_usage(self.manifest, self.kv_stats.latest, self.tokens_per_block, self.pins, len(self.running)),
                "executor": self.watchdog.report()}

    def close(self) -> None:
        """Shut the executors down (frees their engines and KV caches); the engine is unusable after."""
        if not self._closed:
            self._closed = True
            for executor in self.executors:
                executor.shutdown()

    def __enter__(self) -> TrtllmEngine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ requests

    def enqueue(self, executor: Any, request: Any) -> int:
        """enqueue_request, its responses to be sorted into the executor's mailbox; noting that the
        target's KV stats may have moved (reused_blocks)."""
        request_id = enqueue_request(executor, request)
        self.mailbox(executor).open(request_id)
        if executor is self.target_executor:
            self.kv_stats.unread = True
            self.target_enqueues += 1
        return request_id

    def mailbox(self, executor: Any) -> Mailbox:
        box = self._mailboxes.get(id(executor))
        if box is None:
            box = self._mailboxes[id(executor)] = Mailbox(executor)
        return box

    def reused_blocks(self, read: bool = False) -> Optional[int]:
        """The target executor's cumulative KvCacheStats.reused_blocks (kv_stats.py), read from its
        iteration stats when a request ran since the last read (or `read`); None when its stats carry
        no KV stats. Reading drains the executor's stats: only this engine reads them."""
        return self.kv_stats.reused(read)

    def greedy_config(self) -> Any:
        return greedy_config(self.module)  # request.py: top_k=1

    def sampled_config(self, params: SamplingParams, seed: int) -> Any:
        return sampled_config(self.module, params, seed)

    def request(self, ids: list[int], max_new_tokens: int, streaming: bool, sampling: Any,
                draft: Optional[list[int]] = None, stop_ids: Iterable[int] = (),
                grammar_client: Optional[int] = None) -> Any:
        """An executor Request with this engine's end and pad ids (request.py)."""
        return make_request(self.module, ids, max_new_tokens, streaming, sampling, end_id=self.end_id,
                            pad_id=self.pad_id, draft=draft, stop_ids=stop_ids, grammar_client=grammar_client)
