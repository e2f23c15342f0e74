"""Q4_1 linear layers on CUDA, still 4-bit on the GPU: torch's packed int4 kernel (`_weight_int4pack_mm`,
gpt-fast's "tinygemm"), from the Q4_1 blocks repacked once at load.

Q4_1 stores w = scale·q + min per 32-weight block (q in 0..15). torch's kernel computes
(q - 8)·scale + zero per group, so zero = min + 8·scale and the codes go in as they are: the same
values, held in 4 bits plus a bf16 scale and zero per 32 weights (the scales and mins rounded from fp16
to bf16: the one change, checked at load against the dequantized layer). The kernel takes bf16
activations and writes bf16. The packing order of the codes has changed between torch releases (int32
codes, then two codes per byte), so `pack` tries the layouts this torch takes and keeps the one whose
products match the dequantized layer: a torch whose kernel packs differently is refused at load (the
layer then runs dequantized, and the kernel plan says why), never a silently wrong product.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from .quant import QuantLinear

INT4_CUDA_KERNEL = "aten._weight_int4pack_mm"
GROUPS = (32, 64, 128, 256)
# the packed product against the dequantized layer, relative to the product's scale: bf16 activations
# and outputs (2^-8 each) and the bf16 scales and zeros; a wrong code layout is off by ~1
TOLERANCE = 0.05


def _inner_k_tiles(in_features: int) -> Optional[int]:
    return next((t for t in (8, 4, 2) if in_features % (t * 16) == 0), None)


def _layouts(codes: torch.Tensor) -> list[torch.Tensor]:
    """The code layouts torch's packing op has taken: two codes per byte (even index in the high nibble,
    torch >= 2.5), and one int32 per code (older)."""
    c = codes.to(torch.int32)
    return [((c[:, ::2] << 4) | c[:, 1::2]).to(torch.uint8).contiguous(), c.contiguous()]


class Int4PackLinear(nn.Module):
    """A Q4_1 (or symmetric int4) QuantLinear on torch's CUDA int4 kernel; `build` returns None, with the
    reason in `why`, where it cannot run here."""

    def __init__(self, packed: torch.Tensor, group: int, scales_zeros: torch.Tensor, in_features: int,
                 out_features: int, dtype: torch.dtype):
        super().__init__()
        self.register_buffer("packed", packed)
        self.register_buffer("scales_zeros", scales_zeros)
        self.group, self.in_features, self.out_features, self.dtype = group, in_features, out_features, dtype

    @classmethod
    def build(cls, q: QuantLinear, dtype: torch.dtype) -> tuple[Optional[Int4PackLinear], Optional[str]]:
        """The layer on the int4 kernel, checked against its dequantized weights; (None, why) if not."""
        dev = q.qweight.device
        if dev.type != "cuda":
            return None, f"not a CUDA device ({dev.type})"
        if q.bits != 4 or q.group not in GROUPS:
            return None, f"{q.bits}-bit layer, group {q.group} (the kernel takes int4 in groups of {GROUPS})"
        tiles = _inner_k_tiles(q.in_features)
        if tiles is None or q.out_features % 8:
            return None, f"shape {q.out_features}x{q.in_features} (the kernel needs in % 32, out % 8)"
        s = q.scales.float()
        zeros = q.mins.float() + 8 * s if q.mins is not None else torch.zeros_like(s)
        sz = torch.stack([s, zeros], dim=-1).transpose(0, 1).to(torch.bfloat16).contiguous()
        ref = q.dequantize().to(torch.bfloat16)
        gen = torch.Generator(device=dev).manual_seed(0)
        x = torch.randn(4, q.in_features, device=dev, dtype=torch.bfloat16, generator=gen)
        want = F.linear(x, ref).float()
        why = "no layout this torch takes"
        for codes in _layouts(q._codes()):
            try:
                packed = torch.ops.aten._convert_weight_to_int4pack(codes, tiles)
                got = torch.ops.aten._weight_int4pack_mm(x, packed, q.group, sz).float()
            except (RuntimeError, AttributeError, NotImplementedError) as e:
                why = f"{INT4_CUDA_KERNEL}: {str(e).splitlines()[0][:160]}"
                continue
            err = (got - want).abs().max().item() / max(want.abs().max().item(), 1e-6)
            if err <= TOLERANCE:
                return cls(packed, q.group, sz, q.in_features, q.out_features, dtype), None
            why = f"{INT4_CUDA_KERNEL} disagrees with the dequantized layer (relative error {err:.3g})"
        return None, why

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x if x.dim() == 2 else x.reshape(-1, x.shape[-1])
        y = torch.ops.aten._weight_int4pack_mm(flat.to(torch.bfloat16).contiguous(), self.packed, self.group,
                                               self.scales_zeros)
        y = y if y.dtype == x.dtype else y.to(x.dtype)
        return y if x.dim() == 2 else y.reshape(*x.shape[:-1], y.shape[-1])

    @property
    def nbytes(self) -> int:
        return self.packed.numel() * self.packed.element_size() + self.scales_zeros.numel() * 2

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, group={self.group}, int4 (CUDA)"
