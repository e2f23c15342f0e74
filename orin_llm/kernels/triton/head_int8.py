"""The LM head in INT8, in Triton: logits = x @ (codes · scales).T in float32.

Two scale layouts, one kernel: per row (scales [V], quant.quantize_int8's: a requantized head, as
runtime/head.py's CPU int8 pass) or per block of the input (scales [V, K/group]: a GGUF's Q8_0
matrix as quant.recover_q8_0 gives it, so the logits are of the GGUF's very weights). Codes stay
[V, K] int8 as stored. A block's products are summed exactly (int8 codes times x in float16, float32
sums) and scaled once per block, a row's scale once at the end. With float16 or bfloat16 x on a GPU,
a code becomes a float16 by its bits rather than by an int-to-float conversion, and x is taken in
float16 (the head's input is the final RMSNorm's output, well inside float16's range).
"""

from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl

from .common import NATIVE, check_float, dot, dot_mode, launch_options, operand


@triton.jit
def _int8_head(X, W, S, Y, M, N, K, stride_xm, stride_w, stride_s, stride_ym,
               PER_ROW: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, KSTEP: tl.constexpr,
               SUB: tl.constexpr, DOT: tl.constexpr, FAST: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mmask = rm < M
    nmask = rn < N
    kk = tl.arange(0, KSTEP)
    x_rows = X + rm[:, None].to(tl.int64) * stride_xm
    w_cols = W + rn[None, :].to(tl.int64) * stride_w
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for k0 in range(0, K, KSTEP * SUB):
        for si in tl.static_range(SUB):  # per block: one group per sub-step, its sums scaled as a whole
            ks = k0 + si * KSTEP
            k = ks + kk
            kmask = k < K
            x = tl.load(x_rows + k[None, :], mask=mmask[:, None] & kmask[None, :], other=0.0)
            w = tl.load(w_cols + k[:, None], mask=kmask[:, None] & nmask[None, :], other=0)  # [KSTEP, BLOCK_N]
            if FAST:
                # a code as the float16 whose bits are 0x6400 | (code + 128), 1152 + code exactly: no
                # int-to-float conversion per code (a unit at a fraction of the FMA rate)
                w16 = ((w.to(tl.int32) + 128) | 0x6400).to(tl.int16).to(tl.float16, bitcast=True) - 1152.0
                part = tl.dot(x.to(tl.float16), w16)
            else:
                part = dot(x, operand(w, x.dtype, DOT), DOT)
            if PER_ROW:
                acc += part
            else:
                smask = rn < tl.where(ks < K, N, 0)  # (vector comparisons only: the interpreter's & of a scalar)
                s = tl.load(S + rn.to(tl.int64) * stride_s + ks // KSTEP, mask=smask, other=0.0)
                acc += part * s.to(tl.float32)[None, :]
    if PER_ROW:
        acc = acc * tl.load(S + rn, mask=nmask, other=0.0).to(tl.float32)[None, :]
    tl.store(Y + rm[:, None].to(tl.int64) * stride_ym + rn[None, :], acc, mask=mmask[:, None] & nmask[None, :])


def int8_head(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, out: Optional[torch.Tensor] = None,
              block_m: int = 16, block_n: int = 64, block_k: int = 128, num_warps: Optional[int] = None,
              num_stages: Optional[int] = None) -> torch.Tensor:
    """x [..., K] (float16, bfloat16 or float32); qweight [V, K] int8; scales [V] (per row) or [V, K/group]
    (per block of a power of two ≥ 16 inputs: Q8_0's 32). Returns [..., V] float32. block_k: inputs per
    step (a power of two; per block, whole groups)."""
    check_float("x", x)
    v, k = qweight.shape
    if qweight.dtype != torch.int8 or x.shape[-1] != k or qweight.stride(1) != 1:
        raise ValueError(f"qweight must be int8 [V, K] with contiguous rows and K = x's {x.shape[-1]}; got "
                         f"{qweight.dtype} {tuple(qweight.shape)}")
    per_row = scales.dim() == 1
    if scales.shape[0] != v or (not per_row and (scales.dim() != 2 or k % scales.shape[1])):
        raise ValueError(f"scales must be [V] or [V, K/group]; got {tuple(scales.shape)} for a [{v}, {k}] head")
    group = k if per_row else k // scales.shape[1]
    if not per_row and (group < 16 or group & (group - 1)):
        raise ValueError(f"blocks of {group} inputs: the kernel takes powers of two from 16 (Q8_0: 32)")
    kstep, sub = (block_k, 1) if per_row else (group, max(1, block_k // group))
    fast = x.dtype in (torch.float16, torch.bfloat16) and dot_mode(x.dtype) == NATIVE
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
            scales.stride(0), out.stride(0), PER_ROW=per_row, BLOCK_M=block_m, BLOCK_N=block_n, KSTEP=kstep,
            SUB=sub, DOT=dot_mode(x.dtype), FAST=fast, **launch_options(num_warps, num_stages))
    return out.view(*x.shape[:-1], v)
