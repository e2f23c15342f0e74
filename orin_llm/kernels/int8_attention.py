"""Decode attention straight over the INT8 KV cache, on CPUs: one of our C++ ops (csrc/ops.cpp).

Why: a decode step of a small model is mostly per-op cost. Over an INT8 cache, torch needed about ten
ops a layer for attention (gather the sequence's K/V and convert them to float, fold the scales into
q and the output, SDPA), and a verify step one SDPA per query so that each row matched a one-token
step. The op reads the int8 K/V through the sequence's slots, computes each query row on its own in
float32 (so rows are bit for bit independent of what else is in the call: speculation stays exactly
lossless), and runs all of a step's queries of one sequence in one call. No library has this: torch's
kernels take float K/V, and llama.cpp's are not callable from torch.

Built at install for this CPU (native.py): its scores on x86 AVX-512 or ARM NEON, bit for bit the
reference loops' (csrc/kernels/). Where it is not built, or with ORIN_LLM_INT8_ATTN=0 (A/B
measurements), decode attention runs the torch ops as before, and the log says so once.
"""

from __future__ import annotations

from typing import Optional

import torch

from .native import NativeLib

HEAD_DIMS = (64, 128)  # the head sizes the op is compiled for (Llama 3.2 1B/3B, SmolLM2: 64 and 128)

_lib = NativeLib("int8_attention", "the INT8 decode attention op",
                 "decode attention runs torch's ops over converted K/V (slower, same results to rounding)",
                 expects={"HEAD_DIMS": HEAD_DIMS})


def op():
    """The compiled op; None where it is not available (the reason: `unavailable()`)."""
    lib = _lib.get()
    return None if lib is None else lib.int8_decode_attention


def unavailable() -> Optional[str]:
    """Why the op is not used here (None: it is, or has not been asked for yet)."""
    return _lib.error


def int8_cache(cache, head_dim: int) -> bool:
    """An INT8 cache on a CPU that offers what our attention ops read (int8_layer, slot_table), at a
    head size they are compiled for (this op and prefill_attention's)."""
    return (getattr(cache, "dtype", None) == torch.int8 and cache.device.type == "cpu"
            and head_dim in HEAD_DIMS and hasattr(cache, "int8_layer"))


def int8_decode_attention(q: torch.Tensor, cache, layer: int, pos: int) -> torch.Tensor:
    """q: [T, H, D] float32 after RoPE, queries at positions pos .. pos+T-1 whose K/V the cache
    already holds; query t sees positions 0 .. pos+t. Returns [T, H·D] float32."""
    k, v, k_scale, v_scale = cache.int8_layer(layer)
    t = q.shape[0]
    out = op()(q.contiguous(), k, v, cache.slot_table(pos + t), pos, k_scale, v_scale)
    return out.view(t, -1)
