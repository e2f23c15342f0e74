"""Loading a TensorRT-LLM 0.12.0-jetson engine directory: its engines' own config.json (what trtllm-build
sized and built), the memory plan's KV tokens, the check against TensorRT-LLM 0.12's load-time rules
(orin_llm/backends/trtllm/rules.py: a combination 0.12 would refuse is refused here, naming the rule), and
one Executor per model with its KvCacheConfig and ExecutorConfig. Citations as in backends/trtllm/engine.py.

Memory: one Executor per model, each with `KvCacheConfig(max_tokens=<memory plan>)`. Never
`free_gpu_memory_fraction`: on the Orin's unified memory "free GPU memory" is free *system* memory,
which counts what the policy model has not allocated yet, and the default (neither given) takes 90 %
of it (R≡J cpp/include/tensorrt_llm/executor/executor.h L439-455).

Prefix reuse: with the profile's `prefix_reuse`, both executors run with
`KvCacheConfig(enable_block_reuse=True)` (and `ExecutorConfig(enable_chunked_context=True)` with its
`chunked_context`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

from ...errors import OrinError
from ...manifest import Manifest, load_manifest, read_json_object
from ...runtime.engine_files import load_tokenizer
from .bindings import executor_module
from .features import BLOCK_REUSE, CHUNKED_CONTEXT, DRAFT_MODEL, GRAMMAR, LOOKUP, wanted
from .grammar import GrammarProcessor, processor_map
from .responses import first_line
from .rules import TOKENS_PER_BLOCK, EngineSetup, broken_rules
from .watchdog import DEFAULT_STALL_S, Watchdog

DEFAULT_MAX_BATCH = 1  # an engine whose config.json and manifest name no max_batch_size


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
                   grammar: Optional[GrammarProcessor] = None, multi_block: bool = False) -> Any:
    # KvCacheConfig(enable_block_reuse=False, max_tokens=None, ...) (R≡J bindings.cpp L323-340);
    # ExecutorConfig(max_beam_width=1, ..., kv_cache_config=KvCacheConfig(), enable_chunked_context=False, ...,
    # logits_post_processor_map=None, ...) (R≡J L518-547; J model_runner_cpp.py from_dir sets
    # enable_chunked_context the same way). The grammar's post-processor: backends/trtllm/grammar.py.
    kv = module.KvCacheConfig(enable_block_reuse=setup.block_reuse, max_tokens=max_kv_tokens)
    extra = {"logits_post_processor_map": processor_map(grammar)} if grammar is not None else {}
    if multi_block:  # ExtendedRuntimePerfKnobConfig(multi_block_mode=False, ...) (R bindings.cpp L451-458)
        extra["extended_runtime_perf_knob_config"] = module.ExtendedRuntimePerfKnobConfig(multi_block_mode=True)
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


def load_engine_dir(make: Callable[..., Any], engine_dir: str | Path, draft: bool = True,
                    manifest: Optional[Manifest] = None, features: Optional[frozenset[str]] = None) -> Any:
    """The engine `make` (TrtllmEngine) builds on the executors of `engine_dir`, loaded and checked.
    draft=False leaves the draft engine unloaded (no draft_model/combined speculation). manifest: the
    directory's manifest, read and verified already (backends/loader.py); else read here. features: the
    ones to turn on among those the engine was built for (features.py; None: all)."""
    engine_dir = Path(engine_dir)
    manifest = manifest if manifest is not None else load_manifest(engine_dir)
    if manifest.backend != "trtllm":
        raise OrinError(f"{engine_dir} was built for the {manifest.backend!r} backend; the TensorRT-LLM "
                        "runtime loads trtllm engines only (runtime.loader.load_engine picks either)")
    module = executor_module()
    roles = {"target": manifest.target}
    if draft and manifest.draft is not None and wanted(features, DRAFT_MODEL):
        roles["draft"] = manifest.draft
    configs = {role: _engine_config(engine_dir / entry.dir, role) for role, entry in roles.items()}
    kv_tokens = {role: _max_kv_tokens(manifest, role, engine_dir) for role in roles}
    # The build turns prefix reuse and chunked context on with paged context FMHA
    # (trtllm_rules.engine_setups); a profile without a key means the Profile default of the time it
    # was built: prefix_reuse True, chunked_context False.
    block_reuse = bool(manifest.profile.get("prefix_reuse", True)) and wanted(features, BLOCK_REUSE)
    chunked = bool(manifest.profile.get("chunked_context", False)) and wanted(features, CHUNKED_CONTEXT)
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
    # lookup and the draft model both send drafts; without either the engine decodes plainly (draft_len 0)
    if not (wanted(features, LOOKUP) or "draft" in roles):
        max_draft = 0
    draft_len = min(manifest.limits.get("draft_len", max_draft), max_draft)
    tokenizer = load_tokenizer(engine_dir / "tokenizer")
    executors: dict[str, Any] = {}
    # the target's: constrained plans (backends/trtllm/grammar.py); without it none is registered at all
    grammar = GrammarProcessor(end_id=0) if wanted(features, GRAMMAR) else None

    multi_block = bool(manifest.profile.get("multi_block_mode", False))

    def make_executors() -> dict[str, Any]:  # at load, and again when the watchdog restarts them
        made: dict[str, Any] = {}
        try:
            for role, entry in roles.items():
                made[role] = _make_executor(module, engine_dir / entry.dir, role, setups[role], kv_tokens[role],
                                            grammar if role == "target" else None, multi_block)
        except BaseException:
            for ex in made.values():
                ex.shutdown()
            raise
        return made

    try:
        executors = make_executors()
        engine = make(engine_dir, manifest, tokenizer, module, executors["target"], executors.get("draft"),
                      block_reuse=block_reuse, tokens_per_block=_tokens_per_block(configs["target"]),
                      draft_len=draft_len, chunked_context=chunked,
                      max_running=_max_batch(configs["target"], manifest),
                      lookup=wanted(features, LOOKUP))
        engine.make_executors = make_executors
        engine.watchdog = Watchdog(float(manifest.profile.get("executor_stall_s", DEFAULT_STALL_S)))
        if grammar is not None:
            grammar.end_id = engine.end_id
        engine.grammar = grammar
        return engine
    except BaseException:
        for ex in executors.values():
            ex.shutdown()
        raise
