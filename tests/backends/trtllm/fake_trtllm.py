"""A fake `tensorrt_llm.bindings.executor` (TensorRT-LLM v0.12.0-jetson) for tests.

Installed with `orin_llm.backends.trtllm.bindings.set_executor_module(fake_trtllm)`. Its classes take
exactly the keyword names of the 0.12 pybind bindings (cpp/tensorrt_llm/pybind/executor/bindings.cpp
and executor.cpp at v0.12.0, see docs/trtllm-0.12-jetson.md §4), in the same order: an unknown or
missing keyword is a TypeError, as pybind11 makes it, so a typo in the runtime fails a test. Every
construction is recorded in CALLS with the arguments the caller passed.

The Executor reads the engine's config.json (build_config: max_input_len, max_seq_len, max_draft_len,
speculative_decoding_mode, plugin_config) like the real one, and refuses at construction what 0.12's
batch manager refuses (its TrtGptModelInflightBatching constructor, docs/trtllm-0.12-jetson.md §8),
with 0.12's message text. These checks are written here, from the sources, and deliberately NOT
imported from orin_llm/backends/trtllm/rules.py: a rule written wrongly there disagrees with this fake, and a
test shows it.

It runs the scripted model MODELS[<engine dir name>] (a callable `model(context) -> token`, with
`.sample(context, rng)` for sampled requests) on a thread of its own, as 0.12's executor does: how it
schedules, batches, chunks, cancels, calls the logits post-processor and keeps KV blocks is written,
with what each point follows, above the Executor class below. Draft tokens are checked the way 0.12's
decoder does it: the target's token at each draft position is compared by id, the matching prefix is
accepted and the target's own next token follows; each position counts one step towards
max_new_tokens (gptDecoderBatched.cpp), and a request with steps left decodes on plainly. A request
stops at its end_id or at one of its stop_words (the stop word's tokens are in the output:
INCLUDE_STOP_WORDS).
"""

from __future__ import annotations

import enum
import json
import random
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Optional

__version__ = "0.12.0"

REQUIRED = object()
CALLS: list[tuple[str, dict]] = []
EXECUTORS: list[Executor] = []
MODELS: dict[str, Callable] = {}  # engine dir name ("target", "draft") -> scripted model
LOAD_ERRORS: dict[str, str] = {}  # engine dir name -> Executor() raises RuntimeError(message)
INCLUDE_END_ID = False  # whether an output ends with the end_id token (0.12: unverified; both handled)
INCLUDE_STOP_WORDS = True  # whether an output ends with the stop word that ended it (0.12: unverified)


def reset() -> None:
    global INCLUDE_END_ID, INCLUDE_STOP_WORDS, CANCEL_SENDS_FINAL, PROCESS_DRAFT_ROWS, ITERATION_S
    global LOAD_HOLDS_GIL_S, HANG_AFTER_CANCEL, FULL_BLOCKS_ONLY
    for executor in EXECUTORS:
        executor.shutdown()  # its thread ends
    CALLS.clear()
    EXECUTORS.clear()
    MODELS.clear()
    LOAD_ERRORS.clear()
    INCLUDE_END_ID = False
    INCLUDE_STOP_WORDS = True
    CANCEL_SENDS_FINAL = False
    PROCESS_DRAFT_ROWS = True
    ITERATION_S = 0.0005
    LOAD_HOLDS_GIL_S = 0.0
    HANG_AFTER_CANCEL = False
    FULL_BLOCKS_ONLY = False


def calls(name: str) -> list[dict]:
    return [kw for n, kw in CALLS if n == name]


class _Bound:
    """pybind11-style constructor: positional in declaration order, or by keyword; nothing else."""

    PARAMS: tuple[tuple[str, Any], ...] = ()

    def __init__(self, *args, **kwargs):
        names = [n for n, _ in self.PARAMS]
        cls = type(self).__name__
        if len(args) > len(names):
            raise TypeError(f"{cls}(): takes at most {len(names)} arguments")
        passed = dict(zip(names, args, strict=False))
        for key, value in kwargs.items():
            if key not in names:
                raise TypeError(f"{cls}(): incompatible constructor arguments: unknown keyword {key!r}")
            if key in passed:
                raise TypeError(f"{cls}(): got multiple values for {key!r}")
            passed[key] = value
        for name, default in self.PARAMS:
            if name not in passed and default is REQUIRED:
                raise TypeError(f"{cls}(): missing required argument {name!r}")
            setattr(self, name, passed.get(name, default))
        self.passed = passed
        self._check()
        CALLS.append((cls, dict(passed)))

    def _check(self) -> None:
        pass


class ModelType(enum.Enum):
    DECODER_ONLY = 0
    ENCODER_ONLY = 1
    ENCODER_DECODER = 2


class KvCacheConfig(_Bound):  # bindings.cpp L323-340
    PARAMS = (("enable_block_reuse", False), ("max_tokens", None), ("max_attention_window", None),
              ("sink_token_length", None), ("free_gpu_memory_fraction", None), ("host_cache_size", None),
              ("onboard_blocks", True))


