"""A policy's inputs as its ONNX graph declares them, and one synthetic observation to feed them:
what every policy backend (backends.py, tensorrt.py) reads before it runs a step."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import OrinError


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: np.dtype
    shape: tuple[int, ...]


def require_onnx(path: str | Path) -> Path:
    path = Path(path)
    if not path.is_file():
        raise OrinError(f"policy {path} not found; make a stand-in with "
                        f"python -m orin_llm.policy.standin --shape cpu --out {path}")
    return path


def input_specs(path: str | Path) -> list[TensorSpec]:
    """The graph's inputs (initializers excluded), read without loading the weights. A leading
    dynamic dimension is the batch and runs as 1; any other dynamic dimension is refused."""
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
        dims = []
        for i, d in enumerate(t.shape.dim):
            if d.HasField("dim_value") and d.dim_value > 0:
                dims.append(d.dim_value)
            elif i == 0:
                dims.append(1)
            else:
                raise OrinError(f"policy {path}: input {vi.name!r} has dynamic dimension {i} "
                                f"({d.dim_param or '?'}); the runner needs fixed shapes: export the policy with "
                                "the shapes the robot feeds it")
        specs.append(TensorSpec(vi.name, np.dtype(helper.tensor_dtype_to_np_dtype(t.elem_type)), tuple(dims)))
    return specs


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
