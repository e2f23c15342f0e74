"""Weight-only quantization for the draft model: int8 per output channel, int4 per group.

Stored per linear layer as `<name>.qweight` + `<name>.scales` (symmetric, no zero points).
Both formats are row-wise, so fused layers (q|k|v, gate|up) are plain concatenations.
At run time `QuantLinear` dequantizes per call: portable (CPU, CUDA, Orin's torch) and small in
memory; measured speed is in docs/BENCHMARKS.md. The Orin's production path is TensorRT-LLM's
INT4-AWQ kernels, not this.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import OrinError

BITS = {"int8_wo": 8, "int4_wo": 4}


def quantize_int8(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    scales = (w.float().abs().amax(dim=1) / 127).clamp(min=1e-8)
    q = torch.clamp(torch.round(w.float() / scales[:, None]), -127, 127).to(torch.int8)
    return q, scales


def quantize_int4(w: torch.Tensor, group: int) -> tuple[torch.Tensor, torch.Tensor]:
    out, inp = w.shape
    if inp % group or group % 2:
        raise OrinError(f"int4 group size {group} must be even and divide the input width {inp}")
    g = w.float().view(out, inp // group, group)
    scales = (g.abs().amax(dim=2) / 7).clamp(min=1e-8)  # [out, in/group]
    q = torch.clamp(torch.round(g / scales[..., None]), -8, 7).view(out, inp).to(torch.int16) + 8
    packed = (q[:, 0::2] | (q[:, 1::2] << 4)).to(torch.uint8)  # two nibbles per byte, even column low
    return packed, scales


def quantize(w: torch.Tensor, weights: str, group: int) -> tuple[torch.Tensor, torch.Tensor]:
    if weights == "int8_wo":
        return quantize_int8(w)
    if weights == "int4_wo":
        return quantize_int4(w, group)
    raise OrinError(f"weights {weights!r}: the torch backend quantizes int8_wo and int4_wo "
                    "(int4_awq is TensorRT-LLM's, built on the device)")


class QuantLinear(nn.Module):
    def __init__(self, qweight: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype):
        super().__init__()
        self.bits = 8 if qweight.dtype == torch.int8 else 4
        self.register_buffer("qweight", qweight)
        self.register_buffer("scales", scales.to(dtype))
        self.dtype = dtype

    @property
    def in_features(self) -> int:
        return self.qweight.shape[1] * (1 if self.bits == 8 else 2)

    def dequantize(self) -> torch.Tensor:
        if self.bits == 8:
            return self.qweight.to(self.dtype) * self.scales[:, None]
        q = self.qweight
        w = torch.stack((q & 0xF, q >> 4), dim=-1).view(q.shape[0], -1).to(self.dtype) - 8
        group = self.in_features // self.scales.shape[1]
        return w * self.scales.repeat_interleave(group, dim=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.dequantize())

    @property
    def nbytes(self) -> int:
        return self.qweight.numel() * self.qweight.element_size() + self.scales.numel() * 4
