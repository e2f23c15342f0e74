"""Weight-only quantization for the draft model: int8 per output channel, int4 per group.

Stored per linear layer as `<name>.qweight` + `<name>.scales` (symmetric, no zero points).
Both formats are row-wise, so fused layers (q|k|v, gate|up) are plain concatenations.
At run time an int8 `QuantLinear` on a CPU runs torch's packed weight-only kernel
(`aten._weight_int8pack_mm`: int8 weights, per-channel scales, bf16 activations), which reads the
int8 weights as they are; elsewhere, and for int4, it dequantizes per call (portable: CUDA, Orin's
torch). Measured side by side in bench/draft_speed.py and docs/BENCHMARKS.md: per call the
dequantizing path costs several times the packed kernel. The activations round to bf16 on the
packed path: this is the draft model, whose tokens the target verifies, so the plans do not change
(greedy speculation stays token for token the plain output). The Orin's production path is
TensorRT-LLM's INT4-AWQ kernels, not this.
"""

from __future__ import annotations

import functools

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


@functools.cache
def int8_kernel_available(device_type: str) -> bool:
    """Whether torch's packed int8 weight-only matmul runs on this device type with bf16 activations
    (probed once: a torch build without the kernel raises)."""
    if device_type != "cpu":
        return False  # CUDA builds of 2.4-2.x vary; the Orin's torch path dequantizes (module doc)
    try:
        q, s = torch.ones(8, 16, dtype=torch.int8), torch.ones(8, dtype=torch.bfloat16)
        torch.ops.aten._weight_int8pack_mm(torch.ones(2, 16, dtype=torch.bfloat16), q, s)
    except (RuntimeError, AttributeError, NotImplementedError):
        return False
    return True


class QuantLinear(nn.Module):
    def __init__(self, qweight: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype):
        super().__init__()
        self.bits = 8 if qweight.dtype == torch.int8 else 4
        self.register_buffer("qweight", qweight)
        self.register_buffer("scales", scales.to(dtype))
        self.dtype = dtype
        self.packed_scales: torch.Tensor | None = None  # set by pack(): bf16 scales for the int8 kernel

    def pack(self) -> bool:
        """Use the packed int8 kernel from now on, where this device has it (after .to(device))."""
        if self.bits != 8 or not int8_kernel_available(self.qweight.device.type):
            return False
        # fresh, aligned copies: a tensor loaded from safetensors may sit at any offset of the file's
        # buffer, and the kernel crashes (SIGSEGV, torch 2.13 CPU) on such a weight
        self.qweight = self.qweight.clone(memory_format=torch.contiguous_format)
        self.packed_scales = self.scales.to(torch.bfloat16).clone()
        return True

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
        if self.packed_scales is not None:
            flat = x.reshape(-1, x.shape[-1]).to(torch.bfloat16)
            y = torch.ops.aten._weight_int8pack_mm(flat, self.qweight, self.packed_scales)
            return y.to(x.dtype).reshape(*x.shape[:-1], y.shape[-1])
        return F.linear(x, self.dequantize())

    @property
    def nbytes(self) -> int:
        return self.qweight.numel() * self.qweight.element_size() + self.scales.numel() * 4


class Int8Embedding(nn.Module):
    """The rows of an int8 per-row-quantized matrix, dequantized on lookup: a draft model's input
    embedding sharing its int8 storage with its tied lm_head (a QuantLinear of the same matrix), so the
    draft reads and holds a quarter of the fp32 bytes for both."""

    def __init__(self, head: QuantLinear):
        super().__init__()
        self.head = [head]  # not a submodule: the weights are the head's

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        head = self.head[0]
        return head.qweight[ids].to(head.dtype) * head.scales[ids].unsqueeze(-1)


def quantize_tied_head(model: nn.Module, dtype: torch.dtype) -> bool:
    """A draft model's tied fp32 embedding and lm_head → one int8 per-row matrix: the lm_head runs the
    packed int8 kernel (it was most of a draft step once the layers were packed, issue #17) and the
    embedding dequantizes the rows it looks up. Only where the packed kernel runs; False otherwise."""
    emb, head = getattr(model, "embed_tokens", None), getattr(model, "lm_head", None)
    tied = isinstance(emb, nn.Embedding) and isinstance(head, nn.Linear) \
        and head.weight.data_ptr() == emb.weight.data_ptr()  # (two Parameters over one tensor after assign)
    if not tied:
        return False
    q, scales = quantize_int8(emb.weight.data)
    lin = QuantLinear(q, scales, dtype).to(emb.weight.device)
    if not lin.pack():
        return False
    model.lm_head = lin
    model.embed_tokens = Int8Embedding(lin)
    return True
