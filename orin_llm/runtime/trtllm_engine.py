"""A TensorRT-LLM 0.12.0-jetson engine directory behind the torch Engine's public surface.

`TrtllmEngine` mirrors runtime/engine.py's `Engine` (name, manifest, tokenizer, eos_ids, encode,
chat_text, chat_ids, check_prompt, pin, pinned, cached_prefix, speculation_modes, generate), and
`TrtllmGeneration` mirrors runtime/generate.py's `Generation` (iterate for text deltas, `.result`,
`.on_done`, closing the iterator cancels), so the planner and the server do not care which backend
serves them. Text comes out through the same TextStream (incremental detokenization, stop strings).

Every binding call goes through `trtllm_bindings.executor_module()`; the keyword names are those
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
(orin_llm/trtllm_rules.py) and refuses a combination 0.12 would refuse, naming the rule. `pin(ids)`
runs the prefix once (max_new_tokens=1) so its KV blocks are stored; a later prompt that starts with
the same tokens reuses them, in whole blocks of `tokens_per_block` (the engine's `--tokens_per_block`,
build/trtllm.py), never its last token. `cached_prefix()` is what the pinned prefix *can* serve.
What a request was really served is measured: `cached_prompt_tokens` is the growth of the target
executor's `KvCacheStats.reused_blocks` over the request × tokens_per_block (capped at the prompt
length − 1). 0.12's counter is cumulative: the BlockManager's `mReusedBlocks` starts at 0 and only
grows, once per block matched when a request is added (loadOrAllocateBlocks in the code index's copy
of kvCacheManager.cpp of that series), and the iteration stats copy it as it is (first open
trtGptModelInflightBatching.cpp, getCurrentIterationStats); get_latest_iteration_stats() returns the
iterations since its last call (J executor.h); docs/trtllm-0.12-jetson.md §4, §7. The engine serves one
request at a time, so the growth belongs to that request. Without reuse nothing is stored and every
request prefills its whole prompt.

Speculative decoding: 0.12-jetson has no draft/target driver in Python (doc §5), so the loop is
ours, one request per step, as the reference Triton BLS orchestrator does it (tensorrtllm_backend
v0.12.0 all_models/inflight_batcher_llm/tensorrt_llm_bls/1/lib/decode.py L214-292):

* draft: up to k tokens from `LookupDrafter` (model-free, as for torch) or from the draft engine
  (a non-streaming greedy request on the context with max_new_tokens=k);
* verify: a target request with input = the whole context, `ExternalDraftTokensConfig(tokens=draft)`
  and max_new_tokens = len(draft) + 1 (the BLS's choice, …/lib/triton_decoder.py L352-358). The
  decoder samples the target's token at every draft position with the request's sampling config
  (R cpp/tensorrt_llm/runtime/gptDecoderBatched.cpp L913) and then compares ids
  (acceptDraftTokensByIds, L934-954); every position counts one step towards max_new_tokens
  (L931-932), so the request ends after that one iteration with accepted + 1 new tokens. (Read in
  the open runtime sources; the 0.12 batch manager that drives it is a closed library.) The Result
  carries no acceptance count (doc §4), but the accepted tokens are in it: the decoder accepts a draft
  token exactly when the target's own token at that position has the same id, so the common prefix of
  the draft and the returned tokens *is* the engine's acceptance, not an estimate of it (returned − 1
  whenever the target added its own token, and still right if it ever decoded on past that iteration).
  SpecStats counts that per step.

Each step re-sends the whole context. With block reuse that costs the blocks not yet stored (the
last partial block and the newest tokens, docs/trtllm-0.12-jetson.md §9); without it every step would
re-prefill the whole prompt, and 0.12 does not load a draft-tokens target without block reuse anyway.

The end-of-turn ids other than the Request's one `end_id` (Llama 3's <|eot_id|>, <|end_of_text|>,
<|eom_id|>) and a request's stop_token_ids go into Request(stop_words=[[id], ...]), so the engine stops
by itself there.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Generator, Iterable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal, Optional

from ..errors import OrinError, PromptTooLong
from ..manifest import Manifest, load_manifest, read_json_object
from ..trtllm_rules import EngineSetup, broken_rules
from .engine import AUTO_SPECULATION, EngineText, eos_ids, load_tokenizer, lookup_seed
from .generate import Result, SpecStats, Timings
from .sampling import SamplingParams
from .speculative import AdaptiveK, CombinedDrafter, LookupDrafter
from .text import TextStream
from .trtllm_bindings import executor_module

log = logging.getLogger(__name__)

# await_responses(id, timeout) returns as soon as a response is ready, else [] after the timeout
# (a std::chrono::milliseconds; pybind11/chrono.h takes a timedelta, J executor.cpp). Never call it
# without a timeout: it then blocks, forever if that id's responses were all delivered (doc §4).
POLL = timedelta(milliseconds=100)
DRAIN_POLLS = 20  # after cancel_request: wait at most this many POLLs for the request's last response

SPECULATIVE_MODES = ("lookup", "draft_model", "combined")


def _first_line(text: str) -> str:
    lines = [ln.strip() for ln in str(text).strip().splitlines() if ln.strip()]
    return lines[0] if lines else "(no message)"


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < len(a) and n < len(b) and a[n] == b[n]:
        n += 1
    return n


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
    from ..build.trtllm import TOKENS_PER_BLOCK  # what our build passes (--tokens_per_block)

    return TOKENS_PER_BLOCK


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


def _make_executor(module: Any, path: Path, role: str, setup: EngineSetup, max_kv_tokens: int) -> Any:
    # KvCacheConfig(enable_block_reuse=False, max_tokens=None, ...) (R≡J bindings.cpp L323-340);
    # ExecutorConfig(max_beam_width=1, ..., kv_cache_config=KvCacheConfig(), enable_chunked_context=False, ...)
    # (R≡J L518-547; J model_runner_cpp.py from_dir sets enable_chunked_context the same way).
    kv = module.KvCacheConfig(enable_block_reuse=setup.block_reuse, max_tokens=max_kv_tokens)
    config = module.ExecutorConfig(max_beam_width=1, kv_cache_config=kv, enable_chunked_context=setup.chunked_context)
    try:
        # Executor(model_path, model_type, executor_config) (R≡J: executor.cpp initBindings; the jetson
        # overload with use_mmap is not used: mmap only helps static batching, README4Jetson §3).
        return module.Executor(model_path=str(path), model_type=module.ModelType.DECODER_ONLY,
                               executor_config=config)
    except RuntimeError as e:  # TllmException: engine from another GPU / TensorRT version, out of memory
        raise OrinError(f"{path}: TensorRT-LLM could not load the {role} engine: {_first_line(str(e))}; "
                        "rebuild it on this device (orin-llm build) or lower the memory plan") from None


class TrtllmEngine(EngineText):
    """An engine directory built with backend "trtllm": TensorRT-LLM executors + our tokenizer."""

    backend = "trtllm"

    def __init__(self, engine_dir: Path, manifest: Manifest, tokenizer, module: Any, target: Any,
                 draft: Optional[Any] = None, *, block_reuse: bool, tokens_per_block: int, draft_len: int,
                 chunked_context: bool = False):
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
        self.pinned: list[int] = []  # the prefix whose KV blocks pin() stored (block reuse) or recorded
        self.lookup_seed = lookup_seed(engine_dir, manifest)
        self.lookup = LookupDrafter(seed=self.lookup_seed)  # one per engine: its history is the point
        self._closed = False

    @classmethod
    def load(cls, engine_dir: str | Path, draft: bool = True) -> TrtllmEngine:
        """draft=False leaves the draft engine unloaded (no draft_model/combined speculation)."""
        engine_dir = Path(engine_dir)
        manifest = load_manifest(engine_dir)
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
        try:
            for role, entry in roles.items():
                executors[role] = _make_executor(module, engine_dir / entry.dir, role, setups[role], kv_tokens[role])
            return cls(engine_dir, manifest, tokenizer, module, executors["target"], executors.get("draft"),
                       block_reuse=block_reuse, tokens_per_block=_tokens_per_block(configs["target"]),
                       draft_len=draft_len, chunked_context=chunked)
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

    def pin(self, ids: list[int]) -> None:
        """Run `ids` once on each engine so their KV blocks are stored for reuse (see the module doc:
        whole blocks only). Without block reuse there is nothing to keep: the ids are only recorded."""
        ids = list(ids)
        self.check_prompt(len(ids))
        self.pinned = []
        if ids and self.block_reuse:
            for executor in self.executors:  # the draft re-reads the context every step too
                request = self.request(ids, 1, streaming=False, sampling=self.greedy_config())
                for _ in _results(executor, self.enqueue(executor, request)):
                    pass
        self.pinned = ids

    def cached_prefix(self, prompt_ids: list[int]) -> int:
        """Prompt tokens whose KV blocks the pinned prefix stored: whole blocks of it only. What a
        request was really served is measured (TrtllmGeneration: timings.cached_prompt_tokens); this is
        what the pin can serve at most (TensorRT-LLM evicts blocks least-recently-used when full)."""
        n = len(self.pinned)
        if not self.block_reuse or not (0 < n < len(prompt_ids) and prompt_ids[:n] == self.pinned):
            return 0
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

    def generate(self, prompt_ids: list[int], params: SamplingParams,
                 speculation: str = "auto") -> TrtllmGeneration:
        mode = self.resolve_speculation(speculation, params)
        prompt_ids = list(prompt_ids)
        if not prompt_ids:
            raise OrinError("empty prompt")
        self.check_prompt(len(prompt_ids))
        return TrtllmGeneration(self, prompt_ids, params, mode)

    def stream(self, executor: Any, ids: list[int], max_new_tokens: int) -> Iterator[list[int]]:
        """Plain greedy decoding of `ids` on one executor, the target's or the draft's, streamed: each
        response's new tokens as they arrive (the benchmark times each engine with it; a Generation runs
        the target only). Read it to the end: an abandoned request is not cancelled."""
        request = self.request(ids, max_new_tokens, streaming=True, sampling=self.greedy_config())
        for tokens, _final in _results(executor, self.enqueue(executor, request)):
            yield tokens

    def kv_usage(self) -> dict:
        """The executor owns its KV blocks; report the plan's budget and the pinned prefix."""
        plan = self.manifest.memory_plan or {}
        target = plan.get("target") or {}
        return {"device": "cuda (TensorRT-LLM)", "tokens": len(self.pinned),
                "capacity_tokens": int(target.get("max_kv_tokens") or plan.get("max_kv_tokens") or 0),
                "bytes": int(target.get("kv_bytes") or 0)}

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
        """enqueue_request, noting that the target's KV stats may have moved (reused_blocks)."""
        request_id = _enqueue(executor, request)
        if executor is self.target_executor:
            self._reuse_unread = True
        return request_id

    def reused_blocks(self, read: bool = False) -> Optional[int]:
        """The target executor's cumulative KvCacheStats.reused_blocks (module doc), read from its
        iteration stats when a request ran since the last read (or `read`); None when its stats carry
        no KV stats. Reading drains the executor's stats: only this engine reads them."""
        if read or self._reuse_unread:
            self._reuse_unread = False
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
                draft: Optional[list[int]] = None, stop_ids: Iterable[int] = ()) -> Any:
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
        return m.Request(**kwargs)


