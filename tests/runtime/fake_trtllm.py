"""A fake `tensorrt_llm.bindings.executor` (TensorRT-LLM v0.12.0-jetson) for tests.

Installed with `orin_llm.runtime.trtllm.bindings.set_executor_module(fake_trtllm)`. Its classes take
exactly the keyword names of the 0.12 pybind bindings (cpp/tensorrt_llm/pybind/executor/bindings.cpp
and executor.cpp at v0.12.0, see docs/trtllm-0.12-jetson.md §4), in the same order: an unknown or
missing keyword is a TypeError, as pybind11 makes it, so a typo in the runtime fails a test. Every
construction is recorded in CALLS with the arguments the caller passed.

The Executor reads the engine's config.json (build_config: max_input_len, max_seq_len, max_draft_len,
speculative_decoding_mode, plugin_config) like the real one, and refuses at construction what 0.12's
batch manager refuses (its TrtGptModelInflightBatching constructor, docs/trtllm-0.12-jetson.md §8),
with 0.12's message text. These checks are written here, from the sources, and deliberately NOT
imported from orin_llm/runtime/trtllm/rules.py: a rule written wrongly there disagrees with this fake, and a
test shows it.

It runs the scripted model MODELS[<engine dir name>] (a callable `model(context) -> token`, with
`.sample(context, rng)` for sampled requests). Draft tokens are checked the way 0.12's decoder does
it: the target's token at each draft position is compared by id, the matching prefix is accepted and
the target's own next token follows; each position counts one step towards max_new_tokens
(gptDecoderBatched.cpp), and a request with steps left decodes on plainly. A request stops at its
end_id or at one of its stop_words (the stop word's tokens are in the output: INCLUDE_STOP_WORDS).
Streaming responses carry one iteration's new tokens each, several of them per await_responses call.

KV block reuse is modelled like 0.12's BlockManager (kvCacheManager.cpp of the 0.11/0.12 series): a
request's tokens but the last are cut into blocks of tokens_per_block (the last one partial), matched
from the first block on against the blocks stored by earlier requests, one `reused_blocks` count per
matched block (a cumulative counter); a finished request stores the blocks of its tokens but the
last. The fake never evicts. Every iteration is recorded as an IterationStats whose kv_cache_stats
carries that counter; get_latest_iteration_stats() returns the ones since its last call.
"""

from __future__ import annotations

import enum
import json
import random
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
    global INCLUDE_END_ID, INCLUDE_STOP_WORDS
    CALLS.clear()
    EXECUTORS.clear()
    MODELS.clear()
    LOAD_ERRORS.clear()
    INCLUDE_END_ID = False
    INCLUDE_STOP_WORDS = True


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

CHUNKS = (1, 2, 1, 3)  # iterations per streamed response batch, cycling
RESPONSES_PER_AWAIT = (1, 2)


