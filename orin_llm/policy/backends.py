"""What runs one policy step: onnxruntime on a CPU here, TensorRT + pycuda on a CUDA device
(tensorrt.py). Both take the same ONNX file and feed it the same synthetic observation, so a
tick costs what the model costs and nothing else.

Backend choice is explicit: `auto` picks TensorRT where tensorrt, pycuda and a CUDA device are all
there and onnxruntime otherwise, and the runner's output names the backend that ran; asking for
`tensorrt` where it cannot run is an error, never a quiet fallback to the CPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Protocol

import numpy as np

from ..errors import OrinError
from .inputs import ShapeRange, input_specs, require_onnx, synthetic_inputs

BACKENDS = ("auto", "onnxruntime", "tensorrt")


class PolicyBackend(Protocol):
    name: str  # onnxruntime | tensorrt
    device: str  # cpu, or the CUDA device's name

    def step(self) -> np.ndarray: ...  # one inference on the current observation; the first output

    def device_bytes(self) -> int: ...  # device memory this backend took (0 on a CPU)

    def close(self) -> None: ...


class OnnxRuntimePolicy:
    """onnxruntime's CPU execution provider with `threads` intra-op threads that do not spin: between
    ticks the policy sleeps instead of burning the core the planner may need."""

    name = "onnxruntime"
    device = "cpu"

    def __init__(self, path: str | Path, threads: int = 1, seed: int = 0,
                 shapes: Optional[dict[str, tuple[int, ...]]] = None, ranges: Optional[dict[str, ShapeRange]] = None):
        try:
            import onnxruntime as ort
        except ImportError:
            raise OrinError("onnxruntime is not installed: pip install 'orin-llm[policy]'") from None
        if threads < 1:
            raise OrinError(f"--threads {threads}: give at least 1")
        path = require_onnx(path)
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        try:
            self.session = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        except Exception as e:  # onnxruntime raises its own Fail / NotImplemented / InvalidGraph types
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            hint = (" (a float16 policy: onnxruntime's CPU provider lacks float16 kernels for some operators; "
                    "export it in float32 for a CPU)" if "float16" in first.lower() or "(16)" in first else "")
            raise OrinError(f"onnxruntime cannot load {path}: {first}{hint}") from None
        self.feed = synthetic_inputs(input_specs(path, shapes, ranges), seed)

    def step(self) -> np.ndarray:
        return self.session.run(None, self.feed)[0]

    def device_bytes(self) -> int:
        return 0

    def close(self) -> None:
        self.session = None


def open_backend(name: str, path: str | Path, threads: int = 1, stream_priority: str = "high",
                 cache_dir: Optional[Path] = None, shapes: Optional[dict[str, tuple[int, ...]]] = None,
                 ranges: Optional[dict[str, ShapeRange]] = None) -> PolicyBackend:
    """shapes / ranges: what the runner feeds a dynamic input (inputs.py); TensorRT builds its profile from them."""
    if name not in BACKENDS:
        raise OrinError(f"policy backend {name!r}: choose {', '.join(BACKENDS)}")
    from . import trt_bindings

    if name == "auto":
        name = "tensorrt" if trt_bindings.usable() else "onnxruntime"
    if name == "onnxruntime":
        return OnnxRuntimePolicy(path, threads=threads, shapes=shapes, ranges=ranges)
    from .tensorrt import TensorRTPolicy

    return TensorRTPolicy(path, stream_priority=stream_priority, cache_dir=cache_dir, shapes=shapes, ranges=ranges)