# ---------------------------------------------------------------------------------- responses


def _enqueue(executor: Any, request: Any) -> int:
    try:
        return executor.enqueue_request(request)  # -> request id (R≡J executor.cpp initBindings)
    except RuntimeError as e:
        raise OrinError(f"TensorRT-LLM refused the request: {_first_line(str(e))}") from None


def _results(executor: Any, request_id: int,
             on_last: Optional[Callable[[], None]] = None) -> Iterator[tuple[list[int], bool]]:
    """(new tokens, is_final) per response of one request, until its final one. `on_last` is called
    as soon as the final (or an error) response has been *received*, before the responses of that
    batch are handed out: a consumer that stops early must then not wait for more.

    Response.has_error() is a method, error_msg/result properties (R≡J bindings.cpp L276-282);
    Result.output_token_ids is one list per beam, is_final a field (L266-274). With
    exclude_input_from_output, each streamed response holds that iteration's new tokens only
    (R≡J tensorrt_llm/runtime/model_runner_cpp.py L522-585 appends them).
    """
    while True:
        responses = executor.await_responses(request_id, timeout=POLL)
        if on_last is not None and any(r.has_error() or r.result.is_final for r in responses):
            on_last()
        for response in responses:
            if response.has_error():
                raise OrinError(f"TensorRT-LLM request failed: {_first_line(response.error_msg)}")
            result = response.result
            beams = result.output_token_ids
            tokens = [int(t) for t in beams[0]] if beams else []
            yield tokens, bool(result.is_final)
            if result.is_final:
                return


