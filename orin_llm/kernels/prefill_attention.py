"""Prompt attention straight over the INT8 KV cache, on CPUs with AVX-512 VNNI and BF16: a C++ op
(csrc/ops.cpp, its kernel in csrc/kernels/x86.h).

Why: with the home pinned, a warm request's time to first token is its new tokens attending over the
whole cached home. At 4k keys that attention was two thirds of it on the reference machine, in
attention.py's bf16 GEMMs, a bf16 softmax and the copies around them (each layer gathered the int8
K/V and converted them to bf16). The op reads the cache through the sequence's slots and does scores,
softmax and the weighted sum in one call per layer: q rounded to int16 per row times the int8 keys in
integer dot products (exact sums: q keeps 15 bits where the GEMM's bf16 q kept 8), a float32 softmax,
and the weights rounded to bf16 (as the GEMM path's were) times the values in bf16 dot products.

It replaces the bf16 GEMM path exactly where that path ran (attention.py: prompt blocks that end at
or past MIN_KEYS keys over an INT8 cache), so which tokens take it is unchanged. Each query row is
computed on its own, in one fixed order over its keys: a prompt block's K/V are the same whether it
came in this chunk or another, and rows do not depend on what else is in the call. Built at install
(native.py); where it is not built or this CPU lacks the instructions (ARM included: the module then
has no such op, and `prefill_simd()` says so), or with ORIN_LLM_PREFILL_ATTN=0 (A/B measurements),
the bf16 GEMMs run as before.
"""

from __future__ import annotations

from typing import Optional

import torch

from .int8_attention import HEAD_DIMS
from .native import NativeLib


def _no_simd(module) -> Optional[str]:
    return None if module.prefill_simd() else "this CPU has no AVX-512 VNNI and BF16"


_lib = NativeLib("prefill_attention", "the INT8 prompt attention op",
                 "prompt attention runs as bf16 GEMMs over converted K/V (attention.py)", refuse=_no_simd,
                 expects={"HEAD_DIMS": HEAD_DIMS})


def op():
    """The compiled op; None where it is not available (the reason: `unavailable()`)."""
    lib = _lib.get()
    return None if lib is None else lib.int8_prefill_attention


def unavailable() -> Optional[str]:
    """Why the op is not used here (None: it is, or has not been asked for yet)."""
    return _lib.error


def int8_prefill_attention(q: torch.Tensor, cache, layer: int, pos: int) -> torch.Tensor:
    """q: [T, H, D] float32 after RoPE, queries at positions pos .. pos+T-1 whose K/V the cache already
    holds; query t sees positions 0 .. pos+t. Returns [T, H·D] float32."""
    k, v, k_scale, v_scale = cache.int8_layer(layer)
    t = q.shape[0]
    return op()(q.contiguous(), k, v, cache.slot_table(pos + t), pos, k_scale, v_scale).view(t, -1)
