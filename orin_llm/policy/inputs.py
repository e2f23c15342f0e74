"""A policy's inputs as its ONNX graph declares them, the shapes the runner feeds them, and one synthetic
observation: what every policy backend (backends.py, tensorrt.py) reads before it runs a step.

Most exported policies have dynamic axes (a batch of -1, sometimes a sequence). The runner feeds one
shape per input: a dynamic leading axis runs as 1, and any dynamic axis can be stated
(`--input-shape NAME=1x3x224x224`) or given a range (`--input-range NAME=MIN:OPT:MAX`, each DxDx...), of
which the runner feeds OPT. TensorRT builds such a policy with one optimization profile: the stated
range, or min = opt = max = the shape the runner feeds (tensorrt.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from ..errors import OrinError


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: np.dtype
    shape: tuple[int, ...]  # -1 for a dynamic axis in graph_inputs(); concrete in input_specs()


@dataclass(frozen=True)
class ShapeRange:
    """An optimization profile's shapes for one input (TensorRT's IOptimizationProfile.set_shape)."""

    min: tuple[int, ...]
    opt: tuple[int, ...]
    max: tuple[int, ...]

    def as_list(self) -> list[list[int]]:
        return [list(self.min), list(self.opt), list(self.max)]


def parse_dims(text: str) -> tuple[int, ...]:
    """`1x3x224x224` → (1, 3, 224, 224); every axis a positive integer."""
    try:
        dims = tuple(int(d) for d in text.strip().lower().split("x"))
    except ValueError:
        dims = ()
    if not dims or any(d < 1 for d in dims):
        raise OrinError(f"shape {text!r}: give positive axis sizes joined by x, e.g. 1x3x224x224")
    return dims


def parse_shape_option(text: str) -> tuple[str, tuple[int, ...]]:
    """`--input-shape NAME=1x3x224x224`."""
    name, sep, dims = text.partition("=")
    if not sep or not name:
        raise OrinError(f"--input-shape {text!r}: write NAME=DxDx..., e.g. image=1x3x224x224")
    return name, parse_dims(dims)


def parse_range_option(text: str) -> tuple[str, ShapeRange]:
    """`--input-range NAME=MIN:OPT:MAX`, each shape DxDx...; min <= opt <= max on every axis."""
    name, sep, rest = text.partition("=")
    parts = rest.split(":")
    if not sep or not name or len(parts) != 3:
        raise OrinError(f"--input-range {text!r}: write NAME=MIN:OPT:MAX, e.g. state=1x32:4x32:8x32")
    lo, opt, hi = (parse_dims(p) for p in parts)
    if not len(lo) == len(opt) == len(hi) or any(not a <= b <= c for a, b, c in zip(lo, opt, hi, strict=True)):
        raise OrinError(f"--input-range {text!r}: min, opt and max need the same axes with min <= opt <= max")
    return name, ShapeRange(lo, opt, hi)


def require_onnx(path: str | Path) -> Path:
    path = Path(path)
    if not path.is_file():
        raise OrinError(f"policy {path} not found; make a stand-in with "
                        f"python -m orin_llm.policy.standin --shape cpu --out {path}")
    return path


def graph_inputs(path: str | Path) -> list[TensorSpec]:
    """The graph's inputs (initializers excluded), read without loading the weights; -1 for a dynamic axis."""
    import onnx
    from onnx import helper

    path = require_onnx(path)
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as e:  # protobuf DecodeError and friends
        raise OrinError(f"policy {path}: not a readable ONNX model ({type(e).__name__})") from None
    inits = {t.name for t in model.graph.initializer}
    specs = []
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        t = vi.type.tensor_type
        dims = tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else -1 for d in t.shape.dim)
        specs.append(TensorSpec(vi.name, np.dtype(helper.tensor_dtype_to_np_dtype(t.elem_type)), dims))
    return specs


def _fits(graph: tuple[int, ...], shape: tuple[int, ...]) -> bool:
    return len(graph) == len(shape) and all(g in (-1, s) for g, s in zip(graph, shape, strict=True))


def input_specs(path: str | Path, shapes: Optional[dict[str, tuple[int, ...]]] = None,
                ranges: Optional[dict[str, ShapeRange]] = None) -> list[TensorSpec]:
    """The shape the runner feeds each input: a range's opt, a stated shape, the graph's fixed one, or 1 for a
    dynamic leading axis; another dynamic axis without a stated shape or range is refused."""
    shapes, ranges = shapes or {}, ranges or {}
    graph = graph_inputs(path)
    unknown = sorted((set(shapes) | set(ranges)) - {g.name for g in graph})
    if unknown:
        raise OrinError(f"policy {path}: no input named {', '.join(map(repr, unknown))}; its inputs are "
                        f"{', '.join(g.name + str(list(g.shape)) for g in graph)}")
    specs = []
    for g in graph:
        stated = ranges[g.name].opt if g.name in ranges else shapes.get(g.name)
        if stated is not None:
            if not _fits(g.shape, stated):
                raise OrinError(f"policy {path}: input {g.name!r} is {list(g.shape)} (-1: dynamic); the stated "
                                f"shape {list(stated)} does not fit it")
            shape = stated
        else:
            shape = tuple(1 if d == -1 and i == 0 else d for i, d in enumerate(g.shape))
            if -1 in shape:
                i = shape.index(-1)
                raise OrinError(f"policy {path}: input {g.name!r} has dynamic axis {i} ({list(g.shape)}); state the "
                                f"shape the robot feeds it: --input-shape {g.name}=" + "x".join(
                                    str(d) if d > 0 else "N" for d in shape) + " (or a range: --input-range "
                                f"{g.name}=MIN:OPT:MAX)")
        specs.append(TensorSpec(g.name, g.dtype, shape))
    return specs


def profile_ranges(path: str | Path, shapes: Optional[dict[str, tuple[int, ...]]] = None,
                   ranges: Optional[dict[str, ShapeRange]] = None) -> dict[str, ShapeRange]:
    """One optimization profile for the graph's dynamic inputs: the stated range, else min = opt = max = the
    shape the runner feeds. Empty for a policy with fixed shapes."""
    ranges = ranges or {}
    fed = {s.name: s.shape for s in input_specs(path, shapes, ranges)}
    out = {}
    for g in graph_inputs(path):
        if -1 in g.shape:
            r = ranges.get(g.name) or ShapeRange(fed[g.name], fed[g.name], fed[g.name])
            if not (_fits(g.shape, r.min) and _fits(g.shape, r.max)):
                raise OrinError(f"policy {path}: input {g.name!r} is {list(g.shape)}; the range {r.as_list()} "
                                "changes its fixed axes")
            out[g.name] = r
    return out


def synthetic_inputs(specs: list[TensorSpec], seed: int = 0) -> dict[str, np.ndarray]:
    """One observation: normal noise for float inputs, zeros (always a valid index) for integer ones."""
    rng = np.random.default_rng(seed)
    feed = {}
    for s in specs:
        if np.issubdtype(s.dtype, np.floating):
            feed[s.name] = rng.standard_normal(s.shape, dtype=np.float32).astype(s.dtype)
        else:
            feed[s.name] = np.zeros(s.shape, dtype=s.dtype)
    return feed
