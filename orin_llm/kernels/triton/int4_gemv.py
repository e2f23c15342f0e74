"""INT4 GEMV / skinny GEMM for decode's few rows (1-16 per tile) over the same repacked Q4_1 blocks as
q4_linear.py (`Q4Packed`: codes [K/2, N] uint8, byte (16·g + j, n) = weights (n, 32g + j) low and
(n, 32g + 16 + j) high; scales and mins [K/32, N]).

Why a second kernel: at decode a linear reads its whole weight for a handful of rows, so it is bound by
how many bytes are in flight, not by arithmetic. q4_linear.py walks the inputs one 32-weight group at a
time (a [16, BLOCK_N] byte tile, 1 KB per load, unrolled); here each step of a program loads a
[BLOCK_R, BLOCK_N] tile of packed rows at once (BLOCK_R/16 groups: 8 KB at 128 x 64), the scales and
mins of those rows by index (row // 16: the same [K/32, N] rows again, from L1, not from memory),
dequantizes it in registers and multiplies it with two dots of BLOCK_R inputs each (the low nibbles'
inputs and the high nibbles'), float32 sums. The inputs are split in ranges of whole steps (split_k),
fixed per layer so that a row's sums never depend on the other rows (batch invariance: the decode
and verify buckets' rows are the same computation); their float32 partial sums are added in split
order by q4_linear's `_sum_splits` (no atomics: deterministic). Rows past 16 take more M tiles, each
reading the weights again (from L2 at decode's batch sizes).

`GemvConfig` holds the tile; `CANDIDATES` are what kernels/cuda_linear.py times at load on the GPU (a
few, so the compile cost stays seconds) before it picks, per layer shape, between this kernel and
torch's int4 kernel.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
import triton
import triton.language as tl

from .common import dot, dot_mode, launch_options, operand
from .q4_linear import GROUP, Q4Packed, _magic, _sum_splits, rows_and_out

ROWS = 16  # rows per M tile: tl.dot's smallest M (masked rows cost no memory traffic)


@dataclass(frozen=True)
class GemvConfig:
    """One tile of the GEMV: outputs per program, packed rows per step (a packed row: one byte per
    output, two of its inputs), warps, pipeline stages, and how many programs per SM the split over
    the inputs aims for."""
    block_n: int = 64
    block_r: int = 128  # packed rows per step: a multiple of 16 (whole groups)
    num_warps: int = 4
    num_stages: int = 3
    waves: int = 4  # programs per SM the input split aims at (at most max_split ranges)
    max_split: int = 16

    def __post_init__(self):
        if self.block_r % 16 or self.block_r < 16 or self.block_n < 16:
            raise ValueError(f"block_r must be a multiple of 16 and block_n at least 16: {self}")

    def split_k(self, out_features: int, in_features: int, sms: int) -> int:
        """Input ranges for a layer: enough programs for `waves` per SM at one M tile, never a range
        shorter than one step. Depends on the layer's shape only (batch invariance)."""
        tiles = -(-out_features // self.block_n)
        steps = -(-(in_features // 2) // self.block_r)
        return max(1, min(self.max_split, steps, -(-self.waves * sms // tiles)))

    def label(self) -> str:
        split = "_nosplit" if self.max_split == 1 else ""
        return f"n{self.block_n}_r{self.block_r}_w{self.num_warps}_s{self.num_stages}{split}"


# What the load-time micro-benchmark tries (cuda_linear.py): wide outputs, deep inputs, between; and
# narrow outputs with no input split, one kernel a call (no partial sums to add: a launch less, fewer
# programs), in case launches cost more than filling every SM gains
CANDIDATES = (GemvConfig(64, 128, 4, 3), GemvConfig(128, 64, 4, 3), GemvConfig(32, 256, 4, 2),
              GemvConfig(16, 256, 2, 3, max_split=1))


@triton.jit
def _q4_gemv(X, W, S, MN, Y, M, N, K, stride_xm, stride_w, stride_s, stride_ym, stride_split, rows_per_split,
             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_R: tl.constexpr, DOT: tl.constexpr,
             MAGIC: tl.constexpr, BIAS: tl.constexpr):
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    pid_m = tl.program_id(2)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mmask = rm < M
    nmask = rn < N
    r = tl.arange(0, BLOCK_R)
    x_rows = X + rm[:, None].to(tl.int64) * stride_xm
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    r_first = pid_k * rows_per_split
    r_end = tl.minimum(K // 2, r_first + rows_per_split)
    for r0 in range(r_first, r_end, BLOCK_R):
        rr = r0 + r  # packed rows: inputs 32·(rr // 16) + rr % 16 (low nibble) and 16 more (high)
        valid = rr < r_end
        wmask = valid[:, None] & nmask[None, :]
        w = tl.load(W + rr[:, None].to(tl.int64) * stride_w + rn[None, :], mask=wmask, other=0)
        g = rr // 16
        s = tl.load(S + g[:, None].to(tl.int64) * stride_s + rn[None, :], mask=wmask, other=0.0)
        mn = tl.load(MN + g[:, None].to(tl.int64) * stride_s + rn[None, :], mask=wmask, other=0.0)
        if MAGIC != 0:
            # scales in x's 16-bit type: a code becomes a float by its bits (q4_linear.py's reason)
            lo = (((w & 0xF).to(tl.int32) | MAGIC).to(tl.int16).to(s.dtype, bitcast=True) - BIAS) * s + mn
            hi = (((w >> 4).to(tl.int32) | MAGIC).to(tl.int16).to(s.dtype, bitcast=True) - BIAS) * s + mn
        else:
            lo = (w & 0xF).to(tl.float32) * s.to(tl.float32) + mn.to(tl.float32)
            hi = (w >> 4).to(tl.float32) * s.to(tl.float32) + mn.to(tl.float32)
        xi = g * 32 + rr % 16
        xmask = mmask[:, None] & valid[None, :]
        x_lo = tl.load(x_rows + xi[None, :], mask=xmask, other=0.0)
        x_hi = tl.load(x_rows + (xi + 16)[None, :], mask=xmask, other=0.0)
        acc += dot(x_lo, operand(lo, x_lo.dtype, DOT), DOT)
        acc += dot(x_hi, operand(hi, x_hi.dtype, DOT), DOT)
    tl.store(Y + pid_k * stride_split + rm[:, None].to(tl.int64) * stride_ym + rn[None, :],
             acc.to(Y.dtype.element_ty), mask=mmask[:, None] & nmask[None, :])


def q4_gemv(x: torch.Tensor, packed: Q4Packed, config: GemvConfig = CANDIDATES[0], split_k: int = 1,
            out: Optional[torch.Tensor] = None, out_dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """y = x @ W.T for a repacked Q4_1 weight, x [..., K] → [..., N] in `out_dtype` (x's by default),
    tiled for decode's few rows (module doc). split_k: the input ranges (GemvConfig.split_k gives a
    layer's); keep it and `config` fixed for a layer so rows stay independent of each other."""
    flat, out = rows_and_out(x, packed, split_k, out, out_dtype)
    k, n = packed.in_features, packed.out_features
    m = flat.shape[0]
    if m:
        half = k // 2
        steps = triton.cdiv(half, config.block_r)
        per_split = triton.cdiv(steps, split_k) * config.block_r  # whole steps per range
        splits = triton.cdiv(half, per_split)
        dest = out if splits == 1 else torch.empty(splits, m, n, dtype=torch.float32, device=x.device)
        _q4_gemv[(triton.cdiv(n, config.block_n), splits, triton.cdiv(m, ROWS))](
            flat, packed.codes, packed.scales, packed.mins, dest, m, n, k, flat.stride(0), packed.codes.stride(0),
            packed.scales.stride(0), dest.stride(-2), dest.stride(0) if splits > 1 else 0, per_split,
            BLOCK_M=ROWS, BLOCK_N=config.block_n, BLOCK_R=config.block_r, DOT=dot_mode(x.dtype),
            **_magic(x.dtype, packed), **launch_options(config.num_warps, config.num_stages))
        if splits > 1:
            _sum_splits[(triton.cdiv(m * n, 1024),)](dest, out, m * n, splits, BLOCK=1024)
    return out.view(*x.shape[:-1], n)


__all__ = ["CANDIDATES", "GROUP", "GemvConfig", "ROWS", "q4_gemv"]
