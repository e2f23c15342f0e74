"""Q4_1 linear layers on CUDA, still 4-bit on the GPU: torch's packed int4 kernel (`_weight_int4pack_mm`,
gpt-fast's "tinygemm"), from the Q4_1 blocks repacked once at load, or our Triton kernels over the same
blocks (cuda_triton_q4.py's layers: `q4_gemv`, the GEMV for decode's few rows; `int4_linear`, the tiled
one; the decode GEMV family with its prompt GEMM); and which of them a layer runs (`choose_int4`: the
one place that chooses).

Q4_1 stores w = scale·q + min per 32-weight block (q in 0..15). torch's kernel computes
(q - 8)·scale + zero per group, so zero = min + 8·scale and the codes go in as they are: the same
values, held in 4 bits plus a bf16 scale and zero per 32 weights (the scales and mins rounded from fp16
to bf16: the one change, checked at load against the dequantized layer). The kernel takes bf16
activations and writes bf16. The packing order of the codes has changed between torch releases (int32
codes, then two codes per byte), so `pack` tries the layouts this torch takes and keeps the one whose
products match the dequantized layer: a torch whose kernel packs differently is refused at load (the
layer then runs dequantized, and the kernel plan says why), never a silently wrong product.

The choice (`choose_int4`): torch's kernel is latency-bound at decode's few rows (about the same time
per call whatever the layer's size, on the H200 of docs/bench/gpu.json), so per layer shape the
candidates are timed at load on the GPU at the decode step's rows, each as a CUDA graph of calls
(what the decode graphs replay: no Python launch cost in the figure) over copies of the layer that keep
its weights cold in L2 (cuda_timing.py: a step reads each layer once), and the fastest runs every call
of that shape, decode and prompt alike (one kernel per layer keeps a row's numbers independent of the
other rows: batch invariance). The timings go into the kernel plan's report.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from .cuda_timing import l2_bytes, time_layer_cold_us, time_us
from .cuda_triton_q4 import TOLERANCE, TritonQ4Family, TritonQ4Gemv, TritonQ4Linear, check_product, decode_rows
from .quant import QuantLinear

__all__ = ["INT4_KERNELS", "INT4_LAYERS", "Int4Choice", "Int4PackLinear", "TritonQ4Family", "TritonQ4Gemv",
           "TritonQ4Linear", "TritonQ8Head", "choose_int4", "decode_rows", "time_us"]

INT4_CUDA_KERNEL = "aten._weight_int4pack_mm"
GROUPS = (32, 64, 128, 256)


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


# every CUDA int4 layer class (packed.rows_independent probes them all)
INT4_LAYERS = (Int4PackLinear, TritonQ4Linear, TritonQ4Gemv, TritonQ4Family)
# what ORIN_LLM_INT4_KERNEL may ask for (kernel_plan.KernelSwitches.int4_kernel): auto times them
INT4_KERNELS = ("auto", "int4pack", "gemv", "tiled", "family")  # (kernel_plan.py reads them from here)


@dataclass
class Int4Choice:
    """The kernel chosen for one layer shape, and what each candidate took at the decode rows."""
    kernel: str  # "int4pack", "gemv", "tiled" or "family"
    config: object = None  # the GEMV's GemvConfig, the family's DecodeConfig
    timings_us: dict = field(default_factory=dict)  # candidate label -> µs per call (empty: not timed)
    refused: dict = field(default_factory=dict)  # candidate -> why it does not run here
    rows: tuple = ()  # the row counts timed: a candidate's time is its calls' at each, summed

    def describe(self) -> str:
        label = getattr(self.config, "label", str)()
        name = {"int4pack": "torch's int4 kernel", "gemv": f"Triton GEMV {label}", "tiled": "Triton tiled int4",
                "family": f"Triton decode family {label}"}[self.kernel]
        if not self.timings_us:
            return f"{name} (asked for)"
        times = ", ".join(f"{k} {v:.1f} us" for k, v in sorted(self.timings_us.items(), key=lambda kv: kv[1]))
        at = " + ".join(map(str, self.rows))
        return f"{name} (timed at load, {at} rows: {times})" if self.rows else f"{name} (timed at load: {times})"


def _build(kind: str, q: QuantLinear, dtype: torch.dtype, config=None):
    if kind == "int4pack":
        return Int4PackLinear.build(q, dtype)
    if kind == "tiled":
        return TritonQ4Linear.build(q, dtype)
    if kind == "family":
        return TritonQ4Family.build(q, dtype, config)
    return TritonQ4Gemv.build(q, dtype, config)


def _candidates(asked: str) -> list[tuple[str, object]]:
    """(kind, config) to build for `asked`: one kernel, or the tiles of one, or (auto) everything."""
    from .triton.decode_gemv import FAMILY_CANDIDATES
    from .triton.int4_gemv import CANDIDATES

    if asked in ("int4pack", "tiled"):
        return [(asked, None)]
    gemv = [("gemv", c) for c in CANDIDATES]
    family = [("family", c) for c in FAMILY_CANDIDATES]
    return {"gemv": gemv, "family": family}.get(asked, [("int4pack", None), *gemv, *family])


def choose_int4(q: QuantLinear, dtype: torch.dtype, rows: int | tuple[int, ...], asked: str = "auto",
                chosen: Optional[dict] = None) -> tuple[Optional[nn.Module], Optional[str], Optional[Int4Choice]]:
    """The layer `q` on the CUDA int4 kernel `asked` (INT4_KERNELS): "auto" times torch's kernel, the GEMV's
    and the decode family's candidate tiles at `rows` rows (the decode steps': a row count, or several,
    each candidate's times summed; the family's as a decode step calls it) and keeps the fastest; "gemv"
    and "family" time their own tiles only. `chosen` (shape -> Int4Choice)
    carries the choice to the other layers of the same shape, timed once. Returns (layer, None,
    choice), or (None, why, None) where no candidate runs."""
    if asked not in INT4_KERNELS:
        raise ValueError(f"int4 kernel {asked!r}: one of {', '.join(INT4_KERNELS)}")
    shape = (q.out_features, q.in_features)
    if chosen is not None and shape in chosen:
        choice = chosen[shape]
        layer, why = _build(choice.kernel, q, dtype, choice.config)
        return (layer, None, choice) if layer is not None else (None, why, None)
    kinds = _candidates(asked)
    choice, best, refused, timings = None, None, {}, {}
    counts = tuple(max(1, r) for r in ((rows,) if isinstance(rows, int) else rows))
    x = torch.randn(max(counts), q.in_features, device=q.qweight.device, dtype=dtype,
                    generator=torch.Generator(device=q.qweight.device).manual_seed(1))
    l2 = l2_bytes(q.qweight.device) if q.qweight.is_cuda else 0
    for kind, config in kinds:
        label = kind if config is None else f"{kind}_{config.label()}"
        layer, why = _build(kind, q, dtype, config)
        if layer is None:
            refused[label] = why
            continue
        if len(kinds) == 1:
            best, choice = layer, Int4Choice(kind, config)
            break
        try:
            # weights cold in L2, as a decode step reads them (cuda_timing.py), called as a decode step calls it
            with decode_rows():
                timings[label] = round(sum(time_layer_cold_us(layer, x[:r], l2) for r in counts), 2)
        except Exception as e:  # noqa: BLE001 (a candidate that fails to run is refused, with why)
            refused[label] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
            continue
        if best is None or timings[label] < min(v for k, v in timings.items() if k != label):
            best, choice = layer, Int4Choice(kind, config)
        del layer
    if best is None:
        return None, "; ".join(f"{k}: {v}" for k, v in refused.items()) or "no candidate", None
    choice.timings_us, choice.refused, choice.rows = timings, refused, counts
    if chosen is not None:
        chosen[shape] = choice
    return best, None, choice


class TritonQ8Head(nn.Module):
    """The tied LM head over the Q8_0 embedding's int8 codes (shared with it, not copied) and its per-32
    scales (the GGUF's values: fp16 where exact), on the Triton INT8 head kernel: float32 logits of the
    GGUF's own weights, reading a quarter of a float32 head's bytes and half of a bf16 one's."""

    def __init__(self, codes: torch.Tensor, scales: torch.Tensor):
        super().__init__()
        self.register_buffer("scales", scales)
        self.codes = [codes]  # not a buffer: the embedding's
        self.out_features, self.in_features = codes.shape

    @classmethod
    def build(cls, codes: torch.Tensor, scales: torch.Tensor) -> tuple[Optional[TritonQ8Head], Optional[str]]:
        from . import triton as kernels

        if codes.device.type != "cuda":
            return None, f"not a CUDA device ({codes.device.type})"
        why = kernels.available()
        if why:
            return None, why
        s = scales.float().to(codes.device)
        s = s.half() if torch.equal(s.half().float(), s) else s
        try:
            head = cls(codes, s)
            x = torch.randn(3, head.in_features, device=codes.device, dtype=torch.bfloat16,
                            generator=torch.Generator(device=codes.device).manual_seed(0))
            rows = torch.arange(0, head.out_features, max(1, head.out_features // 512), device=codes.device)
            w = codes[rows].float() * s[rows].float().repeat_interleave(head.in_features // s.shape[1], dim=1)
            why = check_product(head(x)[:, rows], x.float() @ w.T, "the Triton INT8 head")
        except Exception as e:  # noqa: BLE001
            return None, f"the Triton INT8 head: {type(e).__name__}: {str(e).splitlines()[0][:160]}"
        return (head, None) if why is None else (None, why)

    def forward(self, h: torch.Tensor, allowed: Optional[torch.Tensor] = None) -> torch.Tensor:
        from . import triton as kernels

        return kernels.int8_head(h, self.codes[0], self.scales)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, Q8_0 (Triton INT8)"
