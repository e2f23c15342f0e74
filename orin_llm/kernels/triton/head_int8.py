"""The LM head in INT8, in Triton: logits = x @ (codes · scales).T in float32.

Two scale layouts, one kernel: per row (scales [V], quant.quantize_int8's: a requantized head, as
runtime/head.py's CPU int8 pass) or per block of the input (scales [V, K/group]: a GGUF's Q8_0
matrix as quant.recover_q8_0 gives it, so the logits are of the GGUF's very weights). Codes stay
[V, K] int8 as stored; a tile converts them to x's dtype (int8 is exact in float16 and bfloat16),
per-block scales are applied in registers, a per-row scale once to the sums.
"""

from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl

from .common import check_float, dot, dot_mode, operand


@triton.jit
def _int8_head(X, W, S, Y, M, N, K, stride_xm, stride_w, stride_s, stride_ym,
               GROUP: tl.constexpr, PER_ROW: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               BLOCK_K: tl.constexpr, DOT: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mmask = rm < M
    nmask = rn < N
    kk = tl.arange(0, BLOCK_K)
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + kk
        kmask = k < K
        x = tl.load(X + rm[:, None].to(tl.int64) * stride_xm + k[None, :], mask=mmask[:, None] & kmask[None, :],
                    other=0.0)
        wmask = kmask[:, None] & nmask[None, :]
        w = tl.load(W + rn[None, :].to(tl.int64) * stride_w + k[:, None], mask=wmask, other=0)  # [BLOCK_K, BLOCK_N]
        if PER_ROW:
            acc += dot(x, operand(w, x.dtype, DOT), DOT)
        else:
            s = tl.load(S + rn[None, :].to(tl.int64) * stride_s + (k // GROUP)[:, None], mask=wmask, other=0.0)
            acc += dot(x, operand(w.to(tl.float32) * s.to(tl.float32), x.dtype, DOT), DOT)
    if PER_ROW:
        acc = acc * tl.load(S + rn, mask=nmask, other=0.0).to(tl.float32)[None, :]
    tl.store(Y + rm[:, None].to(tl.int64) * stride_ym + rn[None, :], acc, mask=mmask[:, None] & nmask[None, :])


def int8_head(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, out: Optional[torch.Tensor] = None,
              block_m: int = 16, block_n: int = 64, block_k: int = 128) -> torch.Tensor:
    """x [..., K] (float16, bfloat16 or float32); qweight [V, K] int8; scales [V] (per row) or [V, K/group]
    (per block, group a power of two ≥ 16 dividing block_k... or any divisor of K). Returns [..., V] float32."""
    check_float("x", x)
    v, k = qweight.shape
    if qweight.dtype != torch.int8 or x.shape[-1] != k or qweight.stride(1) != 1:
        raise ValueError(f"qweight must be int8 [V, K] with contiguous rows and K = x's {x.shape[-1]}; got "
                         f"{qweight.dtype} {tuple(qweight.shape)}")
    per_row = scales.dim() == 1
    if scales.shape[0] != v or (not per_row and (scales.dim() != 2 or k % scales.shape[1])):
        raise ValueError(f"scales must be [V] or [V, K/group]; got {tuple(scales.shape)} for a [{v}, {k}] head")
    group = k if per_row else k // scales.shape[1]
    scales = scales.contiguous()  # (a column of a larger tensor: the kernel steps through it densely)
    flat = x.reshape(-1, k)
    if flat.stride(1) != 1:
        flat = flat.contiguous()
    m = flat.shape[0]
    if out is None:
        out = torch.empty(m, v, dtype=torch.float32, device=x.device)
    if m:
        _int8_head[(triton.cdiv(m, block_m), triton.cdiv(v, block_n))](
            flat, qweight, scales, out, m, v, k, flat.stride(0), qweight.stride(0),
            scales.stride(0), out.stride(0), GROUP=group, PER_ROW=per_row, BLOCK_M=block_m, BLOCK_N=block_n,
            BLOCK_K=block_k, DOT=dot_mode(x.dtype))
    return out.view(*x.shape[:-1], v)
