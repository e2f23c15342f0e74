"""The policy on a CUDA device: a TensorRT engine built from the ONNX file, run on a prioritized
stream with buffers from pycuda. Every call is TensorRT 10.3's Python API (NVIDIA/TensorRT at
v10.3.0; "pyCore.cpp" below is python/src/infer/pyCore.cpp, "pyOnnx.cpp" python/src/parsers/
pyOnnx.cpp, "NvInferRuntime.h" include/NvInferRuntime.h) or pycuda's (inducer/pycuda
src/wrapper/wrap_cudadrv.cpp), all reached through trt_bindings.bindings().

Per tick: copy the observation to the device (cuMemcpyHtoD), enqueue the engine on the policy's
stream (execute_async_v3), copy the action chunk back (cuMemcpyDtoH). The synchronous copies run
on the legacy default stream, which waits for the policy's (blocking) stream and is waited for by
it, so no other synchronization is needed and the action is on the host when step() returns.
Stream priorities act on compute kernels only, not on copies (CUDA Driver API,
cuStreamCreateWithPriority), and only among the streams of one CUDA context: they put the policy's
kernels first within this process, not ahead of the planner daemon's, which has its own context
(see jetson/GUIDE.md for what does protect the policy there).

The engine is built once per ONNX file, optimization profile, TensorRT version and GPU, and cached as a
.plan file: on the Orin a 0.4 B-parameter policy takes minutes to build. A policy with dynamic axes
gets one optimization profile (inputs.py: the stated ranges, or the shape the runner feeds), as
NvInferRuntime.h's IOptimizationProfile says a network with dynamic inputs must; the runner sets the
shape it feeds (set_input_shape) before it allocates anything.

Memory: what this process allocated for the policy, not a free-memory difference (on unified memory
that difference moves with the page cache and every other process): the engine (the plan's bytes,
its weights and kernels, deserialized into device memory), the execution context's scratch
(device_memory_size_v2, allocated by create_execution_context's default kSTATIC strategy) and our
I/O buffers. The CUDA context itself is not visible to TensorRT; the process's RSS holds its
host side.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Optional

import numpy as np

from ..errors import OrinError
from .inputs import ShapeRange, TensorSpec, profile_ranges, require_onnx, synthetic_inputs
from .trt_bindings import bindings

WORKSPACE_BYTES = 1 << 30  # TensorRT's tactic scratch while building; the engine's own need is measured
PRIORITIES = ("high", "default")


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-").lower()


def plan_path(onnx: Path, cache_dir: Path, trt_version: str, device: str,
              ranges: Optional[dict[str, ShapeRange]] = None) -> Path:
    """Where the engine for this ONNX file (as it is now), optimization profile, TensorRT version and GPU
    is cached."""
    st = onnx.stat()
    data = onnx.with_name(onnx.name + ".data")
    key = f"{onnx.resolve()}|{st.st_size}|{st.st_mtime_ns}"
    if ranges:
        key += "|" + ";".join(f"{n}={r.as_list()}" for n, r in sorted(ranges.items()))
    if data.is_file():
        key += f"|{data.stat().st_size}|{data.stat().st_mtime_ns}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return cache_dir / f"{onnx.stem}-{digest}-trt{trt_version}-{_slug(device)}.plan"


def build_plan(trt, onnx: Path, fp16: bool = True, ranges: Optional[dict[str, ShapeRange]] = None) -> bytes:
    """ONNX → serialized engine, as TensorRT 10.3's samples do it
    (samples/python/introductory_parser_samples/onnx_resnet50.py, build_engine_onnx), with one optimization
    profile over the network's dynamic inputs."""
    logger = trt.Logger(trt.Logger.WARNING)  # pyCore.cpp: Logger(min_severity=Severity.kWARNING)
    builder = trt.Builder(logger)  # pyCore.cpp: Builder(logger)
    network = builder.create_network(0)  # pyCore.cpp: create_network(flags=0); explicit batch is the only mode in 10
    parser = trt.OnnxParser(network, logger)  # pyOnnx.cpp: OnnxParser(network, logger)
    # parse_from_file reads external data relative to the model's directory (pyOnnx.cpp: parse_from_file(model))
    if not parser.parse_from_file(str(onnx)):
        # pyOnnx.cpp: num_errors, get_error(index)
        errors = [str(parser.get_error(i)) for i in range(parser.num_errors)]
        raise OrinError(f"TensorRT's ONNX parser refused {onnx}: " + ("; ".join(errors) or "no error recorded"))
    config = builder.create_builder_config()  # pyCore.cpp: create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, WORKSPACE_BYTES)  # pyCore.cpp: (pool, pool_size)
    if fp16 and builder.platform_has_fast_fp16:  # pyCore.cpp: platform_has_fast_fp16
        config.set_flag(trt.BuilderFlag.FP16)  # pyCore.cpp: set_flag(flag); BuilderFlag.FP16
    _add_profile(trt, builder, network, config, onnx, ranges or {})
    plan = builder.build_serialized_network(network, config)  # pyCore.cpp: build_serialized_network(network, config)
    if plan is None:  # NvInfer.h: buildSerializedNetwork returns nullptr on failure
        raise OrinError(f"TensorRT could not build an engine from {onnx}; its log above says why")
    return bytes(plan)  # IHostMemory supports the buffer protocol