class ExecutorConfig(_Bound):  # bindings.cpp L518-547
    PARAMS = (("max_beam_width", 1), ("scheduler_config", None), ("kv_cache_config", None),
              ("enable_chunked_context", False), ("normalize_log_probs", True),
              ("iter_stats_max_iterations", 1000), ("request_stats_max_iterations", 0),
              ("batching_type", None), ("max_batch_size", None),
              ("max_num_tokens", None), ("parallel_config", None), ("peft_cache_config", None),
              ("logits_post_processor_map", None), ("logits_post_processor_batched", None),
              ("decoding_config", None), ("gpu_weights_percent", 1.0), ("max_queue_size", None),
              ("extended_runtime_perf_knob_config", None))

    def _check(self):
        if self.kv_cache_config is not None and not isinstance(self.kv_cache_config, KvCacheConfig):
            raise TypeError("ExecutorConfig(): kv_cache_config must be a KvCacheConfig")
        knobs = self.extended_runtime_perf_knob_config
        if knobs is not None and not isinstance(knobs, ExtendedRuntimePerfKnobConfig):
            raise TypeError("ExecutorConfig(): extended_runtime_perf_knob_config must be an "
                            "ExtendedRuntimePerfKnobConfig")


class ExtendedRuntimePerfKnobConfig(_Bound):  # R bindings.cpp L451-458 (py::init<bool, bool>)
    PARAMS = (("multi_block_mode", False), ("enable_context_fmha_fp32_acc", False))


class SamplingConfig(_Bound):  # bindings.cpp L161-196; checks as executor/samplingConfig.cpp
    PARAMS = (("beam_width", 1), ("top_k", None), ("top_p", None), ("top_p_min", None),
              ("top_p_reset_ids", None), ("top_p_decay", None), ("random_seed", None), ("temperature", None),
              ("min_length", None), ("beam_search_diversity_rate", None), ("repetition_penalty", None),
              ("presence_penalty", None), ("frequency_penalty", None), ("length_penalty", None),
              ("early_stopping", None), ("no_repeat_ngram_size", None))

    def _check(self):
        if self.beam_width <= 0:
            raise RuntimeError("[TensorRT-LLM][ERROR] Assertion failed: beamWidth > 0")
        if self.top_k is not None and self.top_k < 0:
            raise RuntimeError("[TensorRT-LLM][ERROR] Assertion failed: topK.value() >= 0")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise RuntimeError("[TensorRT-LLM][ERROR] Assertion failed: topP.value() > 0.f")
        if self.temperature is not None and self.temperature < 0:
            raise RuntimeError("[TensorRT-LLM][ERROR] Assertion failed: temperature.value() >= 0.f")
        if self.random_seed is not None and not 0 <= self.random_seed < 2**64:
            raise TypeError("SamplingConfig(): random_seed is a uint64")

    @property
    def greedy(self) -> bool:  # topKSamplingLayer.cu L46-52: k=0 and p=0 is k=1
        return self.top_k == 1 or (not self.top_k and not self.top_p)


class OutputConfig(_Bound):  # bindings.cpp L198-206
    PARAMS = (("return_log_probs", False), ("return_context_logits", False),
              ("return_generation_logits", False), ("exclude_input_from_output", False),
              ("return_encoder_output", False))


class ExternalDraftTokensConfig(_Bound):  # bindings.cpp L208-213
    PARAMS = (("tokens", REQUIRED), ("logits", None), ("acceptance_threshold", None))

    def _check(self):
        if not isinstance(self.tokens, list) or not all(isinstance(t, int) for t in self.tokens):
            raise TypeError("ExternalDraftTokensConfig(): tokens must be list[int]")


class Request(_Bound):  # bindings.cpp L226-264
    PARAMS = (("input_token_ids", REQUIRED), ("max_new_tokens", REQUIRED), ("streaming", False),
              ("sampling_config", None), ("output_config", None), ("end_id", None), ("pad_id", None),
              ("bad_words", None), ("stop_words", None), ("embedding_bias", None),
              ("external_draft_tokens_config", None), ("prompt_tuning_config", None), ("lora_config", None),
              ("logits_post_processor_name", None), ("encoder_input_token_ids", None), ("client_id", None),
              ("return_all_generated_tokens", False))

    def _check(self):
        ids = self.input_token_ids
        if not isinstance(ids, list) or not all(isinstance(t, int) for t in ids):
            raise TypeError("Request(): input_token_ids must be list[int]")
        if not isinstance(self.max_new_tokens, int):
            raise TypeError("Request(): max_new_tokens must be an int")
        for name, cls in (("sampling_config", SamplingConfig), ("output_config", OutputConfig),
                          ("external_draft_tokens_config", ExternalDraftTokensConfig)):
            value = getattr(self, name)
            if value is not None and not isinstance(value, cls):
                raise TypeError(f"Request(): {name} must be a {cls.__name__}")
        if self.sampling_config is None:
            self.sampling_config = SamplingConfig()
        if self.output_config is None:
            self.output_config = OutputConfig()


class KvCacheStats:  # bindings.cpp L88-96: py::init<>() and read/write fields
    def __init__(self):
        self.max_num_blocks = self.free_num_blocks = self.used_num_blocks = 0
        self.tokens_per_block = self.alloc_total_blocks = self.alloc_new_blocks = self.reused_blocks = 0


class InflightBatchingStats:  # bindings.cpp L106-114
    def __init__(self):
        self.num_scheduled_requests = self.num_context_requests = self.num_gen_requests = 0
        self.num_paused_requests = self.num_ctx_tokens = self.micro_batch_id = 0
        self.avg_num_decoded_tokens_per_iter = 0.0


