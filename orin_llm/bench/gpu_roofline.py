"""The GPU check's roofline (orin_llm/bench/gpu.py, stage roofline): the bytes a batch-1 decode step must
read, over two bandwidths measured on the same device (a device-to-device copy's, read + written, and a
read-only pass's), and each decode stage's share of both.

What a step reads: every tensor of the layers, the final norm and the head, once each however many
modules hold it (a tied head over the embedding's codes reads them once a step, whoever owns them), and
the K/V of its context. The embedding's lookup reads one row: its tensors count only where the head
reads them too. A head may hold a tensor outside torch's registry, as the Triton INT8 head holds the
embedding's codes in a list (cuda_linear.TritonQ8Head: a buffer would be saved and moved twice): such
tensors count as the head's.
"""

from __future__ import annotations

from typing import Any, Optional

from torch import nn

from ..kernels.cuda_timing import held_tensors, tensor_key

# the decode stages whose batch-1 rate the roofline stage puts against both bandwidths
DECODE_STAGES = ("decode_int4", "decode_int4pack", "decode_gemv", "decode_family", "decode_unfused",
                 "decode_fused_untested", "decode_4k", "decode_constrained")


def step_bytes(model: nn.Module, bytes_per_token: int, context: int) -> dict[str, Any]:
    """The bytes a batch-1 decode step at `context` tokens reads (module doc), for a Llama (runtime/llama.py):
    its children but the embedding, each tensor once; `bytes_per_token`: the KV pool's, every layer."""
    seen: dict[tuple[int, int], str] = {}
    for name, child in model.named_children():
        if name == "embed_tokens":
            continue
        for t in held_tensors(child):
            seen.setdefault(tensor_key(t), name)
    head = sum(n for (_, n), owner in seen.items() if owner == "lm_head")
    weights = sum(n for _, n in seen)
    emb = getattr(model, "embed_tokens", None)
    emb_keys = {tensor_key(t) for t in held_tensors(emb)} if emb is not None else set()
    not_read = sum(n for _, n in emb_keys - seen.keys())
    kv = context * bytes_per_token
    return {"weights_bytes": weights, "head_bytes": head, "kv_bytes": kv, "total_bytes": weights + kv,
            "context": context, "embedding_bytes_not_counted": not_read,
            "counting": "each tensor of the layers, final norm and head once (a tied head's shared codes once); "
                        "the embedding's only where the head reads them; K/V at the context"}


def roofline(bytes_: dict[str, Any], copy_gb_s: Optional[float], read_gb_s: Optional[float],
             stages: dict[str, Any]) -> dict[str, Any]:
    """tok/s at each bandwidth for bytes_['total_bytes'] a step, and each decode stage's batch-1 share of
    both (`<stage>_fraction`: of the copy roofline, as the runs before issue 47; `<stage>_fraction_read`)."""
    out = {**bytes_, "bandwidth_gb_per_s": copy_gb_s, "read_bandwidth_gb_per_s": read_gb_s}
    roofs = {"": copy_gb_s, "_read": read_gb_s}
    for suffix, bw in roofs.items():
        if not bw:
            continue
        roof = bw * 1e9 / bytes_["total_bytes"]
        out[f"roofline_tok_per_s{suffix}"] = round(roof, 1)
        for name in DECODE_STAGES:
            got = stages.get(name, {}).get("batch_1", {}).get("tok_per_s_per_request")
            if got:
                out[f"{name}_fraction{suffix}"] = round(got / roof, 3)
    ours = stages.get("decode_int4", {}).get("batch_1", {}).get("tok_per_s_per_request")
    if ours:
        out["measured_tok_per_s"] = ours
        out["fraction_of_roofline"] = out.get("decode_int4_fraction")
        out["fraction_of_read_roofline"] = out.get("decode_int4_fraction_read")
    return out
