"""What the Triton kernels share: a dot product that stays exact-ish in float32, and launch checks.

Written for triton 3.6 (the GPU image's) through 3.9 (CI's interpreter): only `tl` APIs both have.
"""

from __future__ import annotations

import os
from typing import Optional

import torch
import triton
import triton.language as tl

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
MIN_DOT = 16  # tl.dot's smallest M, N and K: smaller tiles are padded (masked rows cost no memory traffic)


NATIVE, IEEE, UPCAST, F16_CODES = 0, 1, 2, 3  # how `dot` multiplies (dot_mode, codes_mode)


@triton.jit
def dot(a, b, MODE: tl.constexpr):
    """a @ b accumulated in float32. MODE: NATIVE (tensor cores), IEEE (float32 operands: full float32
    products, not TF32's), UPCAST (operands widened to float32 first, exactly), F16_CODES (float16
    operands, made by `operand`)."""
    # (one return: the compiler types every return of a function, static branches or not)
    if MODE == 1:
        c = tl.dot(a, b, input_precision="ieee")
    elif MODE == 2:
        c = tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    else:
        c = tl.dot(a, b)
    return c


@triton.jit
def operand(x, dtype: tl.constexpr, MODE: tl.constexpr):
    """x (int8 codes, or float) as a `dot` operand of `dtype`: float32 under UPCAST (the 3.9
    interpreter also converts int8 to bfloat16 wrongly); float16 under F16_CODES, an int8 code as the
    float16 whose bits are 0x6400 | (code + 128), i.e. 1152 + code exactly, minus 1152: no
    int-to-float instruction per code (a unit that runs at a fraction of the FMA rate)."""
    if MODE == 2:
        y = x.to(tl.float32)
    elif MODE == 3:
        if x.dtype == tl.int8:
            y = ((x.to(tl.int32) + 128) | 0x6400).to(tl.int16).to(tl.float16, bitcast=True) - 1152.0
        else:
            y = x.to(tl.float16)
    else:
        y = x.to(dtype)
    return y


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


def codes_mode(dtype: torch.dtype) -> int:
    """For an INT8 cache read by q of `dtype`: F16_CODES where the dots run natively on 16-bit floats
    (q and the probabilities taken in float16: post-RoPE queries and weights in [0, 1] are in its
    range, and it has more significant bits than bfloat16), else dot_mode."""
    mode = dot_mode(dtype)
    return F16_CODES if mode == NATIVE and dtype in (torch.float16, torch.bfloat16) else mode


def dot_mode(dtype: torch.dtype) -> int:
    """float32: IEEE. bfloat16 in the interpreter: UPCAST (triton 3.9's interpreter multiplies bf16
    operands as raw integers and converts int8 to bf16 wrongly). Else NATIVE."""
    if dtype == torch.float32:
        return IEEE
    return UPCAST if dtype == torch.bfloat16 and interpreting() else NATIVE


def pow2(n: int, least: int = MIN_DOT) -> int:
    return max(least, triton.next_power_of_2(n))


def launch_options(num_warps: Optional[int], num_stages: Optional[int]) -> dict:
    """Triton's launch options where the caller tunes them (None: Triton's defaults)."""
    opts = {"num_warps": num_warps, "num_stages": num_stages}
    return {k: v for k, v in opts.items() if v is not None}


def dense_rows(table: torch.Tensor) -> torch.Tensor:
    """A [rows, n] table whose rows may be strided (an expanded row: stride 0) but whose entries are adjacent."""
    return table if table.stride(-1) == 1 else table.contiguous()


def check_float(name: str, t: torch.Tensor) -> None:
    if t.dtype not in FLOAT_DTYPES:
        raise ValueError(f"{name} is {t.dtype}; the kernels take float16, bfloat16 or float32")


def check_same_device(**tensors) -> None:
    devices = {n: t.device for n, t in tensors.items() if t is not None}
    if len(set(devices.values())) > 1:
        raise ValueError(f"tensors on different devices: {devices}")
