"""INT4 weight-only linear from a GGUF's Q4_1 blocks, in Triton: y = x @ W.T, W = scale·code + min
per block of 32 weights along the input (quant.recover_q4_1's blocks, exactly those values).

The repack (once, at load: `q4_repack`) turns quant.recover_q4_1's row-major blocks (codes [N, K/2],
column 2j in byte j's low nibble; scales and mins [N, K/32] float32) into a layout a tile reads
coalesced and unpacks without shuffles:
- codes: uint8 [K/2, N], input-major. Byte (16·g + j, n) holds weight (n, 32·g + j) in its low nibble
  and weight (n, 32·g + 16 + j) in its high one: a tile of whole groups unpacks into two [rows, N]
  operands whose inputs are two contiguous runs of x.
- scales, mins: float16 [K/32, N]. A GGUF stores them as float16, so this keeps their values exactly;
  they add 4 bytes per 32 weights to the codes' 16.
Each program computes a [BLOCK_M, BLOCK_N] tile of y over its range of K (all of it, or one of
`split_k` ranges whose float32 partial sums a second kernel adds in order: never atomics): codes,
scales and mins dequantized in registers to x's dtype, two tensor-core dots per step, float32 sums.
A row's result does not depend on the other rows, as long as the tile sizes and split are the same
(keep them fixed across the decode and verify buckets: batch invariance).
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch
import triton
import triton.language as tl

from .common import check_float, dot, dot_mode, operand

GROUP = 32  # weights per Q4_1 block (quant.GGUF_BLOCK)


class Q4Packed(NamedTuple):
    """A repacked Q4_1 weight (module doc): codes [K/2, N] uint8, scales and mins [K/32, N] float16."""

    codes: torch.Tensor
    scales: torch.Tensor
    mins: torch.Tensor

    @property
    def out_features(self) -> int:
        return self.codes.shape[1]

    @property
    def in_features(self) -> int:
        return self.codes.shape[0] * 2


def q4_repack(qweight: torch.Tensor, scales: torch.Tensor, mins: torch.Tensor) -> Q4Packed:
    """quant.recover_q4_1's (qweight [N, K/2] uint8, scales [N, K/32], mins [N, K/32]) → Q4Packed,
    on their device (plain torch ops: any device)."""
    n, half = qweight.shape
    k = half * 2
    if qweight.dtype != torch.uint8 or k % GROUP or tuple(scales.shape) != (n, k // GROUP) \
            or tuple(mins.shape) != (n, k // GROUP):
        raise ValueError(f"Q4_1 blocks: qweight uint8 [N, K/2], scales and mins [N, K/{GROUP}]; got "
                         f"{qweight.dtype} {tuple(qweight.shape)}, {tuple(scales.shape)}, {tuple(mins.shape)}")
    codes = torch.stack((qweight & 0xF, qweight >> 4), dim=-1).view(n, k // GROUP, GROUP)  # [N, groups, 32]
    packed = codes[:, :, :16] | (codes[:, :, 16:] << 4)  # [N, groups, 16]
    packed = packed.reshape(n, half).T.contiguous()
    return Q4Packed(packed, scales.T.to(torch.float16).contiguous(), mins.T.to(torch.float16).contiguous())


@triton.jit
def _int4_linear(X, W, S, MN, Y, M, N, K, stride_xm, stride_w, stride_s, stride_ym, stride_split,
                 groups_per_split,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_G: tl.constexpr, DOT: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_k = tl.program_id(2)  # this program's share of the input groups (split_k)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mmask = rm < M
    nmask = rn < N
    r = tl.arange(0, BLOCK_G * 16)  # packed rows of BLOCK_G groups
    k_lo = (r // 16) * 32 + r % 16  # the inputs of their low nibbles (high: + 16)
    x_rows = X + rm[:, None].to(tl.int64) * stride_xm
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    g_first = pid_k * groups_per_split
    g_end = tl.minimum(K // 32, g_first + groups_per_split)
    for g0 in range(g_first, g_end, BLOCK_G):
        rows = g0 * 16 + r
        kmask = (g0 + r // 16) < g_end
        wmask = kmask[:, None] & nmask[None, :]
        w = tl.load(W + rows[:, None].to(tl.int64) * stride_w + rn[None, :], mask=wmask, other=0)
        grp = (g0 + r // 16)[:, None].to(tl.int64) * stride_s + rn[None, :]
        s = tl.load(S + grp, mask=wmask, other=0.0).to(tl.float32)
        mn = tl.load(MN + grp, mask=wmask, other=0.0).to(tl.float32)
        lo = (w & 0xF).to(tl.float32) * s + mn
        hi = (w >> 4).to(tl.float32) * s + mn
        xk = g0 * 32 + k_lo
        xmask = mmask[:, None] & kmask[None, :]
        x_lo = tl.load(x_rows + xk[None, :], mask=xmask, other=0.0)
        x_hi = tl.load(x_rows + (xk + 16)[None, :], mask=xmask, other=0.0)
        acc += dot(x_lo, operand(lo, x_lo.dtype, DOT), DOT)
        acc += dot(x_hi, operand(hi, x_hi.dtype, DOT), DOT)
    tl.store(Y + pid_k * stride_split + rm[:, None].to(tl.int64) * stride_ym + rn[None, :], acc.to(Y.dtype.element_ty),
             mask=mmask[:, None] & nmask[None, :])


@triton.jit
def _sum_splits(P, Y, count, splits, BLOCK: tl.constexpr):
    """Y = Σ_s P[s] elementwise, in split order (torch's sum picks its order by shape: not batch invariant)."""
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = i < count
    acc = tl.zeros([BLOCK], tl.float32)
    for s in range(0, splits):
        acc += tl.load(P + s * count + i, mask=mask, other=0.0)
    tl.store(Y + i, acc.to(Y.dtype.element_ty), mask=mask)


def int4_linear(x: torch.Tensor, packed: Q4Packed, out: Optional[torch.Tensor] = None, block_m: int = 16,
                block_n: int = 64, block_g: int = 4, out_dtype: Optional[torch.dtype] = None,
                split_k: int = 1) -> torch.Tensor:
    """y = x @ W.T for a repacked Q4_1 weight: x [..., K] (float16, bfloat16 or float32) → [..., N] in
    `out_dtype` (x's by default). block_m/block_n/block_g: the tile (rows, outputs, groups of 32
    inputs per step); the defaults suit decode's 1-8 rows, a prefill of hundreds takes block_m 64.
    split_k > 1: the inputs in that many ranges, each program writing float32 partial sums that a
    second kernel adds in split order (no atomics: deterministic): more programs for a decode GEMV whose
    outputs alone give too few tiles to fill the GPU."""
    check_float("x", x)
    k, n = packed.in_features, packed.out_features
    if x.shape[-1] != k:
        raise ValueError(f"x has {x.shape[-1]} inputs, the weight {k}")
    if split_k < 1:
        raise ValueError(f"split_k must be at least 1, not {split_k}")
    flat = x.reshape(-1, k)
    if flat.stride(1) != 1:
        flat = flat.contiguous()
    m = flat.shape[0]
    dtype = out_dtype or x.dtype
    if out is None:
        out = torch.empty(m, n, dtype=dtype, device=x.device)
    elif out.shape != (m, n) or not out.is_contiguous():
        raise ValueError(f"out must be a contiguous [{m}, {n}] tensor, not {tuple(out.shape)}")
    if m:
        groups = k // GROUP
        per_split = triton.cdiv(triton.cdiv(groups, split_k), block_g) * block_g  # whole steps per split
        splits = triton.cdiv(groups, per_split)
        dest = out if splits == 1 else torch.empty(splits, m, n, dtype=torch.float32, device=x.device)
        _int4_linear[(triton.cdiv(m, block_m), triton.cdiv(n, block_n), splits)](
            flat, packed.codes, packed.scales, packed.mins, dest, m, n, k, flat.stride(0), packed.codes.stride(0),
            packed.scales.stride(0), dest.stride(-2), dest.stride(0) if splits > 1 else 0, per_split,
            BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_G=block_g, DOT=dot_mode(x.dtype))
        if splits > 1:
            _sum_splits[(triton.cdiv(m * n, 1024),)](dest, out, m * n, splits, BLOCK=1024)
    return out.view(*x.shape[:-1], n)