@dataclass
class Run:
    request: Request
    request_id: int
    input_len: int
    max_new: int
    draft: list[int]
    accepted: Optional[int] = None  # draft tokens accepted (spec requests)
    iterations: list[list[int]] = field(default_factory=list)  # new tokens per iteration, all computed
    next_iter: int = 0
    final_delivered: bool = False
    cancelled: bool = False
    error: str = ""
    empty_polls: int = 0


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
        self.max_kv_blocks = (kv_config.max_tokens or 0) // self.tokens_per_block
        self.runs: dict[int, Run] = {}
        self.cancelled: list[int] = []
        self.timeouts: list[Any] = []
        self.fail_next: Optional[str] = None
        self.is_shut_down = False
        self._next_id = 1
        self._batch = 0
        self.stored: dict = {}  # the block tree: block tokens -> the blocks stored after it
        self.kv = KvCacheStats()
        self.kv.tokens_per_block, self.kv.max_num_blocks = self.tokens_per_block, self.max_kv_blocks
        self.kv.free_num_blocks = self.max_kv_blocks
        self.iteration_stats: list[IterationStats] = []
        self._iter = 0
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

    # -------------------------------------------------------------- the model run

    @property
    def model(self) -> Callable:
        return MODELS[self.path.name]  # looked up per request: tests install models after loading

    def _simulate(self, run: Run) -> None:
        req = run.request
        sc = req.sampling_config
        rng = random.Random(sc.random_seed or 0)  # 0.12's default seed is 0
        processor = None
        if req.logits_post_processor_name is not None:
            processor = (self.config.logits_post_processor_map or {}).get(req.logits_post_processor_name)

        def step(ctx: list[int]) -> int:
            t = self.model(ctx) if sc.greedy else self.model.sample(ctx, rng)
            if processor is None:
                return t
            # the step's logits, the model's choice on top; the named post-processor edits them in place
            # (request id, logits, token ids per beam: prompt and output so far, stream, client_id), then
            # the decoder picks from what is left
            logits = _scores(self.vocab_size or max(t, req.end_id or 0) + 1, t)
            processor(run.request_id, logits, [list(ctx)], 0, req.client_id)
            return int(logits[0].argmax())

        ctx = list(req.input_token_ids)
        end_id = req.end_id
        stops = [list(w) for w in req.stop_words or []]
        out: list[int] = []  # every token generated so far, for the stop words

        def stopped(new: list[int]) -> bool:
            """`new` (this iteration's tokens) ends a stop word: drop it from the output unless included."""
            for word in stops:
                if word and (out + new)[-len(word):] == word:
                    if not INCLUDE_STOP_WORDS:
                        del new[len(new) - min(len(word), len(new)):]
                    return True
            return False

        steps, ended = 0, False
        if run.draft:  # one iteration over the draft positions: accept by id, then the target's own token
            new: list[int] = []
            run.accepted = 0
            for i in range(len(run.draft) + 1):
                t = step(ctx + new)
                if t == end_id:
                    ended = True
                    if INCLUDE_END_ID:
                        new.append(t)
                    break
                new.append(t)
                if stopped(new):
                    ended = True
                    break
                if i == len(run.draft) or t != run.draft[i]:
                    break  # the bonus token, or the target's correction
                run.accepted += 1
            steps = len(run.draft) + 1  # every position is a decoding step (gptDecoderBatched.cpp L931-932)
            run.iterations.append(new)
            ctx += new
            out += new
        while not ended and steps < run.max_new:
            t = step(ctx)
            if t == end_id:
                if INCLUDE_END_ID:
                    run.iterations.append([t])
                break
            new = [t]
            ended = stopped(new)
            if new:
                run.iterations.append(new)
            ctx.append(t)
            out.append(t)
            steps += 1

    def enqueue_request(self, request: Request) -> int:
        if not isinstance(request, Request):
            raise TypeError("enqueue_request(): incompatible function arguments")
        name = request.logits_post_processor_name
        if name is not None and name not in (self.config.logits_post_processor_map or {}):
            raise RuntimeError(f"[TensorRT-LLM][ERROR] Assertion failed: LogitsPostProcessor {name} not found.")
        if self.is_shut_down:
            raise RuntimeError("[TensorRT-LLM][ERROR] Shutdown called, cannot enqueue request")
        request_id = self._next_id
        self._next_id += 1
        ids = request.input_token_ids
        config = request.external_draft_tokens_config
        draft = list(config.tokens) if config is not None else []
        run = Run(request, request_id, len(ids), request.max_new_tokens, draft)
        self.runs[request_id] = run
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
            reused = self._add_sequence(ids)
            self._simulate(run)
            self._release(ids + [t for it in run.iterations for t in it])
            self._record_iterations(run, reused)
        return request_id

    # -------------------------------------------------------------- KV blocks and stats

    def _blocks(self, tokens: list[int]) -> list[tuple[int, ...]]:
        """chopVectorIntoBlocks(tokens, len - 1, tokens_per_block, partial): the last token is never stored."""
        n, k = len(tokens) - 1, self.tokens_per_block
        return [tuple(tokens[i:i + k]) for i in range(0, max(n, 0), k)]

    def _add_sequence(self, ids: list[int]) -> int:
        """loadOrAllocateBlocks: match stored blocks from the first on; count each match."""
        matched, node = 0, self.stored
        for block in self._blocks(ids) if self.block_reuse else []:
            if block not in node:
                break
            node = node[block]
            matched += 1
        need = -(-(len(ids)) // self.tokens_per_block)
        self.kv.reused_blocks += matched
        self.kv.alloc_total_blocks += need
        self.kv.alloc_new_blocks += need - matched
        return matched

    def _release(self, tokens: list[int]) -> None:
        """releaseBlocks -> storeBlocks: a finished request's blocks become reusable."""
        node = self.stored
        for block in self._blocks(tokens) if self.block_reuse else []:
            node = node.setdefault(block, {})

    def _record_iterations(self, run: Run, reused: int) -> None:
        """One IterationStats per iteration the request ran (the first is its context iteration), each
        with the KV counters as they stand; at most iter_stats_max_iterations are kept."""
        for i, tokens in enumerate(run.iterations or [[]]):
            self._iter += 1
            stats = IterationStats()
            stats.iter, stats.num_active_requests, stats.max_num_active_requests = self._iter, 1, 1
            kv = KvCacheStats()
            kv.__dict__.update(self.kv.__dict__)
            stats.kv_cache_stats = kv
            ifb = InflightBatchingStats()
            ifb.num_scheduled_requests = 1
            ifb.num_context_requests, ifb.num_gen_requests = (1, 0) if i == 0 else (0, 1)
            ifb.num_ctx_tokens = run.input_len - reused * self.tokens_per_block if i == 0 else 0
            ifb.avg_num_decoded_tokens_per_iter = float(len(tokens))
            stats.inflight_batching_stats = ifb
            self.iteration_stats.append(stats)
        del self.iteration_stats[:-self.config.iter_stats_max_iterations or None]

    # -------------------------------------------------------------- responses

    def _respond(self, run: Run) -> list[Response]:
        if run.final_delivered:  # a real executor waits out the whole timeout here
            run.empty_polls += 1
            if run.empty_polls > 50:
                raise AssertionError(f"request {run.request_id} polled 50 times after its final response")
            return []
        if run.error:
            run.final_delivered = True
            return [Response(run.request_id, error_msg=run.error)]
        if run.cancelled:
            run.final_delivered = True
            return [Response(run.request_id, Result([[]], True))]
        if not run.request.streaming:
            run.final_delivered = True
            return [Response(run.request_id, Result([[t for it in run.iterations for t in it]], True))]
        out = []
        for _ in range(RESPONSES_PER_AWAIT[self._batch % len(RESPONSES_PER_AWAIT)]):
            n = CHUNKS[self._batch % len(CHUNKS)]
            self._batch += 1
            chunk = run.iterations[run.next_iter:run.next_iter + n]
            run.next_iter += len(chunk)
            final = run.next_iter >= len(run.iterations)
            out.append(Response(run.request_id, Result([[t for it in chunk for t in it]], final)))
            if final:
                run.final_delivered = True
                break
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
        target = args[0] if args else kwargs.get("id", kwargs.get("ids"))
        if target is None:
            return [r for run in self.runs.values() for r in self._respond(run)]
        if isinstance(target, list):
            return [self._respond(self.runs[i]) for i in target]
        run = self.runs.get(target)
        return self._respond(run) if run is not None else []

    def cancel_request(self, id: int) -> None:  # noqa: A002 (the binding's keyword name)
        self.cancelled.append(id)
        run = self.runs.get(id)
        if run is not None and not run.final_delivered:
            run.cancelled = True

    def get_latest_iteration_stats(self) -> list:
        """getLatestIterationStats: the iterations since the last call (J executor.h)."""
        out, self.iteration_stats = self.iteration_stats, []
        return out

    def shutdown(self) -> None:
        self.is_shut_down = True

    # -------------------------------------------------------------- test helpers

    @property
    def requests(self) -> list[Request]:
        return [run.request for run in self.runs.values()]

    def undelivered(self) -> list[int]:
        """Requests whose last response nobody read: left queued in a real executor."""
        return [i for i, run in self.runs.items() if not run.final_delivered]

    def wasted_polls(self) -> int:
        """await_responses calls for requests whose final response was already returned: each one
        would cost a real caller the whole timeout."""
        return sum(run.empty_polls for run in self.runs.values())
