"""What the Triton kernels share: a dot product that stays exact-ish in float32, and launch checks.

Written for triton 3.6 (the GPU image's) through 3.9 (CI's interpreter): only `tl` APIs both have.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
MIN_DOT = 16  # tl.dot's smallest M, N and K: smaller tiles are padded (masked rows cost no memory traffic)


NATIVE, IEEE, UPCAST = 0, 1, 2  # how `dot` multiplies (dot_mode)


@triton.jit
def dot(a, b, MODE: tl.constexpr):
    """a @ b accumulated in float32. MODE (dot_mode): NATIVE (tensor cores), IEEE (float32 operands:
    full float32 products, not TF32's), UPCAST (operands widened to float32 first, exactly)."""
    if MODE == 1:
        return tl.dot(a, b, input_precision="ieee")
    if MODE == 2:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    return tl.dot(a, b)


@triton.jit
def operand(x, dtype: tl.constexpr, MODE: tl.constexpr):
    """x (int8 codes, or float) as a `dot` operand of `dtype`: float32 under UPCAST (the 3.9
    interpreter also converts int8 to bfloat16 wrongly)."""
    if MODE == 2:
        return x.to(tl.float32)
    return x.to(dtype)


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


def dot_mode(dtype: torch.dtype) -> int:
    """float32: IEEE. bfloat16 in the interpreter: UPCAST (triton 3.9's interpreter multiplies bf16
    operands as raw integers and converts int8 to bf16 wrongly). Else NATIVE."""
    if dtype == torch.float32:
        return IEEE
    return UPCAST if dtype == torch.bfloat16 and interpreting() else NATIVE


def pow2(n: int, least: int = MIN_DOT) -> int:
    return max(least, triton.next_power_of_2(n))


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
