"""Weight-only quantization: int8 per output channel, int4 per group, and a GGUF's own Q4_1 blocks.

Stored per linear layer as `<name>.qweight` + `<name>.scales` (+ `<name>.mins` for Q4_1, whose
groups are asymmetric: w = scale·q + min, q in 0..15). Every format is row-wise, so fused layers
(q|k|v, gate|up) are plain concatenations.

- int8_wo / int4_wo: the draft model, quantized at build time (symmetric, no zero points).
- q4_1: the target as its GGUF gives it. A Q4_1 GGUF dequantized to float32 still holds exactly
  the values scale·q + min of 32-weight blocks, so `recover_q4_1` finds each block's scale, min and
  codes again from those floats, and refuses a weight where that does not give back every value
  bit for bit: the engine then holds the GGUF's information, not a second quantization of it. Its
  Q8_0 token embedding is kept the same way for lookups (`recover_q8_0`, `Q8Embedding`). The tied
  lm_head is not a plain packed layer: both kernels write bf16 outputs, and bf16 logits tie at the
  top (8 significant bits), which would leave argmax to the token order. head.py runs it as int8
  with exact greedy choices (error bounds, the top recomputed exactly) and float32 on demand.

On a CPU a `QuantLinear` runs our integer dot-product kernels where they build (q8_dot.py: the
codes as stored times int8-quantized activations, llama.cpp's way, float32 outputs), else torch's
packed weight-only kernels, which read the quantized weights as they are too:
`aten._weight_int8pack_mm` (int8, per-channel scales) and `aten._weight_int4pack_mm_for_cpu` (int4
in groups, a scale and a zero per group). Both take bfloat16 activations (the int4 kernel's float32
path is a slow reference, ~50× slower here) and round their output to bfloat16: the same class of
precision as llama.cpp, whose Q4_1 dot products run on 8-bit quantized activations. On CUDA the int4
layers are repacked for CUDA's kernels (cuda_linear.py); where no kernel runs, a draft's int8 layers
dequantize per call and a q4_1 target's once at load (runtime/weights.py). Measured side by side in
bench/decode_step.py, bench/q8_dot.py, bench/draft_speed.py and docs/notes/benchmarks-lab-notes.md. The
Orin's production path is TensorRT-LLM's INT4-AWQ kernels, not this.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import OrinError
from . import q8_dot

GGUF_BLOCK = 32  # weights per GGUF Q4_1 or Q8_0 block (one fp16 scale, and for Q4_1 one fp16 min)

# The packed kernels an engine's quantized layers run on a CPU (the manifest records them, the
# loader checks them: build/pipeline.py, runtime/weights.py)
INT8_KERNEL = "aten._weight_int8pack_mm"
INT4_KERNEL = "aten._weight_int4pack_mm_for_cpu"
INT4_GROUPS = (32, 64, 128, 256)  # the group sizes the int4 kernel takes


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


def kernels_for(weights: str, group: int) -> list[str]:
    """The packed kernels the torch backend runs for these weights on a CPU (the manifest records
    them): the layers', and the int8 kernel of a draft's tied head (a q4_1 target's stays float)."""
    if weights == "q4_1":
        return [INT4_KERNEL]
    if weights == "int4_wo" and group in INT4_GROUPS:
        return [INT4_KERNEL, INT8_KERNEL]
    if weights in ("int8_wo", "int4_wo"):
        return [INT8_KERNEL]
    return []


def recover_q4_1(w: torch.Tensor, name: str = "weight") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The Q4_1 blocks a dequantized GGUF weight [out, in] was made of: nibble-packed codes
    [out, in/2] (even column in the low nibble), scales and mins [out, in/32] (float32).

    llama.cpp's Q4_1 maps a block's minimum to code 0 and its maximum to 15, so min and scale are
    the block's smallest value and (largest - smallest)/15, and the codes follow. The result is
    checked: scale·q + min must give back every value bit for bit, else OrinError (a weight that
    is not Q4_1, or Q4_1 made with an importance matrix whose blocks need not use codes 0 and 15)."""
    out, inp = w.shape
    if inp % GGUF_BLOCK:
        raise OrinError(f"{name}: {inp} input columns are not whole Q4_1 blocks of {GGUF_BLOCK}")
    g = w.float().view(out, inp // GGUF_BLOCK, GGUF_BLOCK)
    mins = g.amin(dim=2)
    scales = (g.amax(dim=2) - mins) / 15
    step = torch.where(scales > 0, scales, torch.ones_like(scales))[..., None]
    q = torch.round((g - mins[..., None]) / step).clamp(0, 15)
    if not torch.equal(q * scales[..., None] + mins[..., None], g):  # gguf's dequantize: d * q + m
        raise OrinError(f"{name}: the weights are not Q4_1 values (scale·q + min in blocks of "
                        f"{GGUF_BLOCK}); build this model with weights = \"fp32\"")
    q = q.view(out, inp).to(torch.uint8)
    return (q[:, 0::2] | (q[:, 1::2] << 4)).contiguous(), scales.contiguous(), mins.contiguous()


def recover_q8_0(w: torch.Tensor, name: str = "weight") -> tuple[torch.Tensor, torch.Tensor]:
    """The Q8_0 blocks (int8 codes, one scale per 32 weights) a dequantized GGUF weight was made of,
    checked bit for bit as recover_q4_1 is: each block's largest magnitude is code ±127."""
    out, inp = w.shape
    if inp % GGUF_BLOCK:
        raise OrinError(f"{name}: {inp} columns are not whole Q8_0 blocks of {GGUF_BLOCK}")
    g = w.float().view(out, inp // GGUF_BLOCK, GGUF_BLOCK)
    scales = g.abs().amax(dim=2) / 127
    q = torch.round(g / torch.where(scales > 0, scales, torch.ones_like(scales))[..., None])
    if not torch.equal(q * scales[..., None], g):  # gguf's dequantize: d * q
        raise OrinError(f"{name}: the weights are not Q8_0 values (scale·q in blocks of {GGUF_BLOCK})")
    return q.view(out, inp).to(torch.int8).contiguous(), scales.contiguous()


def quantize(w: torch.Tensor, weights: str, group: int) -> tuple[torch.Tensor, torch.Tensor]:
    if weights == "int8_wo":
        return quantize_int8(w)
    if weights == "int4_wo":
        return quantize_int4(w, group)
    raise OrinError(f"weights {weights!r}: the torch backend quantizes int8_wo and int4_wo "
                    "(int4_awq is TensorRT-LLM's, built on the device)")


@functools.cache
def kernel_available(kernel: str, device_type: str) -> bool:
    """Whether torch's packed weight-only kernel `kernel` (INT8_KERNEL, INT4_KERNEL) runs on this
    device type with bf16 activations (probed once: a torch build without it raises)."""
    if device_type != "cpu":
        return False  # CUDA builds of 2.4-2.x vary; the Orin's torch path dequantizes (module doc)
    x = torch.ones(2, 64, dtype=torch.bfloat16)
    try:
        if kernel == INT8_KERNEL:
            q, s = torch.ones(8, 64, dtype=torch.int8), torch.ones(8, dtype=torch.bfloat16)
            torch.ops.aten._weight_int8pack_mm(x, q, s)
        elif kernel == INT4_KERNEL:
            packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(torch.ones(16, 64, dtype=torch.int32), 1)
            torch.ops.aten._weight_int4pack_mm_for_cpu(x, packed, 32, torch.ones(2, 16, 2, dtype=torch.bfloat16))
        else:
            return False
    except (RuntimeError, AttributeError, NotImplementedError):
        return False
    return True


class QuantLinear(nn.Module):
    """y = x @ W.T for a weight-only quantized W: int8 per channel (qweight int8 [out, in]), or
    int4 per group (qweight uint8 [out, in/2], two codes per byte), symmetric (code - 8)·scale, or
    with `mins` asymmetric scale·code + min (Q4_1)."""

    def __init__(self, qweight: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype,
                 mins: torch.Tensor | None = None):
        super().__init__()
        self.bits = 8 if qweight.dtype == torch.int8 else 4
        self.out_features = qweight.shape[0]
        self.in_features = qweight.shape[1] * (1 if self.bits == 8 else 2)
        self.group = self.in_features // scales.shape[1] if self.bits == 4 else self.in_features
        self.register_buffer("qweight", qweight)
        self.register_buffer("scales", scales.to(dtype))
        self.register_buffer("mins", None if mins is None else mins.to(dtype))
        self.dtype = dtype
        self.packed_scales: torch.Tensor | None = None  # set by pack(): bf16 scales for the int8 kernel
        self.int4: tuple[torch.Tensor, torch.Tensor, int] | None = None  # set by pack(): the int4 kernel's operands
        self.q8: tuple[torch.Tensor, ...] | None = None  # set by pack(): q8_dot's tiles (codes, scales[, mins])
        self.q8_kernel = None  # set with q8: the q8_dot function that takes them (looked up once, not per call)

    @property
    def kernel(self) -> str:
        return INT8_KERNEL if self.bits == 8 else INT4_KERNEL

    @property
    def packed(self) -> bool:
        """Whether pack() put this layer on a packed kernel (ours or torch's)."""
        return self.q8 is not None or self.int4 is not None or self.packed_scales is not None

    def pack(self, use_q8_dot: bool = True) -> bool:
        """Use the fastest packed kernel from now on, where this device has one (after .to(device)):
        q8_dot's where it builds and takes the shape (unless the kernel plan says `use_q8_dot=False`), else torch's."""
        if use_q8_dot and self._pack_q8_dot():
            return True
        if not kernel_available(self.kernel, self.qweight.device.type):
            return False
        if self.bits == 4 and (self.group not in INT4_GROUPS or self.out_features % 16):
            return False  # the int4 kernel's shapes: these group sizes, output rows in 16s
        if self.bits == 8:
            # fresh, aligned copies: a tensor loaded from safetensors may sit at any offset of the
            # file's buffer, and the kernel crashes (SIGSEGV, torch 2.13 CPU) on such a weight
            self.qweight = self.qweight.clone(memory_format=torch.contiguous_format)
            self.packed_scales = self.scales.to(torch.bfloat16).clone()
            return True
        # the int4 kernel computes (code - 8)·scale + zero per group: zero = min + 8·scale for
        # Q4_1, 0 for the symmetric format. Operands: [in/group, out, 2] scales and zeros (bf16).
        s = self.scales.float()
        zeros = self.mins.float() + 8 * s if self.mins is not None else torch.zeros_like(s)
        scales_zeros = torch.stack([s, zeros], dim=-1).transpose(0, 1).to(torch.bfloat16).contiguous()
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(self._codes().to(torch.int32), 1)
        self.int4 = (packed, self.group, scales_zeros)  # the kernel's argument order
        self.qweight = self.scales = self.mins = None  # the kernel's operands hold them: not kept twice
        return True

    def _pack_q8_dot(self) -> bool:
        if self.qweight.device.type != "cpu" or not q8_dot.fits(self.out_features, self.in_features, self.bits == 4):
            return False
        lib = q8_dot.op()
        if (self.bits == 4 and self.group % q8_dot.BLOCK) or lib is None:
            return False
        self.q8_kernel = lib.q4_1_linear if self.bits == 4 else lib.q8_linear
        if self.bits == 8:
            self.q8 = (q8_dot.pack_q8(self.qweight), self.scales.float().contiguous())
            self.qweight = None  # (the scales stay: an Int8Embedding over this head reads them)
            return True
        s = self.scales.float()
        mins = self.mins.float() if self.mins is not None else -8 * s  # symmetric: (code - 8)·scale
        rep = self.group // q8_dot.BLOCK  # a draft's larger groups: the same scale for each block of 32
        self.q8 = q8_dot.pack_q4_1(self._codes(), s.repeat_interleave(rep, 1), mins.repeat_interleave(rep, 1))
        self.qweight = self.scales = self.mins = None  # the tiles hold them: not kept twice
        return True

    def int8_rows(self, ids: torch.Tensor) -> torch.Tensor:
        """Rows `ids` of an int8 layer's codes, however they are stored (Int8Embedding's lookups)."""
        return self.qweight[ids] if self.q8 is None else q8_dot.unpack_q8_rows(self.q8[0], ids)

    def _codes(self) -> torch.Tensor:
        q = self.qweight
        return torch.stack((q & 0xF, q >> 4), dim=-1).view(q.shape[0], -1)

    def dequantize(self) -> torch.Tensor:
        if self.q8 is not None:
            raise OrinError("this layer runs the q8_dot kernels; its codes are kept only as their tiles")
        if self.bits == 8:
            return self.qweight.to(self.dtype) * self.scales[:, None]
        if self.int4 is not None:
            raise OrinError("this int4 layer runs the packed kernel; its codes are not kept")
        w, group = self._codes().to(self.dtype), self.group
        if self.mins is not None:
            return w * self.scales.repeat_interleave(group, dim=1) + self.mins.repeat_interleave(group, dim=1)
        return (w - 8) * self.scales.repeat_interleave(group, dim=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.packed:
            return F.linear(x, self.dequantize())
        flat = x if x.dim() == 2 else x.reshape(-1, x.shape[-1])  # (rows, as the model passes them: no op)
        if self.q8 is not None:
            y = self.q8_kernel(flat.float().contiguous(), *self.q8).to(x.dtype)
            return y if x.dim() == 2 else y.reshape(*x.shape[:-1], y.shape[-1])
        flat = flat.to(torch.bfloat16)
        if self.int4 is not None:
            y = torch.ops.aten._weight_int4pack_mm_for_cpu(flat, *self.int4)
        else:
            y = torch.ops.aten._weight_int8pack_mm(flat, self.qweight, self.packed_scales)
        y = y.to(x.dtype)
        return y if x.dim() == 2 else y.reshape(*x.shape[:-1], y.shape[-1])

    @property
    def nbytes(self) -> int:
        """Bytes the layer holds: codes (packed or not), scales and mins."""
        tensors = self.int4[::2] if self.int4 is not None else \
            (*self.q8, self.scales) if self.q8 is not None else (self.qweight, self.scales, self.mins)
        unique = {t.data_ptr(): t for t in tensors if t is not None}  # (an int8 layer's scales may be its tiles')
        return sum(t.numel() * t.element_size() for t in unique.values())


class Int8Embedding(nn.Module):
    """The rows of an int8 per-row-quantized matrix, dequantized on lookup: a draft model's input
    embedding sharing its int8 storage with its tied lm_head (a QuantLinear of the same matrix), so the
    draft reads and holds a quarter of the fp32 bytes for both."""

    def __init__(self, head: QuantLinear):
        super().__init__()
        self.head = [head]  # not a submodule: the weights are the head's

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        head = self.head[0]
        return head.int8_rows(ids).to(head.dtype) * head.scales[ids].unsqueeze(-1)


class Q8Embedding(nn.Module):
    """An embedding held as a GGUF's Q8_0 blocks (int8 codes, a scale per 32 values): a lookup gives the
    very float values of the GGUF, at a quarter of the float32 bytes (the q4_1 target's input embedding;
    its lm_head is the float32 matrix, packed: logits in float32)."""

    def __init__(self, codes: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype):
        super().__init__()
        self.register_buffer("codes", codes)
        self.register_buffer("scales", scales.to(dtype))
        self.group = codes.shape[1] // scales.shape[1]

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.codes[ids].to(self.scales.dtype) * self.scales[ids].repeat_interleave(self.group, dim=-1)

    @property
    def nbytes(self) -> int:
        return self.codes.numel() + self.scales.numel() * self.scales.element_size()


def quantize_tied_head(model: nn.Module, dtype: torch.dtype, use_q8_dot: bool = True) -> bool:
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
    if not lin.pack(use_q8_dot):
        return False
    model.lm_head = lin
    model.embed_tokens = Int8Embedding(lin)
    return True
