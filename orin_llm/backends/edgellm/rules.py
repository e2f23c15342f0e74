"""What TensorRT Edge-LLM 0.11 can and cannot do for this planner, as data: asked by the build, the memory
plan and the backend, so all three refuse the same things with the same words. Imports nothing of
Edge-LLM (a laptop plans an Orin build).

Sources, cited as `W:path Lnn` (the `tensorrt-edgellm` 0.11.0 wheel from PyPI, its Python files as
installed by `make edgellm`) or `QS` (the 0.11.0 Quick Start, docs site
0.11.0/user_guide/getting_started/quick-start-guide.html, section "Option 1: ONNX and C++ runtime"):

- the export runs on a CPU for unquantized and pre-quantized checkpoints (QS §1); INT4 AWQ
  quantization needs a CUDA GPU (W:tensorrt_edgellm/scripts/quantize.py L102 `--device` default
  "cuda"; QS: "run tensorrt-edgellm-quantize on an x86 GPU host before export");
- the quantizer's only KV option is FP8 (W:.../quantize.py L98-100 `--kv_cache_quantization`
  choices ["fp8"]), which Orin (SM87) does not run: on Orin the KV cache is FP16, and the export writes
  `kv_cache_dtype: "fp16"` unless FP8 was asked (W:tensorrt_edgellm/checkpoint/checkpoint_utils.py L870-874);
- the OpenAI server builds its own engines from the checkpoint and refuses an ONNX directory
  (W:experimental/server/runtime/engine_build.py L120-123: "ONNX model directories are not supported;
  pass the original checkpoint"); the ONNX export feeds the C++ runtime (`llm_build`, QS §2);
- its speculation is EAGLE3, MTP, DFlash, JetSpec or DSpark with a trained drafter
  (W:experimental/server/config.py L72-76 `--speculative-config.method`): no external draft tokens, so
  our lookup and draft-model speculation do not carry over; in-flight batching is refused with any of
  them (config.py L355-363);
- prefix reuse is its context cache (`--enable-context-reuse`, config.py L349-354; per request
  `reuse_context`, `cache_generated_tokens`: W:experimental/server/api/protocol.py L92-93), records
  evicted least-recently-used past `--context-cache-max-records` (config.py L364-366): nothing is
  pinned.
"""

from __future__ import annotations

from typing import Optional

from ..trtllm.rules import Deployment, EngineSetup

EDGELLM_VERSION = "0.11.0"  # the PyPI wheel `make edgellm` installs and every citation above reads
PAGE_TOKENS = 128  # a KV page: the exported graph's past_key_values are [2, num_pages, 128, kv_heads, head_dim]
WEIGHTS = ("fp16", "int4_awq", "int4_gptq")  # fp16 and a GPTQ checkpoint export as they are; AWQ is quantized first

NO_EXTERNAL_DRAFTS = ("Edge-LLM 0.11 takes no external draft tokens: its speculation is EAGLE3, MTP, DFlash, "
                      "JetSpec or DSpark with a trained drafter (--speculative-config), none published for "
                      "Llama 3.2; our lookup and draft-model speculation do not carry over")
NO_INT8_KV = ("Edge-LLM 0.11 quantizes the KV cache to FP8 only (tensorrt-edgellm-quantize "
              "--kv_cache_quantization {fp8}), which Jetson Orin (SM87) does not run: its KV cache is FP16 there")
NO_PINS = ("Edge-LLM's context cache keeps committed prefixes until its least-recently-used eviction "
           "(--context-cache-max-records): a home's prefix is stored, never pinned")
NO_CHUNKED = "the Edge-LLM server exposes no chunked-prefill setting (its scheduler decides)"


def profile_refusal(profile) -> Optional[str]:
    """Why the build refuses this edgellm profile (one line with the fix), or None."""
    t = profile.target
    if profile.draft is not None:
        return f"[draft] is set but {NO_EXTERNAL_DRAFTS}; remove [draft] from the profile"
    if t.kv_cache != "fp16":
        return f"target.kv_cache = {t.kv_cache!r}: {NO_INT8_KV}; set kv_cache = \"fp16\""
    if t.weights not in WEIGHTS:
        return (f"target.weights = {t.weights!r} is not an Edge-LLM 0.11 format on Orin; use \"int4_awq\" "
                "(quantized on a GPU host), \"int4_gptq\" (a GPTQ checkpoint as it is) or \"fp16\"")
    if t.dtype != "float16":
        return (f"target.dtype = {t.dtype!r}: Edge-LLM's graphs are FP16 (tensorrt-edgellm-quantize --dtype takes "
                "fp16 only, quantize.py L101); set dtype = \"float16\"")
    if t.model.startswith("package:") or t.model.endswith(".gguf"):
        return (f"target.model = {t.model!r}: tensorrt-edgellm-export reads Hugging Face checkpoint directories, "
                "not GGUF files; point model at the checkpoint directory")
    if profile.chunked_context:
        return f"chunked_context = true but {NO_CHUNKED}; set chunked_context = false"
    return None


def kv_capacity(profile, pool_tokens: int) -> int:
    """--maxKVCacheCapacity / --max-kv-cache-capacity for a pool of `pool_tokens`: per sequence slot, whole
    pages, at least max_seq_len. Whether Edge-LLM reads it per slot or for the whole pool is not in its docs
    (QS passes 4096 with --maxBatchSize 2): the memory plan counts it per slot, the larger of the two."""
    per_slot = -(-pool_tokens // profile.limits.max_batch_size)
    per_slot = max(per_slot, profile.limits.max_seq_len)
    return -(-per_slot // PAGE_TOKENS) * PAGE_TOKENS


def edgellm_deployment(profile) -> Deployment:
    """What an edgellm profile's engine gets (memory plan, dry run, /health)."""
    t = profile.target
    reuse = profile.prefix_reuse and t.kv_cache == "fp16"
    why = [("lookup, draft_model, combined", NO_EXTERNAL_DRAFTS), ("chunked_context", NO_CHUNKED),
           ("pinned prefixes", NO_PINS)]
    if not reuse:
        why.append(("prefix_reuse", NO_INT8_KV if t.kv_cache != "fp16" else "prefix_reuse = false in the profile"))
    engine = EngineSetup(role="target", kv_cache="fp16", paged_context_fmha=False, draft_tokens_external=False,
                         block_reuse=reuse, chunked_context=False)
    return Deployment(backend="edgellm", engines=(engine,), kv_cache="fp16", prefix_reuse=reuse,
                      chunked_context=False, speculation=("none",), why_not=tuple(why),
                      refused=profile_refusal(profile), constrained_speculation=("none",))