def _add_profile(trt, builder, network, config, onnx: Path, ranges: dict[str, ShapeRange]) -> None:
    """NvInferRuntime.h (IOptimizationProfile): a network with a dynamic input needs at least one profile.
    Its inputs as TensorRT parsed them (pyGraph.cpp: INetworkDefinition.num_inputs, get_input(index);
    ITensor.name, .shape), each dynamic one given its range."""
    dynamic = []
    for i in range(network.num_inputs):
        t = network.get_input(i)
        if any(d < 0 for d in tuple(t.shape)):
            dynamic.append(t.name)
    if not dynamic:
        return
    missing = [n for n in dynamic if n not in ranges]
    if missing:  # our reading of the graph (inputs.py) and TensorRT's disagree: say so rather than guess
        raise OrinError(f"{onnx}: TensorRT parsed dynamic inputs {missing} that the runner has no shape for; "
                        "state them: --input-shape NAME=DxDx... or --input-range NAME=MIN:OPT:MAX")
    profile = builder.create_optimization_profile()  # pyCore.cpp: Builder.create_optimization_profile()
    for name in dynamic:
        r = ranges[name]
        try:  # pyCore.cpp: set_shape(input, min, opt, max); RuntimeError if they are inconsistent
            profile.set_shape(name, r.min, r.opt, r.max)
        except RuntimeError as e:
            raise OrinError(f"{onnx}: TensorRT refused the shapes {r.as_list()} for input {name!r}: {e}") from None
    # pyCore.cpp: add_optimization_profile(profile); NvInfer.h: the profile's index, or -1 if it is not valid
    if config.add_optimization_profile(profile) < 0:
        raise OrinError(f"{onnx}: TensorRT found the optimization profile {_ranges_text(ranges)} not valid; "
                        "check the ranges against the model's inputs")


def _ranges_text(ranges: dict[str, ShapeRange]) -> str:
    return ", ".join(f"{n}={r.as_list()}" for n, r in sorted(ranges.items()))


