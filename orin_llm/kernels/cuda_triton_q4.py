"""The Q4_1 layers on our Triton kernels (kernels/triton), each built from a QuantLinear's blocks repacked
once at load and checked there against the dequantized layer: the tiled kernel (`TritonQ4Linear`), the
GEMV for decode's few rows (`TritonQ4Gemv`), and the decode GEMV family with its prompt GEMM over the
same bytes (`TritonQ4Family`, which family runs a call: `decode_rows`). Which one a layer runs:
cuda_linear.choose_int4.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from .quant import QuantLinear

# the packed product against the dequantized layer, relative to the product's scale: bf16 activations
# and outputs (2^-8 each) and the bf16 scales and zeros; a wrong code layout is off by ~1
TOLERANCE = 0.05


def check_product(got: torch.Tensor, want: torch.Tensor, what: str) -> Optional[str]:
    """None where `got` is `want` within TOLERANCE of its scale; else what disagrees, by how much."""
    err = (got.float() - want.float()).abs().max().item() / max(want.float().abs().max().item(), 1e-6)
    return None if err <= TOLERANCE else f"{what} disagrees with its torch reference (relative error {err:.3g})"


def _split_k(out_features: int, device: torch.device) -> int:
    """Input ranges for the Triton int4 GEMV: enough programs to fill the GPU at decode's few rows. Fixed
    per layer (by its outputs alone), so a row's sums never depend on how many rows share the call."""
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    tiles = -(-out_features // 64)
    return max(1, min(8, -(-2 * sms // tiles)))


def _triton_q4_refusal(q: QuantLinear) -> Optional[str]:
    """Why a layer cannot run on the Triton Q4_1 kernels here (None: it can)."""
    from . import triton as kernels

    dev = q.qweight.device
    if dev.type != "cuda":
        return f"not a CUDA device ({dev.type})"
    why = kernels.available()
    if why:
        return why
    if q.bits != 4 or q.group != 32:
        return f"{q.bits}-bit layer in groups of {q.group} (the kernel takes Q4_1's 32)"
    return None


class _TritonQ4(nn.Module):
    """What both Triton Q4_1 layers hold: the repacked codes, scales and mins as buffers, the input split."""

    def __init__(self, packed, in_features: int, out_features: int, split_k: int, dtype: torch.dtype):
        super().__init__()
        self.register_buffer("codes", packed.codes)
        self.register_buffer("scales", packed.scales)
        self.register_buffer("mins", packed.mins)
        self.split_k, self.dtype = split_k, dtype
        self.in_features, self.out_features = in_features, out_features

    @property
    def packed(self):
        from .triton.q4_linear import Q4Packed

        return Q4Packed(self.codes, self.scales, self.mins)

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.codes, self.scales, self.mins))


class TritonQ4Linear(_TritonQ4):
    """A Q4_1 QuantLinear on the Triton int4 kernel (kernels/triton/q4_linear.py): the GGUF's codes,
    fp16 scales and mins, repacked once at load; float32 sums, output in the activations' dtype."""

    def __init__(self, packed, in_features: int, out_features: int, split_k: int, dtype: torch.dtype):
        super().__init__(packed, in_features, out_features, split_k, dtype)

    @classmethod
    def build(cls, q: QuantLinear, dtype: torch.dtype) -> tuple[Optional[TritonQ4Linear], Optional[str]]:
        from . import triton as kernels

        dev = q.qweight.device
        why = _triton_q4_refusal(q)
        if why:
            return None, why
        mins = q.mins if q.mins is not None else -8 * q.scales
        try:
            packed = kernels.q4_repack(q.qweight, q.scales.float(), mins.float())
            layer = cls(packed, q.in_features, q.out_features, _split_k(q.out_features, dev), dtype)
            x = torch.randn(4, q.in_features, device=dev, dtype=dtype,
                            generator=torch.Generator(device=dev).manual_seed(0))
            why = check_product(layer(x), F.linear(x.float(), q.dequantize().float()), "the Triton int4 linear")
        except Exception as e:  # noqa: BLE001 (a kernel that does not compile here: the plan says why)
            return None, f"the Triton int4 linear: {type(e).__name__}: {str(e).splitlines()[0][:160]}"
        return (layer, None) if why is None else (None, why)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from . import triton as kernels

        return kernels.int4_linear(x, self.packed, split_k=self.split_k)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"Q4_1 (Triton, split_k={self.split_k})")


class TritonQ4Gemv(_TritonQ4):
    """A Q4_1 QuantLinear on the Triton INT4 GEMV (kernels/triton/int4_gemv.py): the GGUF's codes repacked
    once at load, the scales and mins in the activations' dtype (the dequantization by bits: no
    int-to-float conversions; bf16-rounded scales, as torch's kernel holds them), float32 sums, a tile
    and input split fixed per layer (rows independent of each other)."""

    def __init__(self, packed, in_features: int, out_features: int, config, split_k: int, dtype: torch.dtype):
        super().__init__(packed, in_features, out_features, split_k, dtype)
        self.config = config

    @classmethod
    def build(cls, q: QuantLinear, dtype: torch.dtype, config=None) -> tuple[Optional[TritonQ4Gemv], Optional[str]]:
        from . import triton as kernels

        dev = q.qweight.device
        why = _triton_q4_refusal(q)
        if why:
            return None, why
        from .triton.int4_gemv import CANDIDATES

        config = config or CANDIDATES[0]
        mins = q.mins if q.mins is not None else -8 * q.scales
        sms = torch.cuda.get_device_properties(dev).multi_processor_count
        try:
            packed = kernels.q4_repack(q.qweight, q.scales.float(), mins.float(), dtype=dtype)
            layer = cls(packed, q.in_features, q.out_features, config,
                        config.split_k(q.out_features, q.in_features, sms), dtype)
            x = torch.randn(4, q.in_features, device=dev, dtype=dtype,
                            generator=torch.Generator(device=dev).manual_seed(0))
            why = check_product(layer(x), F.linear(x.float(), q.dequantize().float()), "the Triton int4 GEMV")
        except Exception as e:  # noqa: BLE001 (a kernel that does not compile here: the plan says why)
            return None, f"the Triton int4 GEMV: {type(e).__name__}: {str(e).splitlines()[0][:160]}"
        return (layer, None) if why is None else (None, why)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from .triton.int4_gemv import q4_gemv

        return q4_gemv(x, self.packed, self.config, self.split_k)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"Q4_1 (Triton GEMV {self.config.label()}, split_k={self.split_k})")