def _cancel(executor: Any, request_id: int) -> None:
    """cancel_request(id) (R≡J executor.cpp), then read the request's last response so it does not
    stay queued in the executor. Bounded: a slow executor is left to finish on its own."""
    try:
        executor.cancel_request(request_id)
        for _ in range(DRAIN_POLLS):
            responses = executor.await_responses(request_id, timeout=POLL)
            if any(r.has_error() or r.result.is_final for r in responses):
                return
    except RuntimeError as e:  # never mask the reason we are cancelling
        log.warning("cancelling TensorRT-LLM request %s: %s", request_id, _first_line(str(e)))


# ---------------------------------------------------------------------------------- drafters


class EngineDrafter:
    """The draft engine: greedy, non-streaming, max_new_tokens=k on the current context."""

    name = "draft_model"

    def __init__(self, engine: TrtllmEngine):
        self.engine = engine

    def begin(self, context: list[int]) -> None:
        pass

    def propose(self, context, k, params, gen):
        executor = self.engine.draft_executor
        request = self.engine.request(context, k, streaming=False, sampling=self.engine.greedy_config())
        tokens: list[int] = []
        for new, _final in _results(executor, self.engine.enqueue(executor, request)):
            tokens += new
        return tokens[:k], None

    def rollback(self, valid: int) -> None:
        pass

    def finish(self, output: list[int]) -> None:
        pass


