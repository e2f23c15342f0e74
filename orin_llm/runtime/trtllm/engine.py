"""A TensorRT-LLM 0.12.0-jetson engine directory behind runtime/backend.py's `Backend`.

`TrtllmEngine` implements the interface runtime/engine.py's `Engine` implements (load, generate,
submit, step, abort, pin_request/pin/unpin, stats, capabilities, ...), and its requests
(runtime/trtllm/generation.py) are `Request`s as runtime/generate.py's `Generation` is, so the planner
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

Memory: one Executor per model, each with `KvCacheConfig(max_tokens=<memory plan>)`. Never
`free_gpu_memory_fraction`: on the Orin's unified memory "free GPU memory" is free *system* memory,
which counts what the policy model has not allocated yet, and the default (neither given) takes 90 %
of it (R≡J cpp/include/tensorrt_llm/executor/executor.h L439-455).

Prefix reuse: with the profile's `prefix_reuse`, both executors run with
`KvCacheConfig(enable_block_reuse=True)` (and `ExecutorConfig(enable_chunked_context=True)` with its
`chunked_context`); before creating them, `load` checks the engines against TensorRT-LLM 0.12's rules
(orin_llm/runtime/trtllm/rules.py) and refuses a combination 0.12 would refuse, naming the rule. `pin(ids)`
runs the prefix once (max_new_tokens=1) so its KV blocks are stored; a later prompt that starts with
the same tokens reuses them, in whole blocks of `tokens_per_block` (the engine's `--tokens_per_block`,
build/trtllm.py), never its last token. `cached_prefix()` is what the pinned prefix *can* serve.
What a request was really served is measured: `cached_prompt_tokens` is the growth of the target
executor's `KvCacheStats.reused_blocks` over the request × tokens_per_block (capped at the prompt
length − 1), when no other target request was enqueued meanwhile (else what the pins can serve,
generation.py `_measure_cached`). 0.12's counter is cumulative: the BlockManager's `mReusedBlocks` starts at 0 and only
grows, once per block matched when a request is added (loadOrAllocateBlocks in the code index's copy
of kvCacheManager.cpp of that series), and the iteration stats copy it as it is (first open
trtGptModelInflightBatching.cpp, getCurrentIterationStats); get_latest_iteration_stats() returns the
iterations since its last call (J executor.h); docs/trtllm-0.12-jetson.md §4, §7. Without reuse
nothing is stored and every request prefills its whole prompt.

KV figures (/health, /metrics: `kv_usage`): the target executor's own KvCacheStats as last read from
its iteration stats (max/free/used blocks, reused_blocks), not the plan's budget; the engine's thread
reads them (get_latest_iteration_stats drains them, so only this engine calls it) at most every
`STATS_EVERY_S` while requests run, and a scrape reads the copy.

The requests of a planning call, plain or speculative, and their responses are
runtime/trtllm/generation.py's.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Optional

from ...errors import OrinError, PromptTooLong
from ...manifest import Manifest, load_manifest, read_json_object
from ..backend import Capabilities, EngineStats, run_pin
from ..constraint import Constraint, Vocabulary
from ..drafters import AUTO_SPECULATION, DEFAULT_HISTORY
from ..engine_files import EngineText, eos_ids, load_tokenizer, lookup_seed
from ..generate import Result
from ..sampling import SamplingParams
from ..speculative import LookupDrafter
from .bindings import executor_module
from .generation import Stepped, TrtllmGeneration, TrtllmPin
from .grammar import PROCESSOR, GrammarProcessor, processor_map
from .responses import STEP_WAIT, Mailbox, enqueue_request, first_line, follow
from .rules import TOKENS_PER_BLOCK, EngineSetup, broken_rules

log = logging.getLogger(__name__)

DEFAULT_MAX_BATCH = 1  # an engine whose config.json and manifest name no max_batch_size
STATS_EVERY_S = 0.5  # how often a busy engine refreshes its KV figures from the executor's stats

# ---------------------------------------------------------------------------------- loading


def _engine_config(path: Path, role: str) -> dict:
    """The engine's own config.json, written by trtllm-build next to rank0.engine."""
    cfg_path = path / "config.json"
    if not cfg_path.is_file():
        raise OrinError(f"{path}: no TensorRT-LLM {role} engine here (config.json missing); rebuild the "
                        "engine with orin-llm build")
    return read_json_object(cfg_path)


