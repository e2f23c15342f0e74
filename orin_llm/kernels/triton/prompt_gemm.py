"""Prompt chunks over the decode family's layout (decode_gemv.DecodePacked): y = x @ W.T (+ a residual) for
more rows than the family's 72, on tensor cores, from the same bytes (no second copy of the weights).

Why: the family computes a row at a time on CUDA cores, right for decode's few rows and far too slow for a
prompt chunk of hundreds. Decode rows and prompt chunks may run different kernels (docs/ARCHITECTURE.md:
each row-independent within its own family): a prompt's rows here are each the same arithmetic whatever
the chunk, as the tiled int4 kernel's are.

Each program computes a [BLOCK_M, BLOCK_N] tile over every input, one Q4_1 group a step: the group's 16
bytes per output unpacked to codes as 16-bit floats by their bits (the float whose bits are MAGIC | c is
BIAS + c exactly: no int-to-float instruction), one tensor-core dot of x's 32 inputs with the codes, and
the group's scale and min applied once to the dot's float32 sums (Σ x·(s·c + m) = s·Σ x·c + m·Σ x).
"""

from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl

from .common import UPCAST, dot, dot_mode, launch_options
from .decode_gemv import DecodePacked, check_rows

# a 16-bit float whose bits are MAGIC | code (code < 16) is BIAS + code, exactly (q4_linear.py's too)
_MAGIC = {torch.float16: (0x6400, 1024.0), torch.bfloat16: (0x4300, 128.0)}


@triton.jit
def _prompt_gemm(X, W, SM, R, Y, M, N, K, stride_xm, stride_w, stride_sm, stride_rm, stride_ym,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DOT: tl.constexpr, MAGIC: tl.constexpr,
                 BIAS: tl.constexpr, HAS_RES: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mmask = rm < M
    nmask = rn < N
    q = tl.arange(0, 4)
    shifts = 4 * tl.arange(0, 8)
    kk = tl.arange(0, 32)
    x_rows = X + rm[:, None].to(tl.int64) * stride_xm
    w_rows = W + rn[:, None].to(tl.int64) * stride_w
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for g in range(0, K // 32):
        w = tl.load(w_rows + 4 * g + q[None, :], mask=nmask[:, None], other=0)  # [BLOCK_N, 4]: 16 bytes an output
        c = tl.reshape((w[:, :, None] >> shifts[None, None, :]) & 0xF, [BLOCK_N, 32])  # input 8·word + j
        if MAGIC != 0:
            x = tl.load(x_rows + 32 * g + kk[None, :], mask=mmask[:, None], other=0.0)
            cf = (c | MAGIC).to(tl.int16).to(x.dtype, bitcast=True) - BIAS  # exact small integers
        else:  # (float32 x, or bfloat16 in the interpreter: codes by their bits as float32, 2^23 | c)
            x = tl.load(x_rows + 32 * g + kk[None, :], mask=mmask[:, None], other=0.0).to(tl.float32)
            cf = (c | 0x4B000000).to(tl.float32, bitcast=True) - 8388608.0
        part = dot(x, tl.trans(cf), DOT)  # [BLOCK_M, BLOCK_N]: Σ x·code over the group, float32
        xs = tl.sum(x.to(tl.float32), axis=1)
        sm = tl.load(SM + rn.to(tl.int64) * stride_sm + g, mask=nmask, other=0)  # the group's scale and min
        s = (sm & 0xFFFF).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
        mn = (sm >> 16).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
        acc += part * s[None, :] + xs[:, None] * mn[None, :]
    y = acc.to(Y.dtype.element_ty)
    omask = mmask[:, None] & nmask[None, :]
    if HAS_RES:
        r = tl.load(R + rm[:, None].to(tl.int64) * stride_rm + rn[None, :], mask=omask, other=0.0)
        y = (y.to(tl.float32) + r.to(tl.float32)).to(Y.dtype.element_ty)
    tl.store(Y + rm[:, None].to(tl.int64) * stride_ym + rn[None, :], y, mask=omask)


def prompt_gemm(x: torch.Tensor, packed: DecodePacked, residual: Optional[torch.Tensor] = None,
                out: Optional[torch.Tensor] = None, out_dtype: Optional[torch.dtype] = None, block_m: int = 64,
                block_n: int = 64, num_warps: Optional[int] = 4, num_stages: Optional[int] = 3) -> torch.Tensor:
    """y = x @ W.T (+ residual) over the family's layout, tiled for prompt chunks (module doc): x [..., K]
    (float16, bfloat16 or float32) → [..., N] in `out_dtype` (x's by default)."""
    flat, res, out = check_rows(x, packed, residual, out, out_dtype)
    m, n, k = flat.shape[0], packed.out_features, packed.in_features
    if m:
        mode = dot_mode(x.dtype)
        magic, bias = _MAGIC.get(x.dtype, (0, 0.0)) if mode != UPCAST else (0, 0.0)
        _prompt_gemm[(triton.cdiv(m, block_m), triton.cdiv(n, block_n))](
            flat, packed.codes, packed.scale_min, res if res is not None else out, out, m, n, k, flat.stride(0),
            packed.codes.stride(0), packed.scale_min.stride(0), res.stride(0) if res is not None else 0, out.stride(0),
            BLOCK_M=block_m, BLOCK_N=block_n, DOT=mode, MAGIC=magic, BIAS=bias, HAS_RES=res is not None,
            **launch_options(num_warps, num_stages))
    return out.view(*x.shape[:-1], n)
