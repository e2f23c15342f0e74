"""A Llama model's shape fields from its HF config.json, its parameter count and its weights' bytes per
format: plain arithmetic on the standard library.

Standard library only on purpose: first contact's checks (doctor/first_checks.py) size the disk an
engine build needs from the profile before anything is installed on the Orin (JetPack 6's Python 3.10
has no pydantic). arch.py's `Arch` and build/memory.py's `weights_bytes` are this arithmetic.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

from .errors import OrinError

# Bytes per element of the tensors a quantized format leaves unquantized (embeddings, lm_head,
# norms): the compute dtype.
DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}

# Bytes per parameter of the unquantized formats: every tensor is stored at this width.
FLOAT_WEIGHT_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}


class Shape(Protocol):
    num_layers: int
    hidden_size: int
    intermediate_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    tie_word_embeddings: bool


def hf_fields(cfg: dict[str, Any], source: str = "config.json") -> dict[str, Any]:
    """The shape fields (arch.Arch's) of a Llama config.json."""
    if cfg.get("model_type") != "llama":
        raise OrinError(f"{source}: model_type {cfg.get('model_type')!r}; only 'llama' is supported")
    try:
        heads = int(cfg["num_attention_heads"])
        # transformers 5 nests rope settings in rope_parameters; 4.x keeps rope_theta/rope_scaling.
        rope = dict(cfg.get("rope_parameters") or {})
        scaling = cfg.get("rope_scaling") or (rope if rope.get("rope_type", "default") != "default" else None)
        theta = rope.get("rope_theta", cfg.get("rope_theta", 10000.0))
        return dict(
            num_layers=cfg["num_hidden_layers"],
            hidden_size=cfg["hidden_size"],
            intermediate_size=cfg["intermediate_size"],
            num_heads=heads,
            num_kv_heads=cfg.get("num_key_value_heads", heads),
            head_dim=cfg.get("head_dim") or cfg["hidden_size"] // heads,
            vocab_size=cfg["vocab_size"],
            tie_word_embeddings=cfg.get("tie_word_embeddings", False),
            max_position_embeddings=cfg.get("max_position_embeddings", 2048),
            rms_norm_eps=cfg.get("rms_norm_eps", 1e-6),
            rope_theta=theta,
            rope_scaling=({k: v for k, v in scaling.items() if k != "rope_theta"} if scaling else None),
        )
    except KeyError as e:
        raise OrinError(f"{source}: missing key {e.args[0]!r}; is this a Llama config.json?") from None


def param_count(a: Shape) -> int:
    h, i, d = a.hidden_size, a.intermediate_size, a.head_dim
    attn = h * d * (a.num_heads * 2 + a.num_kv_heads * 2)
    per_layer = attn + 3 * h * i + 2 * h
    embed = a.vocab_size * h * (1 if a.tie_word_embeddings else 2)
    return a.num_layers * per_layer + embed + h


def linears(a: Shape) -> list[tuple[int, int]]:
    """(in_features, out_features) of one decoder layer's linear layers."""
    h, q, kv, i = a.hidden_size, a.num_heads * a.head_dim, a.num_kv_heads * a.head_dim, a.intermediate_size
    return [(h, q), (h, kv), (h, kv), (q, h),  # q, k, v, o
            (h, i), (h, i), (i, h)]  # gate, up, down


def weights_bytes(a: Shape, weights: str, dtype: str, int4_group_size: int, backend: str,
                  packed_head: bool = False) -> int:
    """Weight bytes at the quantized size the engine holds in memory (build/memory.py's weights_bytes
    says what each format counts)."""
    per_layer_linear_params = sum(i * o for i, o in linears(a))
    norm_params = a.num_layers * 2 * a.hidden_size + a.hidden_size  # 2 RMSNorms per layer + final
    embed_params = a.vocab_size * a.hidden_size
    # TensorRT-LLM and Edge-LLM keep the lm_head in the engine and the embedding beside it
    head_params = embed_params if (not a.tie_word_embeddings or backend in ("trtllm", "edgellm") or packed_head) else 0
    rest_params = embed_params + head_params + norm_params

    if weights in FLOAT_WEIGHT_BYTES:
        width = FLOAT_WEIGHT_BYTES[weights]
        return (a.num_layers * per_layer_linear_params + rest_params) * width

    rest = rest_params * DTYPE_BYTES[dtype]
    if weights == "q4_1":  # torch, kernels/quant.py: int4 codes + a bf16 scale and zero per 32
        layer = sum(math.ceil(i * o / 2) + math.ceil(i / 32) * o * 4 for i, o in linears(a))
        # the lm_head in float32 (oneDNN's packed copy on CPUs), the embedding as Q8_0 for lookups
        # (1 B/param + a float32 scale per 32: quant.Q8Embedding)
        head = embed_params * 4 + embed_params + embed_params // 32 * 4
        return a.num_layers * layer + head + norm_params * DTYPE_BYTES[dtype]
    scale = 2  # fp16 scales
    if weights == "int8_wo":
        layer = sum(i * o + o * scale for i, o in linears(a))
    else:  # int4_wo, int4_awq, int4_gptq
        g = int4_group_size
        layer = sum(math.ceil(i * o / 2) + math.ceil(i / g) * o * scale for i, o in linears(a))
        if weights == "int4_awq":
            layer += sum(i * scale for i, _ in linears(a))
    return a.num_layers * layer + rest