# Whether the layers' calls are a decode step's rows (the fixed-shape step, cuda_graphs.py: decode,
# verify and catch-up rows) or anything else (prompt chunks, eager steps, the load-time probes): a layer
# whose kernel family differs between the two (TritonQ4Family) reads it. Decided by where the call comes
# from, never by its row count, so a prompt's rows run one family however it was chunked.
_DECODE_ROWS: ContextVar[bool] = ContextVar("orin_llm_decode_rows", default=False)


def in_decode_rows() -> bool:
    """Whether the calls now are a decode step's rows (decode_rows)."""
    return _DECODE_ROWS.get()


@contextmanager
def decode_rows() -> Iterator[None]:
    """Inside: the layers are called with a decode step's rows (the fixed-shape step, Llama.fixed_step; the
    load-time timing of a decode kernel)."""
    token = _DECODE_ROWS.set(True)
    try:
        yield
    finally:
        _DECODE_ROWS.reset(token)


class TritonQ4Family(nn.Module):
    """A Q4_1 QuantLinear on the decode GEMV family (kernels/triton/decode_gemv.py) for a decode step's rows
    and, over the same bytes, its tensor-core GEMM for everything else (prompt_gemm.py: prompt chunks):
    the GGUF's codes as int32 words and each group's fp16 scale and min in one word, prepacked once at
    load; a decode tile fixed per layer (rows independent of each other within each family)."""

    def __init__(self, packed, config, dtype: torch.dtype):
        super().__init__()
        self.register_buffer("codes", packed.codes)
        self.register_buffer("scale_min", packed.scale_min)
        self.config, self.dtype = config, dtype
        self.in_features, self.out_features = packed.in_features, packed.out_features

    @property
    def packed(self):
        from .triton.decode_gemv import DecodePacked

        return DecodePacked(self.codes, self.scale_min)

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.codes, self.scale_min))

    @classmethod
    def build(cls, q: QuantLinear, dtype: torch.dtype, config=None) -> tuple[Optional[TritonQ4Family], Optional[str]]:
        """The layer on the family, both its kernels checked against the dequantized layer; (None, why) if not."""
        why = _triton_q4_refusal(q)
        if why:
            return None, why
        from .triton.decode_gemv import FAMILY_CANDIDATES, decode_pack

        dev = q.qweight.device
        mins = q.mins if q.mins is not None else -8 * q.scales
        try:
            layer = cls(decode_pack(q.qweight, q.scales.float(), mins.float()), config or FAMILY_CANDIDATES[0], dtype)
            x = torch.randn(4, q.in_features, device=dev, dtype=dtype,
                            generator=torch.Generator(device=dev).manual_seed(0))
            want = F.linear(x.float(), q.dequantize().float())
            with decode_rows():
                why = check_product(layer(x), want, "the Triton decode GEMV family")
            why = why or check_product(layer(x), want, "the family's prompt GEMM")
        except Exception as e:  # noqa: BLE001 (a kernel that does not compile here: the plan says why)
            return None, f"the Triton decode GEMV family: {type(e).__name__}: {str(e).splitlines()[0][:160]}"
        return (layer, None) if why is None else (None, why)

    def forward(self, x: torch.Tensor, residual: Optional[torch.Tensor] = None) -> torch.Tensor:
        if in_decode_rows():
            from .triton.decode_gemv import decode_gemv

            return decode_gemv(x, self.packed, self.config, residual)
        from .triton.prompt_gemm import prompt_gemm

        return prompt_gemm(x, self.packed, residual)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"Q4_1 (Triton decode family {self.config.label()}; prompt rows: its GEMM)")
