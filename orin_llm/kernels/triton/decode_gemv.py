"""The decode GEMV family (issue 47, S2): y = x @ W.T (+ a residual) for decode's 1 to 72 rows over a
Q4_1 weight prepacked once at load, one kernel per call.

Why a new kernel: a decode step reads each weight once for a handful of rows, so a linear is bound by the
bytes it keeps in flight. int4_gemv.py loads the scales and mins again for every packed row and splits
K into ranges whose partial sums a second kernel adds. Here, as in the GEMVs of Marlin, TensorRT-LLM, AWQ
and llama.cpp's mmvq:
- whole K per program: a program owns BLOCK_N outputs and walks every input (no partial sums, no second
  kernel); its threads split K, and one reduction at the end sums their lanes;
- 16-byte loads: the codes are prepacked at load (`decode_pack`) as int32 words, row-major per output:
  word i of output n holds weights (n, 8i .. 8i+7), weight 8i+j in bits 4j..4j+3, so one Q4_1 group of
  32 weights is 16 contiguous bytes (a thread's one vector load) and a warp reads a row's 512 bytes;
- scale and min once per group: the GGUF's fp16 scale and min of a group share one 32-bit word, and
  Σ_k x_k·(s·c_k + m) = s·Σ_k x_k·c_k + m·Σ_k x_k: the codes are multiplied as they are (a code becomes
  a float32 by its bits, 2^23 | c minus 2^23: no int-to-float instruction), and each group's sums are
  scaled once;
- the epilogue adds a residual (`residual`): rounded to the output's type first, then added and rounded
  again, as torch's `x + linear(h)` in that type rounds.

A family: one kernel whose rows are computed BLOCK_M at a time, each the same arithmetic in the same
order whatever the call's row count (M is not specialized on: one compiled kernel for 1 to 72 rows), so a
row's bits do not depend on how many rows share the call (the decode and verify buckets' rows: batch
invariance). `DecodeConfig` is a layer's tile, fixed per layer; `FAMILY_CANDIDATES` are what
kernels/cuda_linear.py times at load. Prompt chunks run the same kernel (correct, not fast: tensor-core
prompt GEMMs over this layout are issue 47's next step).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import NamedTuple, Optional

import torch
import triton
import triton.language as tl

from .common import check_float, launch_options

GROUP = 32  # weights per Q4_1 block
MAX_ROWS = 72  # the family's rows: batch 8 of a 9-row verify step


class DecodePacked(NamedTuple):
    """A Q4_1 weight in the family's layout (module doc): codes [N, K/8] int32, scale_min [N, K/32] int32
    (low half the fp16 scale, high half the fp16 min)."""

    codes: torch.Tensor
    scale_min: torch.Tensor

    @property
    def out_features(self) -> int:
        return self.codes.shape[0]

    @property
    def in_features(self) -> int:
        return self.codes.shape[1] * 8


def decode_pack(qweight: torch.Tensor, scales: torch.Tensor, mins: torch.Tensor) -> DecodePacked:
    """quant.recover_q4_1's blocks (qweight [N, K/2] uint8, byte j: column 2j low, 2j + 1 high; scales and
    mins [N, K/32], fp16-exact as a GGUF's) → DecodePacked, on their device, once at load."""
    n, half = qweight.shape
    k = 2 * half
    if qweight.dtype != torch.uint8 or k % GROUP or tuple(scales.shape) != (n, k // GROUP) \
            or tuple(mins.shape) != (n, k // GROUP):
        raise ValueError(f"Q4_1 blocks: qweight uint8 [N, K/2], scales and mins [N, K/{GROUP}]; got "
                         f"{qweight.dtype} {tuple(qweight.shape)}, {tuple(scales.shape)}, {tuple(mins.shape)}")
    # byte j holds columns 2j (low) and 2j + 1 (high): four bytes read as a little-endian int32 put column
    # 8i + j in bits 4j..4j+3, the kernel's order
    if sys.byteorder != "little":
        raise RuntimeError("decode_pack reads bytes as little-endian words")
    codes = qweight.contiguous().view(torch.int32)
    s16 = scales.to(torch.float16).contiguous().view(torch.int16).to(torch.int32) & 0xFFFF
    m16 = mins.to(torch.float16).contiguous().view(torch.int16).to(torch.int32)
    return DecodePacked(codes, (s16 | (m16 << 16)).contiguous())


@dataclass(frozen=True)
class DecodeConfig:
    """A layer's tile: outputs per program, inputs per step (whole groups of 32), warps. A thread's share
    of a step is block_n · block_k / (8 · 32 · num_warps) words: 4 is one group, one 16-byte load."""
    block_n: int = 4
    block_k: int = 1024
    num_warps: int = 4

    def __post_init__(self):
        for name in ("block_n", "block_k"):
            v = getattr(self, name)
            if v < 1 or v & (v - 1):
                raise ValueError(f"{name} must be a power of two: {self}")
        if self.block_k < GROUP:
            raise ValueError(f"block_k must hold whole groups of {GROUP}: {self}")

    def label(self) -> str:
        return f"n{self.block_n}_k{self.block_k}_w{self.num_warps}"


# What the load-time choice times (cuda_linear.py): narrow and wide outputs per program, short and long steps
FAMILY_CANDIDATES = (DecodeConfig(8, 512, 4), DecodeConfig(4, 512, 2), DecodeConfig(16, 256, 4),
                     DecodeConfig(2, 1024, 2))


@triton.jit(do_not_specialize=["M"])
def _decode_gemv(X, W, SM, R, Y, M, N, K, stride_xm, stride_w, stride_sm, stride_rm, stride_ym,
                 BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, HAS_RES: tl.constexpr):
    G: tl.constexpr = BLOCK_K // 32  # groups a step
    pid = tl.program_id(0)
    rn = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    nmask = rn < N
    g = tl.arange(0, G)
    q = tl.arange(0, 4)  # a group's 4 words: inputs 8q .. 8q + 7 of the group
    # [BLOCK_N, G, 4] words: a group's 16 bytes innermost, one thread's vector load
    w_ptrs = W + rn[:, None, None].to(tl.int64) * stride_w + (4 * g)[None, :, None] + q[None, None, :]
    sm_ptrs = SM + rn[:, None].to(tl.int64) * stride_sm + g[None, :]
    x_cols = (32 * g)[:, None] + (8 * q)[None, :]  # [G, 4]: each word's first input, in the step
    for m in range(0, M):  # a row at a time: its arithmetic the same whatever M (module doc)
        x_row = X + tl.cast(m, tl.int64) * stride_xm
        acc = tl.zeros([BLOCK_N, G], tl.float32)
        for k0 in range(0, K, BLOCK_K):
            gmask = (k0 // 32 + g) < K // 32  # whole groups of this step that exist
            w = tl.load(w_ptrs + k0 // 8, mask=nmask[:, None, None] & gmask[None, :, None], other=0)
            sm = tl.load(sm_ptrs + k0 // 32, mask=nmask[:, None] & gmask[None, :], other=0)  # once per group
            dots = tl.zeros([BLOCK_N, G, 4], tl.float32)
            xsum = tl.zeros([G, 4], tl.float32)
            for j in tl.static_range(8):  # nibble j of every word: inputs 8q + j
                # a code as a float32 by its bits: 2^23 | c is 2^23 + c exactly (no int-to-float instruction)
                c = (((w >> (4 * j)) & 0xF) | 0x4B000000).to(tl.float32, bitcast=True) - 8388608.0
                xj = tl.load(x_row + k0 + j + x_cols, mask=gmask[:, None], other=0.0).to(tl.float32)
                dots += xj[None, :, :] * c
                xsum += xj
            # Σ x·(s·code + min) = s·Σ x·code + min·Σ x, per group: its scale and min applied once
            s = (sm & 0xFFFF).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
            mn = (sm >> 16).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
            acc += tl.sum(dots, axis=2) * s + tl.sum(xsum, axis=1)[None, :] * mn
        y = tl.sum(acc, axis=1).to(Y.dtype.element_ty)  # [BLOCK_N]: the threads' groups summed
        if HAS_RES:
            r = tl.load(R + tl.cast(m, tl.int64) * stride_rm + rn, mask=nmask, other=0.0)
            y = (y.to(tl.float32) + r.to(tl.float32)).to(Y.dtype.element_ty)
        tl.store(Y + tl.cast(m, tl.int64) * stride_ym + rn, y, mask=nmask)


def check_rows(x: torch.Tensor, packed: DecodePacked, residual: Optional[torch.Tensor], out: Optional[torch.Tensor],
               out_dtype: Optional[torch.dtype]) -> tuple[torch.Tensor, Optional[torch.Tensor], torch.Tensor]:
    """x checked and flattened to [m, K] rows with unit stride, the residual to [m, N], and the [m, N]
    output (the one given, checked, or a new one in `out_dtype`, x's by default): what the wrappers over
    this layout need first (decode_gemv, prompt_gemm.py)."""
    check_float("x", x)
    k, n = packed.in_features, packed.out_features
    if x.shape[-1] != k:
        raise ValueError(f"x has {x.shape[-1]} inputs, the weight {k}")
    flat = x.reshape(-1, k)
    if flat.stride(1) != 1:
        flat = flat.contiguous()
    m = flat.shape[0]
    if out is None:
        out = torch.empty(m, n, dtype=out_dtype or x.dtype, device=x.device)
    elif out.shape != (m, n) or not out.is_contiguous():
        raise ValueError(f"out must be a contiguous [{m}, {n}] tensor, not {tuple(out.shape)}")
    res = None
    if residual is not None:
        if residual.shape[-1] != n or residual.numel() != m * n:
            raise ValueError(f"residual must be [..., {n}] with {m} rows, not {tuple(residual.shape)}")
        res = residual.reshape(m, n)
        if res.stride(1) != 1:
            res = res.contiguous()
    return flat, res, out


def decode_gemv(x: torch.Tensor, packed: DecodePacked, config: DecodeConfig = FAMILY_CANDIDATES[0],
                residual: Optional[torch.Tensor] = None, out: Optional[torch.Tensor] = None,
                out_dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """y = x @ W.T (+ residual) for x [..., K] (float16, bfloat16 or float32) → [..., N] in `out_dtype` (x's
    by default); `residual` [..., N] added in the epilogue (module doc). Keep `config` fixed per layer."""
    flat, res, out = check_rows(x, packed, residual, out, out_dtype)
    m, n, k = flat.shape[0], packed.out_features, packed.in_features
    if m:
        _decode_gemv[(triton.cdiv(n, config.block_n),)](
            flat, packed.codes, packed.scale_min, res if res is not None else out, out, m, n, k, flat.stride(0),
            packed.codes.stride(0), packed.scale_min.stride(0), res.stride(0) if res is not None else 0, out.stride(0),
            BLOCK_N=config.block_n, BLOCK_K=config.block_k, HAS_RES=res is not None,
            **launch_options(config.num_warps, None))
    return out.view(*x.shape[:-1], n)


__all__ = ["DecodeConfig", "DecodePacked", "FAMILY_CANDIDATES", "GROUP", "MAX_ROWS", "check_rows", "decode_gemv",
           "decode_pack"]
