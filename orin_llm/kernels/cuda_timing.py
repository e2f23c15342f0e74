"""GPU time of a kernel call as a decode step sees it: inside a CUDA graph (no Python launch cost between
calls), and with its weights cold in L2.

Why cold: a decode step reads each layer's weights once, and the layers after it have pushed them out of
L2 by the next step; a benchmark that calls one layer over and over reads it from L2 (50-60 MB on an
H100 or H200, more than a 3B model's largest int4 layer) and ranks kernels by L2 bandwidth instead.
`cold_copies` makes enough copies of a layer that, called in turn, at least two L2 sizes of weights
were read between two calls of one copy (its own included: a layer that large evicts its own start).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Sequence
from typing import Optional

import torch
from torch import nn

COLD_FACTOR = 2  # bytes read between two calls of one copy, in L2 sizes
MAX_COPIES = 64  # a layer of a few KB is timed warm rather than copied without end


def held_tensors(module: nn.Module) -> Iterator[torch.Tensor]:
    """Every tensor `module` and its submodules hold: parameters, buffers, and tensors in a list or tuple
    attribute (what named_parameters and named_buffers do not list: cuda_linear.TritonQ8Head's codes)."""
    for m in module.modules():
        yield from m.parameters(recurse=False)
        yield from (b for b in m.buffers(recurse=False) if b is not None)
        for value in vars(m).values():
            if isinstance(value, (list, tuple)):
                yield from (v for v in value if isinstance(v, torch.Tensor))


def tensor_key(t: torch.Tensor) -> tuple[int, int]:
    """(address, bytes): two holders of one tensor, or of the same view of it, give one key."""
    return t.data_ptr(), t.numel() * t.element_size()


def module_bytes(module: nn.Module) -> int:
    """The bytes a call of `module` reads from the tensors it holds (held_tensors), each once."""
    return sum(n for _, n in {tensor_key(t) for t in held_tensors(module)})


def copies_needed(nbytes: int, l2_bytes: int) -> int:
    """How many copies of `nbytes` of weights, called in turn, keep every call's weights out of L2: n with
    n · nbytes >= COLD_FACTOR · l2_bytes (at most MAX_COPIES)."""
    if nbytes <= 0:
        return 1
    return max(1, min(MAX_COPIES, -(-COLD_FACTOR * l2_bytes // nbytes)))


def cold_copies(module: nn.Module, l2_bytes: int) -> list[nn.Module]:
    """`module` and deep copies of it (each with tensors of its own) enough for copies_needed."""
    n = copies_needed(module_bytes(module), l2_bytes)
    return [module] + [copy.deepcopy(module) for _ in range(n - 1)]


def l2_bytes(device: torch.device | str | int = 0) -> int:
    """The device's L2 cache size (torch's device properties; 0 where it does not say)."""
    return int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 0)


def time_us(fn: Callable[[], object] | Sequence[Callable[[], object]], calls: int = 20, reps: int = 5) -> float:
    """The GPU time of one call in microseconds: `calls` calls captured in a CUDA graph (the decode graphs'
    cost, without Python's launch cost between calls), the graph replayed `reps` times between CUDA
    events; eagerly between events where a capture fails. `fn` a sequence: called in turn, round after
    round, at least `calls` calls (cold_copies' layers: each call's weights cold in L2)."""
    fns = list(fn) if isinstance(fn, Sequence) else [fn]
    calls = -(-max(calls, len(fns)) // len(fns)) * len(fns)
    for f in fns:  # compiled, allocator settled
        f()
        f()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    graph: Optional[torch.cuda.CUDAGraph] = None
    try:
        graph = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side), torch.cuda.graph(graph, stream=side):
            for i in range(calls):
                fns[i % len(fns)]()
        torch.cuda.current_stream().wait_stream(side)
        graph.replay()
    except RuntimeError:  # (a kernel that cannot be captured: timed eagerly, launches included)
        graph = None
    torch.cuda.synchronize()
    start.record()
    for _ in range(reps):
        if graph is not None:
            graph.replay()
        else:
            for i in range(calls):
                fns[i % len(fns)]()
    end.record()
    torch.cuda.synchronize()
    return 1000 * start.elapsed_time(end) / (reps * calls)


def time_layer_cold_us(layer: nn.Module, x: torch.Tensor, l2: Optional[int] = None) -> float:
    """One call of `layer(x)` with its weights cold in L2 (cold_copies), as time_us times it."""
    l2 = l2_bytes(x.device) if l2 is None else l2
    layers = cold_copies(layer, l2)
    try:
        return time_us([lambda m=m: m(x) for m in layers])
    finally:
        del layers