class IterationStats:  # bindings.cpp L116-132
    def __init__(self):
        self.timestamp, self.iter, self.iter_latency_ms = "", 0, 0.0
        self.num_active_requests = self.num_queued_requests = self.max_num_active_requests = 0
        self.gpu_mem_usage = self.cpu_mem_usage = self.pinned_mem_usage = 0
        self.kv_cache_stats: Optional[KvCacheStats] = None
        self.static_batching_stats = None
        self.inflight_batching_stats: Optional[InflightBatchingStats] = None


def _scores(vocab_size: int, best: int):
    """Deterministic logits over the vocabulary ([1, vocab]): every token a different small score, `best`
    far on top, so that masking it makes the decoder take the best token the mask leaves."""
    import torch

    scores = -(torch.arange(vocab_size, dtype=torch.float32) * 0.618034 % 1.0)
    scores[best] = 10.0
    return scores.unsqueeze(0)


class Result:  # bindings.cpp L266-274
    def __init__(self, output_token_ids: list[list[int]], is_final: bool):
        self.output_token_ids, self.is_final = output_token_ids, is_final


class Response:  # bindings.cpp L276-282
    def __init__(self, request_id: int, result: Optional[Result] = None, error_msg: str = ""):
        self.request_id, self._result, self._error = request_id, result, error_msg

    def has_error(self) -> bool:
        return bool(self._error)

    @property
    def error_msg(self) -> str:
        return self._error

    @property
    def result(self) -> Result:
        if self._error:
            raise RuntimeError("Cannot get the result for a response with an error")
        return self._result


# ---------------------------------------------------------------------------------- models


class ScriptedModel:
    """A deterministic "model" over a small vocabulary: the next token is a function of the last two,
    so outputs repeat (and the lookup drafter finds matches); `end_id` once the context is `eos_at`
    tokens long. `disagree(context)` True makes it pick another token (a draft that is sometimes wrong)."""

    def __init__(self, vocab: list[int], end_id: int, eos_at: Optional[int] = None,
                 disagree: Optional[Callable[[list[int]], bool]] = None):
        self.vocab, self.end_id, self.eos_at, self.disagree = vocab, end_id, eos_at, disagree

    def __call__(self, context: list[int]) -> int:
        if self.eos_at is not None and len(context) >= self.eos_at:
            return self.end_id
        i = (context[-1] * 7 + (context[-2] % 2 if len(context) > 1 else 0) + 3) % len(self.vocab)
        if self.disagree is not None and self.disagree(context):
            i = (i + 1) % len(self.vocab)
        return self.vocab[i]

    def sample(self, context: list[int], rng: random.Random) -> int:
        if self.eos_at is not None and len(context) >= self.eos_at:
            return self.end_id
        return self(context) if rng.random() < 0.5 else self.vocab[rng.randrange(len(self.vocab))]

    def greedy_run(self, prompt: list[int], max_tokens: int) -> list[int]:
        """What a plain greedy request returns: the reference output."""
        ctx, out = list(prompt), []
        while len(out) < max_tokens:
            t = self(ctx)
            if t == self.end_id:
                break
            out.append(t)
            ctx.append(t)
        return out


# ---------------------------------------------------------------------------------- executor
#
# How the fake runs requests (no kinder than 0.12; each point cites what it follows):
#
# * Its own thread. The Executor starts a thread that schedules requests and runs iterations, as 0.12's
#   executor runs its batch manager on a thread of its own; enqueue_request only queues. Responses appear
#   when an iteration produced them, and await_responses waits for them (std::chrono timeouts, J executor.h:
#   "Responses may be empty", and an id whose responses were all given "will hang unless a timeout is
#   specified": here such a poll waits out its whole timeout and is counted in wasted_polls()).
# * In-flight batching: up to max_batch_size requests run together (ExecutorConfig(max_batch_size) or the
#   engine's build_config.max_batch_size; trtllm-build's default 256, R≡J build.py L77-81), scheduled as
#   GUARANTEED_NO_EVICT (SchedulerConfig's default, J executor.h SchedulerConfig): a request starts only
#   when the KV blocks of its whole length (prompt + max_new_tokens + drafts) are free or evictable.
# * Chunked context: with ExecutorConfig(enable_chunked_context=True) a prompt is computed over several
#   iterations, at most max_num_tokens per iteration for all requests together, each chunk but the last a
#   multiple of tokens_per_block (build_config.max_num_tokens; trtllm-build's default 8192, L95-100).
#   Without it a context runs whole, in one iteration.
# * cancel_request: J executor.h says only "Cancel the request with provided request id". Silent on what
#   comes back, so the fake takes the worse case: the request is dropped at its next iteration and NO final
#   response follows (CANCEL_SENDS_FINAL = True gives the kinder behaviour of later releases). Responses
#   queued before the cancel stay queued until someone reads them.
# * The logits post-processor is called on the executor's thread, once per iteration that decides tokens
#   for the request, with (request id, logits, the request's tokens per beam, the stream as an int, its
#   client_id): the LogitsPostProcessor signature and its call site in the first open batch manager
#   (logitsPostProcessor.cpp: `(*llmReq->mLogitsPostProcessor)(llmReq->mRequestId, logits,
#   llmReq->getTokens(), stream, llmReq->mClientId)`; StreamPtr is cast to an int, pybind
#   customCasters.h). Its logits have one row per decided position: 1 + the request's draft tokens on
#   the iteration that ends its context ("Get the logits from the last context token and draft tokens",
#   numDecoderLogits = 1 + draftLength, trtGptModelInflightBatching.cpp of the first open series), one
#   row on a generation step. getTokens() holds the prompt and output, not the drafts. An exception raised
#   by the callback fails every request of that iteration (the worse case; 0.12 is closed here).
# * KV blocks as 0.12's BlockManager keeps them (kvCacheManager.cpp of the 0.11/0.12 series, the code
#   index's copy): a request's tokens but the last are cut into blocks (chopVectorIntoBlocks(tokens,
#   inputLength - 1, tokensPerBlock, true), the last one partial); loadOrAllocateBlocks matches stored
#   blocks from the first on (++mReusedBlocks per match; a matched partial block is claimed as the
#   request's own, claimLeafBlock), else takes a free block; releaseBlocks stores the finished request's
#   blocks (storeBlocks) and appends them to the end of the free queue (releaseBlock), and getFreeBlock
#   takes the front one (findBestGPUBlockToFree: a leaf under it), evicting what it held: least recently
#   used first. The pool holds KvCacheConfig(max_tokens) // tokens_per_block blocks.
# * Every iteration is recorded as an IterationStats (kv_cache_stats: the BlockManager's counters as they
#   stand; reused_blocks cumulative); get_latest_iteration_stats() returns the ones since its last call.