def _build_value(cfg: dict, *keys: str) -> Any:
    # The runtime reads config.json["build_config"]["plugin_config"] and ["build_config"]["max_draft_len"]
    # (R cpp/tensorrt_llm/runtime/gptJsonConfig.cpp L289, L323, L405).
    node: Any = cfg.get("build_config", {})
    for key in keys:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def _tokens_per_block(cfg: dict) -> int:
    value = _build_value(cfg, "plugin_config", "tokens_per_block")
    if isinstance(value, int) and value > 0:
        return value
    return TOKENS_PER_BLOCK  # what our build passes (--tokens_per_block)


def _max_batch(cfg: dict, manifest: Manifest) -> int:
    """The requests the target engine runs at once: config.json's build_config.max_batch_size (what
    trtllm-build was given, R≡J build.py L77-81), else the manifest's limits."""
    value = _build_value(cfg, "max_batch_size")
    if not isinstance(value, int) or value <= 0:
        value = manifest.limits.get("max_batch_size", DEFAULT_MAX_BATCH)
    return max(1, int(value))


def _max_kv_tokens(manifest: Manifest, role: str, engine_dir: Path) -> int:
    plan = manifest.memory_plan
    if not plan:
        raise OrinError(f"{engine_dir}: the manifest has no memory_plan, which sizes a trtllm engine's KV "
                        "cache; rebuild the engine with orin-llm build")
    per_model = plan.get(role) if isinstance(plan.get(role), dict) else {}
    tokens = per_model.get("max_kv_tokens") or plan.get("max_kv_tokens")
    if not isinstance(tokens, int) or tokens <= 0:
        raise OrinError(f"{engine_dir}: memory_plan has no positive max_kv_tokens for the {role}; rebuild "
                        "the engine with orin-llm build")
    return tokens


# config.json's build_config.speculative_decoding_mode is BuildConfig's IntFlag written as its int
# (R≡J builder.py BuildConfig.to_dict); SpeculativeDecodingMode: NONE = auto() = 1,
# DRAFT_TOKENS_EXTERNAL = auto() = 2 (R≡J tensorrt_llm/models/modeling_utils.py L65-86).
DRAFT_TOKENS_EXTERNAL = 2


def _engine_setup(role: str, kv_cache: str, cfg: dict, block_reuse: bool, chunked: bool) -> EngineSetup:
    """What this engine was built with (its config.json) and is about to be loaded with: the facts
    TensorRT-LLM 0.12's load-time rules are about."""
    paged = _build_value(cfg, "plugin_config", "use_paged_context_fmha")
    mode = _build_value(cfg, "speculative_decoding_mode")
    max_draft = _build_value(cfg, "max_draft_len")
    external = mode == DRAFT_TOKENS_EXTERNAL if isinstance(mode, int) else isinstance(max_draft, int) and max_draft > 0
    return EngineSetup(role=role, kv_cache=kv_cache, paged_context_fmha=bool(paged), draft_tokens_external=external,
                       block_reuse=block_reuse, chunked_context=chunked)


def _make_executor(module: Any, path: Path, role: str, setup: EngineSetup, max_kv_tokens: int,
                   grammar: Optional[GrammarProcessor] = None) -> Any:
    # KvCacheConfig(enable_block_reuse=False, max_tokens=None, ...) (R≡J bindings.cpp L323-340);
    # ExecutorConfig(max_beam_width=1, ..., kv_cache_config=KvCacheConfig(), enable_chunked_context=False, ...,
    # logits_post_processor_map=None, ...) (R≡J L518-547; J model_runner_cpp.py from_dir sets
    # enable_chunked_context the same way). The grammar's post-processor: runtime/trtllm/grammar.py.
    kv = module.KvCacheConfig(enable_block_reuse=setup.block_reuse, max_tokens=max_kv_tokens)
    extra = {"logits_post_processor_map": processor_map(grammar)} if grammar is not None else {}
    config = module.ExecutorConfig(max_beam_width=1, kv_cache_config=kv, enable_chunked_context=setup.chunked_context,
                                   **extra)
    try:
        # Executor(model_path, model_type, executor_config) (R≡J: executor.cpp initBindings; the jetson
        # overload with use_mmap is not used: mmap only helps static batching, README4Jetson §3).
        return module.Executor(model_path=str(path), model_type=module.ModelType.DECODER_ONLY,
                               executor_config=config)
    except RuntimeError as e:  # TllmException: engine from another GPU / TensorRT version, out of memory
        raise OrinError(f"{path}: TensorRT-LLM could not load the {role} engine: {first_line(str(e))}; "
                        "rebuild it on this device (orin-llm build) or lower the memory plan") from None


