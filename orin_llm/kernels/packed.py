"""Linear layers with weights prepacked once for oneDNN (CPU, float32).

Why: a decode step of a small model on a CPU is a few skinny matmuls. torch's default CPU path
takes a gemv kernel at one row and repacks the weight inside every gemm call at a few rows, so a
9-row verify step costs ~1.4× a one-row step and results differ with the row count. With the
weight packed once for oneDNN's kernels, 1 to 16 rows cost about the same, ~2× less than the
default path (docs/notes/benchmarks-lab-notes.md), and, from 2 rows up, a row's result does not depend on how many
rows share the call. Some shapes take another kernel at one row, so a single row is padded to two.

Row independence is what makes a k+1-token speculative verify compute every position bit for bit
like a one-token decode step (llama.py). It is a property of the kernels oneDNN picks for this CPU,
not a documented promise, so `rows_independent` checks it at load for every weight shape; where it
does not hold, llama.py pads decode steps to a fixed width instead (slower, still exact).
"""

from __future__ import annotations

import torch
from torch import nn

from .quant import QuantLinear

PACK_ROWS = 16  # oneDNN's batch-size hint when packing: the decode and verify widths we run


def onednn_available() -> bool:
    """Whether this torch has oneDNN's packed linear kernels (CPU)."""
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def packing_available(device: torch.device | str, dtype: torch.dtype) -> bool:
    """oneDNN packing applies to float32 weights on the CPU (whether a model packs is the kernel plan's
    choice, kernel_plan.py: ORIN_LLM_PACK=0 turns it off for A/B measurements against torch's default path)."""
    return torch.device(device).type == "cpu" and dtype == torch.float32 and onednn_available()


class PackedLinear(nn.Module):
    """y = x @ W.T for x of shape [rows, in], W packed for oneDNN (no bias: Llama has none)."""

    def __init__(self, weight: torch.Tensor):
        super().__init__()
        self.out_features, self.in_features = weight.shape
        # A plain attribute, not a buffer: the packed layout is opaque to state_dict and .to().
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach().contiguous(), PACK_ROWS)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] == 1:  # one row may take another kernel: run it as two, like every other step
            return self._mm(x.expand(2, -1).contiguous())[:1]
        return self._mm(x)

    def _mm(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, None, "none", [], "")

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, oneDNN packed"


def pack_linears(model: nn.Module) -> int:
    """Replace every bias-free float32 nn.Linear in `model` with a PackedLinear; returns how many.
    The unpacked weight is released (a tied embedding keeps its own reference)."""
    names = [n for n, m in model.named_modules()
             if type(m) is nn.Linear and m.bias is None and m.weight.dtype == torch.float32]
    packed = {}
    try:
        for name in names:
            packed[name] = PackedLinear(model.get_submodule(name).weight)
    except RuntimeError:  # a torch built without these kernels for this CPU: keep torch's path
        return 0
    for name, module in packed.items():
        model.set_submodule(name, module)
    return len(packed)


def rows_independent(model: nn.Module, max_rows: int, seed: int = 0) -> bool:
    """True if, for every linear shape in `model`, each row of an n-row call (n = 1 .. max_rows)
    equals the same row computed in a max_rows-row call, bit for bit."""
    from .cuda_linear import INT4_LAYERS, TritonQ8Head

    gen = torch.Generator().manual_seed(seed)
    seen = set()
    for m in model.modules():
        if not isinstance(m, (PackedLinear, nn.Linear, QuantLinear, *INT4_LAYERS, TritonQ8Head)):
            continue
        shape = (type(m), m.out_features, m.in_features)
        if shape in seen:
            continue
        seen.add(shape)
        # on the layer's device, in its dtype (a CUDA model computes in bf16: runtime/kernel_plan.py)
        t = next(m.buffers(), None) if isinstance(m, (QuantLinear, *INT4_LAYERS, TritonQ8Head)) \
            else None
        t = next(m.parameters(), None) if t is None else t
        dtype = t.dtype if t is not None and t.is_floating_point() else getattr(m, "dtype", torch.float32)
        x = torch.randn(max_rows, m.in_features, generator=gen).to(t.device if t is not None else "cpu", dtype)
        with torch.inference_mode():
            full = m(x)
            if not all(torch.equal(m(x[:n]), full[:n]) for n in range(1, max_rows)):
                return False
    return bool(seen)


def padded(linear: nn.Module, x: torch.Tensor, width: int) -> torch.Tensor:
    """linear(x) computed at a fixed row count: a row's result then does not depend on how many
    rows share the call (gemm kernels differ by M; at one fixed M, rows are independent)."""
    if not width:
        return linear(x)
    xp = x.new_zeros(width, x.shape[-1])
    xp[: x.shape[0]] = x
    return linear(xp)[: x.shape[0]]