ITERATION_S = 0.0005  # the time one fake iteration takes; SLOW_ITERATION_S: the device's order of magnitude
# Switches that make the fake as slow and as fragile as 0.12 (issue #45), off by default; reset() turns them off.
# * A decode step of the 3B on the Orin takes several to tens of ms (README4Jetson §4: ~35 tok/s for an 8B INT4).
SLOW_ITERATION_S = 0.03
# * Executor(...) holds the GIL for the whole load: 0.12 binds its constructors with plain py::init, no
#   gil_scoped_release (J cpp/tensorrt_llm/pybind/executor/executor.cpp initBindings), and reads and
#   deserializes the engine inside. LOAD_HOLDS_GIL_S > 0: the constructor keeps the GIL that long (the
#   interpreter's switch interval raised meanwhile, so no other Python thread runs).
LOAD_HOLDS_GIL_S = 0.0
# * The executor hangs after a cancel: "Fixed the hang caused by race condition when canceling requests"
#   (v0.13.0 release notes). HANG_AFTER_CANCEL: after a cancel_request, no iteration runs and no response
#   comes for any request until shutdown; the cancel call itself returns (the watchdog's assumption:
#   orin_llm/backends/trtllm/watchdog.py).
HANG_AFTER_CANCEL = False
# * Only full blocks are shared: "Only full blocks can be shared by multiple requests" (R
#   docs/source/kv_cache_reuse.md L52). FULL_BLOCKS_ONLY: a stored partial block is never matched (the
#   BlockManager copy of the code index matches one by its tokens: the kinder reading).
FULL_BLOCKS_ONLY = False
CANCEL_SENDS_FINAL = False  # see above: 0.12 does not say, so the worse case
DEFAULT_MAX_BATCH = 256
DEFAULT_MAX_NUM_TOKENS = 8192
DEFAULT_KV_BLOCKS = 4096  # KvCacheConfig without max_tokens: 90 % of free memory on a real device
PROCESS_DRAFT_ROWS = True  # False: the post-processor gets only the first row of a verifying iteration
DEVICE = "cpu"  # where the post-processor's logits live ("cuda" to measure the mask's copy on a GPU)


class Block:
    """A KV block (KVCacheBlock): its tokens once stored, its place in the reuse tree, its users."""

    __slots__ = ("tokens", "parent", "children", "refs")

    def __init__(self):
        self.tokens: Optional[tuple[int, ...]] = None
        self.parent: Optional[Block] = None
        self.children: dict[tuple[int, ...], Block] = {}
        self.refs = 0


@dataclass
class Run:
    request: Request
    request_id: int
    input_len: int
    max_new: int
    draft: list[int]
    tokens: list[int] = field(default_factory=list)  # prompt + output so far (getTokens, beam 0)
    accepted: Optional[int] = None  # draft tokens accepted (spec requests)
    iterations: list[list[int]] = field(default_factory=list)  # new tokens per deciding iteration
    chunks: list[int] = field(default_factory=list)  # context tokens computed per iteration
    computed: int = -1  # prompt tokens computed (-1: not scheduled yet; reused blocks count)
    reused: int = 0  # blocks matched when it was added
    steps: int = 0  # decoding steps towards max_new_tokens
    blocks: list = field(default_factory=list)
    rng: Any = None
    done: bool = False
    final_queued: bool = False
    final_delivered: bool = False
    cancelled: bool = False
    error: str = ""
    empty_polls: int = 0

    @property
    def output(self) -> list[int]:
        return [t for it in self.iterations for t in it]


def _hold_gil(seconds: float) -> None:
    """Keep the GIL for `seconds`, as C++ that never releases it would: no other Python thread runs."""
    import sys

    interval = sys.getswitchinterval()
    sys.setswitchinterval(seconds + 1.0)
    try:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass
    finally:
        sys.setswitchinterval(interval)