# ---------------------------------------------------------------------------------- generation


class TrtllmGeneration:
    """Iterate for text deltas as they are decided; `.result` once exhausted. Closing the iterator
    early (or an error) cancels the request in flight."""

    def __init__(self, engine: TrtllmEngine, prompt_ids: list[int], params: SamplingParams, mode: str,
                 on_done: Optional[Callable[[], None]] = None):
        self.engine, self.prompt_ids, self.params, self.mode = engine, list(prompt_ids), params, mode
        self.stream = TextStream(engine.tokenizer, params.stop)
        self.stop_ids = engine.eos_ids | set(params.stop_token_ids)
        self.result: Optional[Result] = None
        self.on_done = on_done  # called once the request is over (done, failed or abandoned)
        self.started: Optional[float] = None  # as Generation.started: when the request began
        self._active: Optional[tuple[Any, int]] = None  # (executor, id) of a request that may still run
        self._reused_before: Optional[int] = None  # the target's reused_blocks before this generation's first request
        self._measured = False
        self._seed_calls = 0
        self._rng: Optional[random.Random] = None

    # ---------------------------------------------------------------- pieces

    def _seed(self) -> int:
        """The request's random_seed. 0.12's default seed is 0 (R defaultDecodingParams.h L58-61), so an
        unseeded request gets a fresh one; a seeded generation passes its seed, and its later requests
        (speculative steps) get seeds drawn from it, so that no two steps replay the same random stream."""
        self._seed_calls += 1
        if self.params.seed is not None and self._seed_calls == 1:
            return self.params.seed
        if self._rng is None:
            seed = self.params.seed
            self._rng = random.Random(seed) if seed is not None else random.SystemRandom()
        return self._rng.getrandbits(63)

    def _sampling(self) -> Any:
        if self.params.greedy:
            return self.engine.greedy_config()
        return self.engine.sampled_config(self.params, self._seed())

    def _take(self, tok: int) -> tuple[str, bool]:
        """One decided token through the stop checks: (text to emit, whether generation is over)."""
        if not self._out:
            self._timings.ttft_s = time.perf_counter() - self._t0
        if tok in self.stop_ids:
            self._finish = "stop"
            return "", True
        self._out.append(tok)
        self._ctx.append(tok)
        delta, stopped = self.stream.push(tok)
        if stopped:
            self._finish = "stop"
            return delta, True
        if len(self._out) >= self.params.max_tokens:
            self._finish = "length"
            return delta, True
        return delta, False

    def _ended_by_engine(self) -> None:
        """The engine finished a request early: its end_id, or its max_seq_len cap (llmRequest.h L281-290)."""
        self._finish = "length" if len(self._ctx) >= self.engine.max_seq_len else "stop"
        self._done = True

    def _decode(self, n: int) -> Generator[str, None, int]:
        """Up to n tokens of plain decoding, streamed; returns how many the engine produced."""
        request = self.engine.request(self._ctx, n, streaming=True, sampling=self._sampling(),
                                      stop_ids=self.stop_ids)
        produced = 0
        for tokens, _final in self._run(self.engine.target_executor, request):
            for tok in tokens:
                produced += 1
                delta, done = self._take(tok)
                if delta:
                    yield delta
                if done:
                    self._done = True
                    self._cancel()  # stop string, extra stop id or max_tokens: nothing more is wanted
                    return produced
        if produced < n:
            self._ended_by_engine()
        return produced

    def _verify(self, draft: list[int]) -> Generator[str, None, int]:
        """One speculative step: the target checks `draft`; returns how many draft tokens it accepted."""
        request = self.engine.request(self._ctx, len(draft) + 1, streaming=False, sampling=self._sampling(),
                                      draft=draft, stop_ids=self.stop_ids)
        new: list[int] = []
        for tokens, _final in self._run(self.engine.target_executor, request):
            new += tokens
        accepted = _common_prefix(draft, new)
        for tok in new:
            delta, done = self._take(tok)
            if delta:
                yield delta
            if done:
                self._done = True
                return accepted
        if len(new) <= len(draft) and accepted == len(new):
            self._ended_by_engine()  # no token of its own after the accepted ones: it hit end_id
        return accepted

    def _run(self, executor: Any, request: Any) -> Iterator[tuple[list[int], bool]]:
        """Enqueue `request` and follow it; while it may still produce responses it is `_active`, the
        request that closing the iterator (or a stop) cancels. The generation's first request is the one
        that reads the prompt: once its first response is in, its blocks were matched, and what the
        cache served is measured."""
        engine = self.engine
        first = not self._measured and executor is engine.target_executor
        if first and engine.block_reuse:
            self._reused_before = engine.reused_blocks()
        request_id = engine.enqueue(executor, request)
        self._active = (executor, request_id)

        def received_last() -> None:  # the final (or an error) response is in: nothing left to cancel
            self._active = None

        for item in _results(executor, request_id, on_last=received_last):
            if first:
                first = False
                self._measure_cached()
            yield item

    def _measure_cached(self) -> None:
        """timings.cached_prompt_tokens = the blocks the target reused for the first request, in tokens
        (module doc). A matched block counts whole even when it is a stored partial block, so the figure
        is capped at the prompt length - 1: the last prompt token is never served from the cache."""
        self._measured = True
        if not self.engine.block_reuse or self._reused_before is None:
            return
        after = self.engine.reused_blocks(read=True)
        if after is not None:
            blocks = max(0, after - self._reused_before)
            self._timings.cached_prompt_tokens = min(blocks * self.engine.tokens_per_block, len(self.prompt_ids) - 1)

    def _cancel(self) -> None:
        if self._active is not None:
            executor, request_id = self._active
            self._active = None
            _cancel(executor, request_id)

    def _drafter(self):
        engine = self.engine
        if self.mode == "lookup":
            return engine.lookup
        if self.mode == "draft_model":
            return EngineDrafter(engine)
        if self.mode == "combined":
            return CombinedDrafter(engine.lookup, EngineDrafter(engine))
        return None

    def _speculate(self, drafter, stats: SpecStats) -> Generator[str, None, None]:
        engine, params = self.engine, self.params
        k_max = engine.draft_len
        adapt = AdaptiveK(k_max, k_max)  # k_max = the engine's --max_draft_len: more is refused
        while not self._done:
            remaining = params.max_tokens - len(self._out)
            # A request's input plus its draft must fit max_input_len (R≡J llmRequest.h L247-278); each
            # step re-sends the context as input, so once it nears max_input_len, the rest is plain.
            room = engine.max_input_len - len(self._ctx)
            if room <= 1:
                stats.steps += yield from self._decode(remaining)
                break
            k = min(adapt.next_k(), k_max, remaining - 1, room - 1)
            draft = drafter.propose(self._ctx, k, params, None)[0][:k] if k > 0 else []
            if draft:
                accepted = yield from self._verify(draft)
                adapt.update(len(draft), accepted)
                stats.drafted += len(draft)
                stats.accepted += accepted
                stats.steps += 1
                continue
            # No draft: the drafter found nothing, AdaptiveK paused drafting, or one token is left. Every
            # request re-sends the context, so decode a few tokens per request rather than one: the rest
            # of the pause, else k_max tokens; never past max_input_len (the next step's input).
            chunk = adapt.paused + 1 if adapt.paused else k_max
            adapt.paused = 0
            stats.steps += yield from self._decode(max(1, min(remaining, room, chunk)))

    # ---------------------------------------------------------------- the loop

    def __iter__(self) -> Iterator[str]:
        self._t0 = time.perf_counter() if self.started is None else self.started
        self._timings = Timings(prompt_tokens=len(self.prompt_ids), cached_prompt_tokens=0)
        self._ctx: list[int] = list(self.prompt_ids)
        self._out: list[int] = []
        self._finish: Literal["stop", "length"] = "length"
        self._done = False
        stats = SpecStats(drafter=self.mode)
        drafter = self._drafter()
        try:
            if drafter is None:
                yield from self._decode(self.params.max_tokens)
                stats.steps = max(0, len(self._out) - 1)  # as torch: decode steps after the prefill's token
            else:
                drafter.begin(self._ctx)
                yield from self._speculate(drafter, stats)
            tail = self.stream.flush()
            if tail:
                yield tail
        finally:
            self._cancel()  # closed early, or failed: the request in flight is not wanted any more
            if drafter is not None:
                drafter.finish(self._out)
            if self.on_done is not None:
                self.on_done()
        self._timings.completion_tokens = len(self._out)
        self._timings.total_s = time.perf_counter() - self._t0
        self.result = Result(self.stream.text, self._out, self._finish, self._timings, stats)

    def run(self) -> Result:
        for _ in self:
            pass
        assert self.result is not None
        return self.result
