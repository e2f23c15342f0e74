"""INT4 weight-only linear from a GGUF's Q4_1 blocks, in Triton: y = x @ W.T, W = scale·code + min
per block of 32 weights along the input (quant.recover_q4_1's blocks, exactly those values).

The repack (once, at load: `q4_repack`) turns quant.recover_q4_1's row-major blocks (codes [N, K/2],
column 2j in byte j's low nibble; scales and mins [N, K/32] float32) into a layout a tile reads
coalesced and unpacks without shuffles:
- codes: uint8 [K/2, N], input-major. Byte (16·g + j, n) holds weight (n, 32·g + j) in its low nibble
  and weight (n, 32·g + 16 + j) in its high one: a tile of whole groups unpacks into two [rows, N]
  operands whose inputs are two contiguous runs of x.
- scales, mins: [K/32, N], float16 by default: a GGUF stores them as float16, so this keeps their
  values exactly; they add 4 bytes per 32 weights to the codes' 16. Where they are in x's dtype
  (float16, or bfloat16 when repacked so) a code is dequantized by its bits (MAGIC | code is the 16-bit
  float BIAS + code) and one multiply-add in that type: no int-to-float conversions, whose unit would
  bound a decode GEMV below the memory bandwidth; else in float32.
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

from .common import UPCAST, check_float, dot, dot_mode, launch_options, operand

GROUP = 32  # weights per Q4_1 block (quant.GGUF_BLOCK)


class Q4Packed(NamedTuple):
    """A repacked Q4_1 weight (module doc): codes [K/2, N] uint8, scales and mins [K/32, N] (float16 by default)."""

    codes: torch.Tensor
    scales: torch.Tensor
    mins: torch.Tensor

    @property
    def out_features(self) -> int:
        return self.codes.shape[1]

    @property
    def in_features(self) -> int:
        return self.codes.shape[0] * 2


def q4_repack(qweight: torch.Tensor, scales: torch.Tensor, mins: torch.Tensor,
              dtype: torch.dtype = torch.float16) -> Q4Packed:
    """quant.recover_q4_1's (qweight [N, K/2] uint8, scales [N, K/32], mins [N, K/32]) → Q4Packed,
    on their device (plain torch ops: any device). dtype: the scales' and mins' (float16 keeps a GGUF's
    exactly; the activations' dtype makes the fast dequantization run: bfloat16 rounds them)."""
    n, half = qweight.shape
    k = half * 2
    if qweight.dtype != torch.uint8 or k % GROUP or tuple(scales.shape) != (n, k // GROUP) \
            or tuple(mins.shape) != (n, k // GROUP):
        raise ValueError(f"Q4_1 blocks: qweight uint8 [N, K/2], scales and mins [N, K/{GROUP}]; got "
                         f"{qweight.dtype} {tuple(qweight.shape)}, {tuple(scales.shape)}, {tuple(mins.shape)}")
    codes = torch.stack((qweight & 0xF, qweight >> 4), dim=-1).view(n, k // GROUP, GROUP)  # [N, groups, 32]
    packed = codes[:, :, :16] | (codes[:, :, 16:] << 4)  # [N, groups, 16]
    packed = packed.reshape(n, half).T.contiguous()
    if dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise ValueError(f"scales dtype {dtype}: float16, bfloat16 or float32")
    return Q4Packed(packed, scales.T.to(dtype).contiguous(), mins.T.to(dtype).contiguous())


def quantize_q4_1(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A float weight [N, K] → Q4_1 blocks as quant.recover_q4_1 gives them (codes [N, K/2] uint8, column
    2j in byte j's low nibble; scales and mins [N, K/32] float32, each exact in float16 as a GGUF's):
    llama.cpp's rounding, the block's min at code 0 and its max at 15. For a matrix that is not Q4_1
    already (an LM head run through int4_linear: a second quantization, unlike recover_q4_1)."""
    n, k = w.shape
    if k % GROUP:
        raise ValueError(f"{k} input columns are not whole Q4_1 blocks of {GROUP}")
    g = w.float().view(n, k // GROUP, GROUP)
    mins = g.amin(dim=2).half().float()
    scales = ((g.amax(dim=2) - mins) / 15).half().float()
    step = torch.where(scales > 0, scales, torch.ones_like(scales))[..., None]
    q = torch.round((g - mins[..., None]) / step).clamp(0, 15).to(torch.uint8).view(n, k)
    return (q[:, 0::2] | (q[:, 1::2] << 4)).contiguous(), scales.contiguous(), mins.contiguous()


@triton.jit
def _int4_linear(X, W, S, MN, Y, M, N, K, stride_xm, stride_w, stride_s, stride_ym, stride_split,
                 groups_per_split,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_G: tl.constexpr, DOT: tl.constexpr,
                 MAGIC: tl.constexpr, BIAS: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_k = tl.program_id(2)  # this program's share of the input groups (split_k)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mmask = rm < M
    nmask = rn < N
    j = tl.arange(0, 16)  # a group's packed rows: inputs j (low nibbles) and 16 + j (high)
    x_rows = X + rm[:, None].to(tl.int64) * stride_xm
    w_cols = W + rn[None, :]
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    g_first = pid_k * groups_per_split
    g_end = tl.minimum(K // 32, g_first + groups_per_split)
    for g0 in range(g_first, g_end, BLOCK_G):
        # group by group (unrolled): a group's scales and mins are one row each, broadcast over its 16
        # packed rows in registers rather than gathered per code
        for gi in tl.static_range(BLOCK_G):
            g = g0 + gi
            # (masks from vector comparisons only: the 3.9 interpreter turns a vector & a scalar into ints)
            valid = g * 16 + j < g_end * 16  # this group's packed rows, if it is one of this program's
            wmask = valid[:, None] & nmask[None, :]
            w = tl.load(w_cols + (g * 16 + j)[:, None].to(tl.int64) * stride_w, mask=wmask, other=0)
            smask = rn < tl.where(g < g_end, N, 0)
            s = tl.load(S + g.to(tl.int64) * stride_s + rn, mask=smask, other=0.0)[None, :]
            mn = tl.load(MN + g.to(tl.int64) * stride_s + rn, mask=smask, other=0.0)[None, :]
            if MAGIC != 0:
                # scales in x's 16-bit type: a code becomes a float by its bits (MAGIC | code is BIAS +
                # code exactly), not by an int-to-float conversion, whose unit runs at a fraction of the
                # FMA rate and would bound a decode GEMV below the memory bandwidth
                lo = (((w & 0xF).to(tl.int32) | MAGIC).to(tl.int16).to(s.dtype, bitcast=True) - BIAS) * s + mn
                hi = (((w >> 4).to(tl.int32) | MAGIC).to(tl.int16).to(s.dtype, bitcast=True) - BIAS) * s + mn
            else:
                lo = (w & 0xF).to(tl.float32) * s.to(tl.float32) + mn.to(tl.float32)
                hi = (w >> 4).to(tl.float32) * s.to(tl.float32) + mn.to(tl.float32)
            xmask = mmask[:, None] & valid[None, :]
            x_lo = tl.load(x_rows + (g * 32 + j)[None, :], mask=xmask, other=0.0)
            x_hi = tl.load(x_rows + (g * 32 + 16 + j)[None, :], mask=xmask, other=0.0)
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


# A 16-bit float whose bits are MAGIC | code (code < 16) is BIAS + code, exactly
_MAGIC = {torch.float16: (0x6400, 1024.0), torch.bfloat16: (0x4300, 128.0)}


def _magic(dtype: torch.dtype, packed: Q4Packed) -> dict:
    """The dequantization: by bits in x's 16-bit type where the scales are in it too, else in float32."""
    fits = packed.scales.dtype == dtype and dot_mode(dtype) != UPCAST  # (the interpreter's bf16 bitcasts fail)
    magic, bias = _MAGIC.get(dtype, (0, 0.0)) if fits else (0, 0.0)
    return {"MAGIC": magic, "BIAS": bias}


def rows_and_out(x: torch.Tensor, packed: Q4Packed, split_k: int, out: Optional[torch.Tensor],
                 out_dtype: Optional[torch.dtype]) -> tuple[torch.Tensor, torch.Tensor]:
    """x checked and flattened to [m, K] rows with unit stride, and the [m, N] output (the one given, checked,
    or a new one in `out_dtype`, x's by default): what both int4 kernels' wrappers need first."""
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
    if out is None:
        out = torch.empty(m, n, dtype=out_dtype or x.dtype, device=x.device)
    elif out.shape != (m, n) or not out.is_contiguous():
        raise ValueError(f"out must be a contiguous [{m}, {n}] tensor, not {tuple(out.shape)}")
    return flat, out

def int4_linear(x: torch.Tensor, packed: Q4Packed, out: Optional[torch.Tensor] = None, block_m: int = 16,
                block_n: int = 64, block_g: int = 4, out_dtype: Optional[torch.dtype] = None,
                split_k: int = 1, num_warps: Optional[int] = None, num_stages: Optional[int] = None) -> torch.Tensor:
    """y = x @ W.T for a repacked Q4_1 weight: x [..., K] (float16, bfloat16 or float32) → [..., N] in
    `out_dtype` (x's by default). block_m/block_n/block_g: the tile (rows, outputs, groups of 32
    inputs per step); the defaults suit decode's 1-8 rows, a prefill of hundreds takes block_m 64.
    split_k > 1: the inputs in that many ranges, each program writing float32 partial sums that a
    second kernel adds in split order (no atomics: deterministic): more programs for a decode GEMV whose
    outputs alone give too few tiles to fill the GPU."""
    flat, out = rows_and_out(x, packed, split_k, out, out_dtype)
    k, n = packed.in_features, packed.out_features
    m = flat.shape[0]
    if m:
        groups = k // GROUP
        per_split = triton.cdiv(triton.cdiv(groups, split_k), block_g) * block_g  # whole steps per split
        splits = triton.cdiv(groups, per_split)
        dest = out if splits == 1 else torch.empty(splits, m, n, dtype=torch.float32, device=x.device)
        _int4_linear[(triton.cdiv(m, block_m), triton.cdiv(n, block_n), splits)](
            flat, packed.codes, packed.scales, packed.mins, dest, m, n, k, flat.stride(0), packed.codes.stride(0),
            packed.scales.stride(0), dest.stride(-2), dest.stride(0) if splits > 1 else 0, per_split,
            BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_G=block_g, DOT=dot_mode(x.dtype), **_magic(x.dtype, packed),
            **launch_options(num_warps, num_stages))
        if splits > 1:
            _sum_splits[(triton.cdiv(m * n, 1024),)](dest, out, m * n, splits, BLOCK=1024)
    return out.view(*x.shape[:-1], n)