class Executor:
    """Executor(model_path, model_type, executor_config[, use_mmap]) (executor.cpp, jetson overload)."""

    PARAMS = ("model_path", "model_type", "executor_config", "use_mmap")

    def __init__(self, *args, **kwargs):
        passed = dict(zip(self.PARAMS, args, strict=False))
        for key, value in kwargs.items():
            if key not in self.PARAMS or key in passed:
                raise TypeError(f"Executor(): incompatible constructor arguments: {key!r}")
            passed[key] = value
        for name in self.PARAMS[:3]:
            if name not in passed:
                raise TypeError(f"Executor(): missing {name!r}")
        if not isinstance(passed["model_type"], ModelType) or not isinstance(passed["executor_config"],
                                                                              ExecutorConfig):
            raise TypeError("Executor(): incompatible constructor arguments")
        CALLS.append(("Executor", dict(passed)))
        if LOAD_HOLDS_GIL_S > 0:
            _hold_gil(LOAD_HOLDS_GIL_S)
        self.path = Path(passed["model_path"])
        if self.path.name in LOAD_ERRORS:
            raise RuntimeError(LOAD_ERRORS[self.path.name])
        engine_config = json.loads((self.path / "config.json").read_text())
        build = engine_config["build_config"]
        self.max_input_len, self.max_seq_len = build["max_input_len"], build["max_seq_len"]
        # a real engine's logits span the model's vocabulary (config.json pretrained_config.vocab_size)
        self.vocab_size = engine_config.get("pretrained_config", {}).get("vocab_size")
        self.max_draft_len = build.get("max_draft_len", 0)
        plugins = build.get("plugin_config", {})
        self.tokens_per_block = plugins.get("tokens_per_block", 64)  # PluginConfig default (plugin.py L182)
        self.config = passed["executor_config"]
        kv_config = self.config.kv_cache_config or KvCacheConfig()
        self.block_reuse = bool(kv_config.enable_block_reuse)
        self._check_load(plugins.get("use_paged_context_fmha", False), build.get("speculative_decoding_mode", 1),
                         kv_config)
        self.max_batch = self.config.max_batch_size or build.get("max_batch_size", DEFAULT_MAX_BATCH)
        self.max_num_tokens = self.config.max_num_tokens or build.get("max_num_tokens", DEFAULT_MAX_NUM_TOKENS)
        self.chunked = bool(self.config.enable_chunked_context)
        self.max_kv_blocks = (kv_config.max_tokens // self.tokens_per_block if kv_config.max_tokens
                              else DEFAULT_KV_BLOCKS)
        self.free: list[Block] = [Block() for _ in range(self.max_kv_blocks)]  # front: the next one taken
        self.root = Block()  # mCachedBlocksRoot
        self.kv = KvCacheStats()
        self.kv.tokens_per_block, self.kv.max_num_blocks = self.tokens_per_block, self.max_kv_blocks
        self.evicted = 0  # stored blocks overwritten (the fake's count; 0.12's stats have none)
        self.runs: dict[int, Run] = {}
        self.cancelled: list[int] = []
        self.timeouts: list[Any] = []
        self.fail_next: Optional[str] = None
        self.is_shut_down = False
        self.hung = False  # HANG_AFTER_CANCEL, once a request was cancelled
        self.processor_threads: set[int] = set()  # threads the logits post-processor was called on
        self.max_running_seen = 0  # the most requests one iteration ran
        self.polls_of_cancelled = 0  # await_responses calls naming a cancelled request
        self.iteration_stats: list[IterationStats] = []
        self._next_id = 1
        self._iter = 0
        self._queue: deque[Run] = deque()
        self._active: list[Run] = []
        self._ready: dict[int, deque] = {}
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._loop, name=f"fake-executor-{self.path.name}", daemon=True)
        self._thread.start()
        EXECUTORS.append(self)

    def _check_load(self, paged_context_fmha: bool, speculative_decoding_mode: int, kv_config) -> None:
        """What 0.12's batch manager asserts when the Executor builds it, in its order
        (TrtGptModelInflightBatching constructor; closed at 0.12, read in its first open copy)."""
        def refuse(text: str):
            raise RuntimeError(f"[TensorRT-LLM][ERROR] Assertion failed: {text} "
                               f"(cpp/tensorrt_llm/batch_manager/trtGptModelInflightBatching.cpp)\n"
                               "1       0x7fa3c0e0b4 tensorrt_llm::common::throwRuntimeError(...)")

        if kv_config.enable_block_reuse and not paged_context_fmha:
            refuse("When KV cache block reuse is set, model has to be built with paged context FMHA support")
        if speculative_decoding_mode == 2 and not kv_config.enable_block_reuse:  # DRAFT_TOKENS_EXTERNAL
            refuse("KV cache block reuse must be enabled for speculative decoding target model")
        if self.config.enable_chunked_context and not paged_context_fmha:
            refuse("Chunked context requires the engine to be built with paged FMHA enabled.")

    @property
    def model(self) -> Callable:
        return MODELS[self.path.name]  # looked up per request: tests install models after loading

    # -------------------------------------------------------------- the caller's side

    def enqueue_request(self, request: Request) -> int:
        if not isinstance(request, Request):
            raise TypeError("enqueue_request(): incompatible function arguments")
        name = request.logits_post_processor_name
        if name is not None and name not in (self.config.logits_post_processor_map or {}):
            raise RuntimeError(f"[TensorRT-LLM][ERROR] Assertion failed: LogitsPostProcessor {name} not found.")
        if self.is_shut_down:
            raise RuntimeError("[TensorRT-LLM][ERROR] Shutdown called, cannot enqueue request")
        ids = list(request.input_token_ids)
        config = request.external_draft_tokens_config
        draft = list(config.tokens) if config is not None else []
        with self._cond:
            request_id = self._next_id
            self._next_id += 1
            run = Run(request, request_id, len(ids), request.max_new_tokens, draft, tokens=list(ids))
            run.rng = random.Random(request.sampling_config.random_seed or 0)  # 0.12's default seed is 0
            self.runs[request_id] = run
            self._ready[request_id] = deque()
            if self.fail_next is not None:
                run.error, self.fail_next = self.fail_next, None
            elif len(ids) > self.max_input_len:  # llmRequest.h validate()
                run.error = (f"[TensorRT-LLM][ERROR] Prompt length ({len(ids)}) exceeds maximum input length "
                             f"({self.max_input_len}).")
            elif draft and len(draft) > self.max_draft_len:
                run.error = (f"[TensorRT-LLM][ERROR] Draft tokens length ({len(draft)}) exceeds maximum draft "
                             f"tokens length ({self.max_draft_len}).")
            else:
                if draft and len(ids) + len(draft) > self.max_input_len:
                    run.draft = draft[:self.max_input_len - len(ids)]
                per_step = len(run.draft) if run.draft else self.max_draft_len
                if len(ids) + run.max_new + per_step > self.max_seq_len:
                    run.max_new = self.max_seq_len - len(ids) - per_step
            if run.error:
                self._finish(run, Response(request_id, error_msg=run.error))
            else:
                self._queue.append(run)
            self._cond.notify_all()
        return request_id

    def enqueue_requests(self, requests: list) -> list[int]:
        return [self.enqueue_request(r) for r in requests]

    def _take(self, request_id: int) -> list[Response]:
        out = list(self._ready.get(request_id, ()))
        if out:
            self._ready[request_id].clear()
            if any(r.has_error() or r.result.is_final for r in out):
                self.runs[request_id].final_delivered = True
        return out

    def await_responses(self, *args, **kwargs) -> list:
        # Overloads (executor.cpp): (timeout=None), (id, timeout=None), (ids, timeout=None).
        if len(args) > 1 or set(kwargs) - {"id", "ids", "timeout"}:
            raise TypeError("await_responses(): incompatible function arguments")
        timeout = kwargs.get("timeout")
        if timeout is None:
            raise AssertionError("await_responses() without a timeout blocks (forever, once all were read)")
        if not isinstance(timeout, (timedelta, float)) or isinstance(timeout, bool):
            raise TypeError("await_responses(): timeout must be a timedelta or float seconds (pybind chrono)")
        self.timeouts.append(timeout)
        seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
        deadline = time.monotonic() + seconds
        target = args[0] if args else kwargs.get("id", kwargs.get("ids"))
        with self._cond:
            if target is None:  # any ready responses, without order guarantees
                self._cond.wait_for(lambda: any(self._ready.values()), seconds)
                return [r for i in sorted(self._ready) for r in self._take(i)]
            ids = target if isinstance(target, list) else [target]
            self.polls_of_cancelled += sum(i in self.cancelled for i in ids)
            for i in ids:
                run = self.runs.get(i)
                if run is not None and run.final_delivered and not self._ready[i]:
                    run.empty_polls += 1  # a real executor waits out the whole timeout here
                    if run.empty_polls > 50:
                        raise AssertionError(f"request {i} polled 50 times after its final response")
            self._cond.wait_for(lambda: any(self._ready.get(i) for i in ids) or time.monotonic() >= deadline,
                                seconds)
            out = [self._take(i) for i in ids]
        return out if isinstance(target, list) else out[0]

    def get_num_responses_ready(self, id: Optional[int] = None) -> int:  # noqa: A002
        with self._cond:
            return sum(len(q) for i, q in self._ready.items() if id is None or i == id)

    def cancel_request(self, id: int) -> None:  # noqa: A002 (the binding's keyword name)
        with self._cond:
            self.cancelled.append(id)
            self.hung = self.hung or HANG_AFTER_CANCEL
            run = self.runs.get(id)
            if run is not None and not run.done:
                run.cancelled = True
            self._cond.notify_all()

    def get_latest_iteration_stats(self) -> list:
        """getLatestIterationStats: the iterations since the last call (J executor.h)."""
        with self._cond:
            out, self.iteration_stats = self.iteration_stats, []
        return out

    def can_enqueue_requests(self) -> bool:
        return not self.is_shut_down

    def shutdown(self) -> None:
        with self._cond:
            self.is_shut_down = True
            self._cond.notify_all()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.shutdown()

    # -------------------------------------------------------------- the executor's thread

    def _loop(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self.is_shut_down or (not self.hung and (self._queue or self._active)))
                if self.is_shut_down:
                    return
                for run in [r for r in self._active if r.cancelled]:
                    self._drop(run)
                for run in [r for r in self._queue if r.cancelled]:
                    self._queue.remove(run)
                    self._drop(run)
                self._schedule()
                batch = list(self._active)
            if batch:
                self._iteration(batch)
            time.sleep(ITERATION_S)

    def _need(self, run: Run) -> int:
        """KV blocks a request may hold by its end."""
        return -(-(run.input_len + run.max_new + len(run.draft)) // self.tokens_per_block)

    def _schedule(self) -> None:
        """GUARANTEED_NO_EVICT: start queued requests, in order, while their whole length fits."""
        while self._queue and len(self._active) < self.max_batch:
            run = self._queue[0]
            reserved = sum(self._need(r) for r in self._active)
            if self._need(run) > self.max_kv_blocks:
                self._queue.popleft()  # the fake's choice: say it rather than wait forever
                run.error = (f"[fake] request needs {self._need(run)} KV blocks, the pool has {self.max_kv_blocks}")
                self._finish(run, Response(run.request_id, error_msg=run.error))
                continue
            if self._need(run) > self.max_kv_blocks - reserved:
                return
            self._queue.popleft()
            self._active.append(run)
        self.max_running_seen = max(self.max_running_seen, len(self._active))

    def _iteration(self, batch: list[Run]) -> None:
        budget = self.max_num_tokens
        decided: list[tuple[Run, list[list[int]]]] = []  # (run, contexts whose next token is decided)
        num_ctx, ctx_tokens = 0, 0
        with self._cond:
            for run in batch:
                if run.computed < 0:  # addSequence
                    run.computed = self._add_sequence(run)
                if run.computed < run.input_len:
                    remaining = run.input_len - run.computed
                    if self.chunked:
                        chunk = min(remaining, budget)
                        if chunk < remaining:
                            chunk = chunk // self.tokens_per_block * self.tokens_per_block
                    else:
                        chunk = remaining if budget == self.max_num_tokens or remaining <= budget else 0
                    if chunk <= 0:
                        continue
                    budget -= chunk
                    num_ctx, ctx_tokens = num_ctx + 1, ctx_tokens + chunk
                    run.computed += chunk
                    run.chunks.append(chunk)
                    if run.computed < run.input_len:
                        continue
                    ctx = list(run.tokens)
                    decided.append((run, [ctx + run.draft[:i] for i in range(len(run.draft) + 1)]))
                else:
                    decided.append((run, [list(run.tokens)]))
        results: list[tuple[Run, list[int]]] = []
        try:
            for run, contexts in decided:
                results.append((run, self._decide(run, contexts)))
        except Exception as e:  # the post-processor raised: the iteration fails for every request in it
            with self._cond:
                for run in batch:
                    self._release(run, store=False)
                    self._finish(run, Response(run.request_id, error_msg=f"[TensorRT-LLM][ERROR] {e}"))
                    self._active.remove(run)
                self._cond.notify_all()
            return
        with self._cond:
            for run, tokens in results:
                if run.cancelled:
                    continue
                new, ended = self._accept(run, tokens)
                if new or ended:
                    run.iterations.append(new)
                run.tokens += new
                self._grow(run)
                if ended or run.steps >= run.max_new:
                    self._complete(run)
                elif run.request.streaming and new:
                    self._ready[run.request_id].append(Response(run.request_id, Result([list(new)], False)))
            self._record(batch, num_ctx, ctx_tokens)
            self._cond.notify_all()

    def _decide(self, run: Run, contexts: list[list[int]]) -> list[int]:
        """The decoder's token at each position: the model's choice, after the named post-processor."""
        req = run.request
        sc = req.sampling_config
        choices = [self.model(ctx) if sc.greedy else self.model.sample(ctx, run.rng) for ctx in contexts]
        name = req.logits_post_processor_name
        processor = (self.config.logits_post_processor_map or {}).get(name) if name is not None else None
        if processor is None:
            return choices
        import torch

        vocab = self.vocab_size or max(choices + [req.end_id or 0]) + 1
        logits = torch.cat([_scores(vocab, c) for c in choices]).to(DEVICE)  # [1 + drafts, vocab]
        self.processor_threads.add(threading.get_ident())
        stream = torch.cuda.current_stream().cuda_stream if logits.is_cuda else 0
        rows = logits if PROCESS_DRAFT_ROWS else logits[:1]  # a view: masked in place either way
        processor(run.request_id, rows, [list(run.tokens)], stream, req.client_id)
        return [int(t) for t in logits.argmax(dim=-1).tolist()]

    def _accept(self, run: Run, tokens: list[int]) -> tuple[list[int], bool]:
        """The tokens an iteration adds (drafts accepted by id, then the target's own) and whether the
        request ended (end_id, a stop word); each draft position is a step (gptDecoderBatched.cpp L931-932)."""
        new: list[int] = []
        stops = [list(w) for w in run.request.stop_words or []]
        out = run.output
        drafting = len(tokens) > 1
        if drafting:
            run.accepted = 0
        for i, t in enumerate(tokens):
            if t == run.request.end_id:
                if INCLUDE_END_ID:
                    new.append(t)
                run.steps += len(tokens) if drafting else 1
                return new, True
            new.append(t)
            for word in stops:
                if word and (out + new)[-len(word):] == word:
                    if not INCLUDE_STOP_WORDS:
                        del new[len(new) - min(len(word), len(new)):]
                    run.steps += len(tokens) if drafting else 1
                    return new, True
            if i == len(tokens) - 1 or t != run.draft[i]:
                break  # the bonus token, or the target's correction
            run.accepted += 1
        run.steps += len(tokens) if drafting else 1
        return new, False

    def _complete(self, run: Run) -> None:
        """The request is over: its final response (streaming: this iteration's tokens; else all of them),
        and its blocks stored and freed."""
        if run.request.streaming:
            final = Response(run.request_id, Result([list(run.iterations[-1]) if run.iterations else []], True))
        else:
            final = Response(run.request_id, Result([run.output], True))
        self._release(run, store=True)
        self._active.remove(run)
        self._finish(run, final)

    def _finish(self, run: Run, response: Response) -> None:
        run.done = run.final_queued = True
        self._ready[run.request_id].append(response)

    def _drop(self, run: Run) -> None:
        """A cancelled request leaves at its next iteration; what it computed is stored like a finished one's."""
        if run in self._active:
            self._active.remove(run)
            self._release(run, store=True)
        run.done = True
        if CANCEL_SENDS_FINAL:
            self._finish(run, Response(run.request_id, Result([[]], True)))

    # -------------------------------------------------------------- KV blocks (kvCacheManager.cpp)

    def _chop(self, tokens: list[int], n: int) -> list[tuple[int, ...]]:
        """chopVectorIntoBlocks(tokens, n, tokens_per_block, partial=True)."""
        k = self.tokens_per_block
        return [tuple(tokens[i:min(i + k, n)]) for i in range(0, max(n, 0), k)]

    def _get_free_block(self) -> Block:
        """getFreeBlock: the front of the free queue (a leaf under it), evicting what it stored."""
        block = self.free[0]
        while block.children:  # findBestGPUBlockToFree: a stored block is freed leaf first
            block = next(iter(block.children.values()))
        self.free.remove(block)
        if block.tokens is None:
            self.kv.alloc_new_blocks += 1
        else:
            self.evicted += 1
            self._detach(block)
        self.kv.alloc_total_blocks += 1
        return block

    @staticmethod
    def _detach(block: Block) -> None:
        if block.parent is not None:
            block.parent.children.pop(block.tokens, None)
        block.tokens, block.parent = None, None

    def _add_sequence(self, run: Run) -> int:
        """addSequence + loadOrAllocateBlocks: returns the prompt tokens found stored (prepopulated)."""
        blocked = self._chop(run.tokens, run.input_len - 1)
        if run.input_len % self.tokens_per_block == 1:
            blocked.append(())  # "Add empty block if last token is separated"
        matched, node = 0, self.root
        for tokens in blocked:
            shareable = tokens and (len(tokens) == self.tokens_per_block or not FULL_BLOCKS_ONLY)
            found = node.children.get(tokens) if (self.block_reuse and node is not None and shareable) else None
            if found is not None:
                if len(tokens) < self.tokens_per_block:
                    self._detach(found)  # claimLeafBlock: a matched partial block becomes the request's own
                if found in self.free:
                    self.free.remove(found)
                found.refs += 1
                run.blocks.append(found)
                matched += len(tokens)
                run.reused += 1
                self.kv.reused_blocks += 1
                node = found
            else:
                block = self._get_free_block()
                block.refs += 1
                run.blocks.append(block)
                node = None
        return matched

    def _grow(self, run: Run) -> None:
        """allocateBlock as the sequence grows past its blocks."""
        while len(run.blocks) * self.tokens_per_block < len(run.tokens) and self.free:
            block = self._get_free_block()
            block.refs += 1
            run.blocks.append(block)

    def _release(self, run: Run, store: bool) -> None:
        """releaseBlocks: store the blocks of the request's tokens but the last, then free them (to the end
        of the free queue: the most recently used)."""
        if store and self.block_reuse and run.computed >= run.input_len:
            node, match = self.root, True
            for tokens, block in zip(self._chop(run.tokens, len(run.tokens) - 1), run.blocks, strict=False):
                found = node.children.get(tokens) if match else None
                if found is not None:
                    node = found
                    continue
                match = False
                if block.tokens is None:
                    block.tokens, block.parent = tokens, node
                    node.children[tokens] = block
                node = block
        for block in reversed(run.blocks):
            block.refs -= 1
            if block.refs == 0:
                self.free.append(block)
        run.blocks = []

    def _record(self, batch: list[Run], num_ctx: int, ctx_tokens: int) -> None:
        self._iter += 1
        stats = IterationStats()
        stats.iter, stats.num_active_requests = self._iter, len(batch)
        stats.max_num_active_requests, stats.num_queued_requests = self.max_batch, len(self._queue)
        kv = KvCacheStats()
        kv.__dict__.update(self.kv.__dict__)
        kv.free_num_blocks = len(self.free)
        kv.used_num_blocks = self.max_kv_blocks - len(self.free)
        stats.kv_cache_stats = kv
        ifb = InflightBatchingStats()
        ifb.num_scheduled_requests, ifb.num_context_requests = len(batch), num_ctx
        ifb.num_gen_requests, ifb.num_ctx_tokens = len(batch) - num_ctx, ctx_tokens
        stats.inflight_batching_stats = ifb
        self.iteration_stats.append(stats)
        del self.iteration_stats[:-self.config.iter_stats_max_iterations or None]

    # -------------------------------------------------------------- test helpers

    @property
    def requests(self) -> list[Request]:
        return [run.request for run in self.runs.values()]

    def undelivered(self) -> list[int]:
        """Requests with responses nobody read: left queued in a real executor."""
        with self._cond:
            return [i for i, q in self._ready.items() if q]

    def wasted_polls(self) -> int:
        """await_responses calls for requests whose final response was already returned: each one
        costs a real caller the whole timeout."""
        return sum(run.empty_polls for run in self.runs.values())

    def idle(self, timeout: float = 2.0) -> bool:
        """Wait until no request is queued or running."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._cond:
                if not self._queue and not self._active:
                    return True
            time.sleep(0.001)
        return False