class TrtllmEngine(EngineText):
    """An engine directory built with backend "trtllm": TensorRT-LLM executors + our tokenizer."""

    backend = "trtllm"

    def __init__(self, engine_dir: Path, manifest: Manifest, tokenizer, module: Any, target: Any,
                 draft: Optional[Any] = None, *, block_reuse: bool, tokens_per_block: int, draft_len: int,
                 chunked_context: bool = False, max_running: int = DEFAULT_MAX_BATCH):
        self.dir, self.manifest, self.tokenizer, self.module = engine_dir, manifest, tokenizer, module
        self.target_executor, self.draft_executor = target, draft
        self.block_reuse, self.tokens_per_block = block_reuse, tokens_per_block
        self.chunked_context = chunked_context
        # The target's cumulative KvCacheStats.reused_blocks as last read (module doc), whether a target
        # request ran since, and whether its iteration stats carry KV stats at all.
        self._reused_blocks = 0
        self._reuse_unread = False
        self._kv_stats = True
        self.draft_len = draft_len  # 0: the target engine takes no external draft tokens
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
        self.target_enqueues = 0  # requests enqueued on the target since load (generation.py's measurement)
        self._kv_latest: Optional[Any] = None  # the target's KvCacheStats as last read
        self._stats_read = 0.0

    @classmethod
    def load(cls, engine_dir: str | Path, draft: bool = True, manifest: Optional[Manifest] = None) -> TrtllmEngine:
        """draft=False leaves the draft engine unloaded (no draft_model/combined speculation). manifest: the
        directory's manifest, read and verified already (runtime/loader.py); else read here."""
        engine_dir = Path(engine_dir)
        manifest = manifest if manifest is not None else load_manifest(engine_dir)
        if manifest.backend != "trtllm":
            raise OrinError(f"{engine_dir} was built for the {manifest.backend!r} backend; the TensorRT-LLM "
                            "runtime loads trtllm engines only (runtime.loader.load_engine picks either)")
        module = executor_module()
        roles = {"target": manifest.target}
        if draft and manifest.draft is not None:
            roles["draft"] = manifest.draft
        configs = {role: _engine_config(engine_dir / entry.dir, role) for role, entry in roles.items()}
        kv_tokens = {role: _max_kv_tokens(manifest, role, engine_dir) for role in roles}
        # The build turns prefix reuse and chunked context on with paged context FMHA
        # (trtllm_rules.engine_setups); a profile without a key means the Profile default of the time it
        # was built: prefix_reuse True, chunked_context False.
        block_reuse = bool(manifest.profile.get("prefix_reuse", True))
        chunked = bool(manifest.profile.get("chunked_context", False))
        setups = {role: _engine_setup(role, entry.kv_cache.dtype, configs[role], block_reuse, chunked)
                  for role, entry in roles.items()}
        for role, setup in setups.items():  # what 0.12 would refuse at Executor(...), said before trying
            for rule in broken_rules(setup):
                raise OrinError(f"{engine_dir / roles[role].dir}: TensorRT-LLM 0.12 refuses to load this {role} "
                                f"engine with this manifest's profile ({rule.cite()}); rebuild it with orin-llm "
                                f"build from a profile that passes the build's checks: {rule.fix}")
        # The target verifies at most --max_draft_len tokens per request; more is an error (R≡J
        # cpp/include/tensorrt_llm/batch_manager/llmRequest.h L258-266), so k never exceeds it.
        max_draft = _build_value(configs["target"], "max_draft_len")
        max_draft = max_draft if isinstance(max_draft, int) and max_draft > 0 else 0
        if not setups["target"].draft_tokens_external:
            max_draft = 0
        draft_len = min(manifest.limits.get("draft_len", max_draft), max_draft)
        tokenizer = load_tokenizer(engine_dir / "tokenizer")
        executors: dict[str, Any] = {}
        grammar = GrammarProcessor(end_id=0)  # the target's: constrained plans (runtime/trtllm/grammar.py)
        try:
            for role, entry in roles.items():
                executors[role] = _make_executor(module, engine_dir / entry.dir, role, setups[role], kv_tokens[role],
                                                 grammar if role == "target" else None)
            engine = cls(engine_dir, manifest, tokenizer, module, executors["target"], executors.get("draft"),
                         block_reuse=block_reuse, tokens_per_block=_tokens_per_block(configs["target"]),
                         draft_len=draft_len, chunked_context=chunked,
                         max_running=_max_batch(configs["target"], manifest))
            grammar.end_id = engine.end_id
            engine.grammar = grammar
            return engine
        except BaseException:
            for ex in executors.values():
                ex.shutdown()
            raise

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
                            persistent_histories=False, grammars=True, kernels=False, pins_hold=False,
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
        if ended or (ran and time.monotonic() - self._stats_read > STATS_EVERY_S):
            self.reused_blocks(read=True)  # the KV figures kv_usage reports
        return ran

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
        """A request that runs `ids` once on each engine so their KV blocks are stored for reuse (see the
        module doc: whole blocks only), stepped like any other; its `pin` is the handle `unpin` takes."""
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
            modes.append("lookup")
            if self.draft_executor is not None:
                modes += ["draft_model", "combined"]
        return modes

    def resolve_speculation(self, speculation: str, params: SamplingParams) -> str:
        """The mode a request runs in; unavailable or unsupported ones are an error, never plain decoding."""
        if speculation not in self.speculation_modes:
            raise OrinError(f"speculation {speculation!r} is not available in engine {self.name!r} "
                            f"(available: {', '.join(self.speculation_modes)})")
        if speculation == "auto":
            # Speculation pays only when re-sending the context each step is cheap, i.e. with block
            # reuse (module doc). Sampled requests decode plainly: the speculative path is verified
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
        """The target executor's KV pool as its KvCacheStats last said (module doc): tokens held by running
        requests, the pool's capacity, block counts and the tokens served from stored blocks so far;
        `bytes` is the plan's KV allocation (what KvCacheConfig(max_tokens) sized). Before any stats
        were read, the plan's capacity and no blocks."""
        plan = self.manifest.memory_plan or {}
        target = plan.get("target") or {}
        planned = int(target.get("max_kv_tokens") or plan.get("max_kv_tokens") or 0)
        kv, tpb = self._kv_latest, self.tokens_per_block
        pool = {"blocks": 0, "used": 0, "free": 0, "hit_tokens": 0, "pinned": 0, "cached": 0, "evictions": 0}
        if kv is not None:
            pool.update(blocks=int(kv.max_num_blocks), used=int(kv.used_num_blocks), free=int(kv.free_num_blocks),
                        hit_tokens=int(kv.reused_blocks) * tpb)
        return {"device": "cuda (TensorRT-LLM)", "source": "executor" if kv is not None else "plan",
                "tokens": pool["used"] * tpb, "capacity_tokens": pool["blocks"] * tpb if kv is not None else planned,
                "bytes": int(target.get("kv_bytes") or 0), "pinned_tokens": sum(len(p) for p in set(self.pins)),
                "pool": pool, "batch": len(self.running)}

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
            self._reuse_unread = True
            self.target_enqueues += 1
        return request_id

    def mailbox(self, executor: Any) -> Mailbox:
        box = self._mailboxes.get(id(executor))
        if box is None:
            box = self._mailboxes[id(executor)] = Mailbox(executor)
        return box

    def reused_blocks(self, read: bool = False) -> Optional[int]:
        """The target executor's cumulative KvCacheStats.reused_blocks (module doc), read from its
        iteration stats when a request ran since the last read (or `read`); None when its stats carry
        no KV stats. Reading drains the executor's stats: only this engine reads them."""
        if read or self._reuse_unread:
            self._reuse_unread = False
            self._stats_read = time.monotonic()
            # get_latest_iteration_stats() -> list[IterationStats], the iterations since the last call
            # (J executor.h); IterationStats.kv_cache_stats is Optional[KvCacheStats] whose reused_blocks
            # is an int (R≡J bindings.cpp L88-132; tensorrtllm_backend v0.12.0 model.py L893-901 reads them
            # the same way).
            for stats in reversed(list(self.target_executor.get_latest_iteration_stats())):
                kv = stats.kv_cache_stats
                if kv is None:
                    if self._kv_stats:
                        log.warning("TensorRT-LLM iteration stats carry no kv_cache_stats: cached prompt tokens "
                                    "cannot be measured and are reported as 0")
                    self._kv_stats = False
                    break
                self._reused_blocks = int(kv.reused_blocks)
                self._kv_latest = kv
                break
        return self._reused_blocks if self._kv_stats else None

    def greedy_config(self) -> Any:
        # SamplingConfig(beam_width=1, top_k=None, top_p=None, ..., random_seed=None, temperature=None, ...)
        # (R≡J bindings.cpp L161-196). top_k=1 is greedy (argmax); run.py's default too (R examples/utils.py
        # L171). Unset top_k and top_p would also end up greedy (both default to 0, R
        # cpp/include/tensorrt_llm/layers/defaultDecodingParams.h L63-71, and k=0, p=0 becomes k=1 in R
        # cpp/tensorrt_llm/layers/topKSamplingLayer.cu L46-52), but we say it.
        return self.module.SamplingConfig(beam_width=1, top_k=1)

    def sampled_config(self, params: SamplingParams, seed: int) -> Any:
        # top_p in (0, 1], temperature >= 0 (checked by the C++ SamplingConfig); `random_seed`, not `seed`.
        return self.module.SamplingConfig(beam_width=1, top_p=params.top_p, temperature=params.temperature,
                                          random_seed=seed)

    def request(self, ids: list[int], max_new_tokens: int, streaming: bool, sampling: Any,
                draft: Optional[list[int]] = None, stop_ids: Iterable[int] = (),
                grammar_client: Optional[int] = None) -> Any:
        """Request(input_token_ids, max_new_tokens, streaming=False, sampling_config, output_config, end_id,
        pad_id, bad_words, stop_words, embedding_bias, external_draft_tokens_config, ...) (R≡J bindings.cpp
        L226-264)."""
        m = self.module
        # stop_words is list[list[int]], one token sequence per stop word (R≡J bindings.cpp L226-264; J
        # examples/run.py passes GLM-4's end ids as [[151329], [151336], [151338]]). Stop strings stay
        # TextStream's (they need text, not ids); a hit cancels the request.
        stops = [[t] for t in sorted(set(stop_ids) - {self.end_id})]
        kwargs: dict[str, Any] = dict(
            input_token_ids=list(ids), max_new_tokens=max_new_tokens, streaming=streaming,
            sampling_config=sampling,
            # Only the new tokens, streamed or not (OutputConfig, R≡J bindings.cpp L198-206).
            output_config=m.OutputConfig(exclude_input_from_output=True),
            end_id=self.end_id, pad_id=self.pad_id, stop_words=stops or None)
        if draft:
            # ExternalDraftTokensConfig(tokens, logits=None, acceptance_threshold=None) (R≡J L208-213):
            # no logits, so the target accepts by token id.
            kwargs["external_draft_tokens_config"] = m.ExternalDraftTokensConfig(tokens=list(draft))
        if grammar_client is not None:
            # logits_post_processor_name and client_id are Request keywords (R≡J bindings.cpp L226-264): the
            # named post-processor masks every step; the client_id finds the request's grammar state.
            kwargs["logits_post_processor_name"] = PROCESSOR
            kwargs["client_id"] = grammar_client
        return m.Request(**kwargs)