class TensorRTPolicy:
    name = "tensorrt"

    def __init__(self, path: str | Path, stream_priority: str = "high", cache_dir: Optional[Path] = None,
                 seed: int = 0, fp16: bool = True, shapes: Optional[dict[str, tuple[int, ...]]] = None,
                 ranges: Optional[dict[str, ShapeRange]] = None):
        if stream_priority not in PRIORITIES:
            raise OrinError(f"--stream-priority {stream_priority!r}: choose {' or '.join(PRIORITIES)}")
        path = require_onnx(path)
        self.ranges = profile_ranges(path, shapes, ranges)  # before any device work: bad shapes fail fast
        b = bindings()
        self.trt, self.cuda, self._streams = b.trt, b.cuda, b.streams
        cuda = self.cuda
        cuda.init()  # wrap_cudadrv.cpp: init(flags=0)
        if cuda.Device.count() < 1:  # wrap_cudadrv.cpp: Device.count()
            raise OrinError("no CUDA device: run the policy with --backend onnxruntime")
        dev = cuda.Device(0)
        self.device = dev.name()
        # The primary context is the one the CUDA runtime (and so TensorRT) uses: one context, one
        # context's memory, shared by pycuda's buffers and TensorRT's engine (wrap_cudadrv.cpp:
        # Device.retain_primary_context(), Context.push()).
        self._ctx = dev.retain_primary_context()
        self._ctx.push()
        self._allocs: list = []
        self._stream = 0
        self.memory: dict[str, int] = {}
        try:
            self._open(path, cache_dir or path.parent / "trt-cache", stream_priority, seed, fp16)
        except BaseException:
            self.close()
            raise

    def _open(self, path: Path, cache_dir: Path, stream_priority: str, seed: int, fp16: bool) -> None:
        trt, cuda = self.trt, self.cuda
        plan_file = plan_path(path, cache_dir, trt.__version__, self.device, self.ranges)
        if plan_file.is_file():
            plan = plan_file.read_bytes()
        else:
            plan = build_plan(trt, path, fp16, self.ranges)
            cache_dir.mkdir(parents=True, exist_ok=True)
            plan_file.write_bytes(plan)
        self.plan_file = plan_file
        self._runtime = trt.Runtime(trt.Logger(trt.Logger.WARNING))  # pyCore.cpp: Runtime(logger)
        engine = self._runtime.deserialize_cuda_engine(plan)  # pyCore.cpp: deserialize_cuda_engine(serialized_engine)
        if engine is None:  # NvInferRuntime.h: "the engine, or nullptr if it could not be deserialized"
            raise OrinError(f"TensorRT could not load {plan_file} (another TensorRT or GPU built it?); delete it "
                            "to rebuild")
        self.engine = engine
        # pyCore.cpp: device_memory_size_v2 (10.1+); NvInferRuntime.h: "the maximum device memory required
        # by the context over all profiles", which create_execution_context (kSTATIC) allocates
        self.activation_bytes = int(engine.device_memory_size_v2)
        self.context = engine.create_execution_context()  # pyCore.cpp: create_execution_context(strategy=kSTATIC)
        names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]  # pyCore.cpp: num_io_tensors
        is_input = {n: engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT for n in names}  # get_tensor_mode(name)
        for name in names:
            # pyCore.cpp: get_tensor_shape(name) -> Dims, -1 where the axis is dynamic
            if is_input[name] and any(d < 0 for d in tuple(engine.get_tensor_shape(name))):
                shape = self.ranges[name].opt if name in self.ranges else None
                # pyCore.cpp: IExecutionContext.set_input_shape(name, shape); NvInferRuntime.h: false if the name
                # is not an input or the shape is outside the profile
                if shape is None or not self.context.set_input_shape(name, shape):
                    raise OrinError(f"{path}: TensorRT refused the input shape {shape} for {name!r} (its profile: "
                                    f"{_ranges_text(self.ranges)}); delete {plan_file} to rebuild")
        inputs, outputs = {}, []
        io_bytes = 0
        for name in names:
            # the context's shapes: the inputs' as set above, the outputs' as they follow from them
            shape = tuple(self.context.get_tensor_shape(name))  # pyCore.cpp: IExecutionContext.get_tensor_shape
            if any(d < 0 for d in shape):
                raise OrinError(f"{path}: tensor {name!r} has the shape {shape} even with every input's shape set "
                                "(a data-dependent output?); the runner needs outputs of a known size")
            dtype = np.dtype(trt.nptype(engine.get_tensor_dtype(name)))  # tensorrt/__init__.py: nptype(trt_type)
            host = cuda.pagelocked_empty(shape, dtype)  # wrap_cudadrv.cpp: pagelocked_empty(shape, dtype, ...)
            device = cuda.mem_alloc(max(1, host.nbytes))  # wrap_cudadrv.cpp: mem_alloc(bytes)
            self._allocs.append(device)
            io_bytes += max(1, host.nbytes)
            # pyCore.cpp: set_tensor_address(name, memory); NvInferRuntime.h: false if the name is not an I/O tensor
            if not self.context.set_tensor_address(name, int(device)):
                raise OrinError(f"TensorRT refused the address of tensor {name!r}")
            if is_input[name]:
                inputs[name] = (host, device)
            else:
                outputs.append((name, host, device))
        self.memory = {"engine": len(plan), "context": self.activation_bytes, "io": io_bytes}
        feed = synthetic_inputs([TensorSpec(n, h.dtype, h.shape) for n, (h, _d) in inputs.items()], seed)
        for name, (host, _dev) in inputs.items():
            host[...] = feed[name]
        self._inputs, self._outputs = list(inputs.values()), outputs
        least, greatest = self._streams.priority_range()
        self.priority = greatest if stream_priority == "high" else 0
        self.priority_range = (least, greatest)
        self._stream = self._streams.create(self.priority)

    def step(self) -> np.ndarray:
        cuda = self.cuda
        for host, device in self._inputs:
            cuda.memcpy_htod(device, host)  # wrap_cudadrv.cpp: memcpy_htod(dest, src)
        # pyCore.cpp: execute_async_v3(stream_handle); NvInferRuntime.h: "True if the kernels were enqueued
        # successfully, false otherwise" (e.g. an input or output without an address)
        if not self.context.execute_async_v3(self._stream):
            raise OrinError("TensorRT could not enqueue the policy (execute_async_v3 returned False); its log says why")
        _name, host, device = self._outputs[0]
        cuda.memcpy_dtoh(host, device)  # waits for the policy's stream: the legacy default stream syncs with it
        for _n, h, d in self._outputs[1:]:
            cuda.memcpy_dtoh(h, d)
        return host

    def device_bytes(self) -> int:
        """What this process allocated for the policy: engine + execution context + I/O buffers (self.memory)."""
        return sum(self.memory.values())

    def close(self) -> None:
        for a in self._allocs:
            a.free()  # wrap_cudadrv.cpp: DeviceAllocation.free()
        self._allocs = []
        if self._stream:
            self._streams.destroy(self._stream)
            self._stream = 0
        if getattr(self, "_ctx", None) is not None:
            self.context = self.engine = None
            self.cuda.Context.pop()  # wrap_cudadrv.cpp: Context.pop() (static)
            self._ctx.detach()  # releases the primary context retained above
            self._ctx = None
