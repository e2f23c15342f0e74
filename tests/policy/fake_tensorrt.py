"""A fake `tensorrt` (TensorRT 10.3's Python API) with what the policy's TensorRT backend calls.

Class, method and keyword names are those of NVIDIA/TensorRT v10.3.0 (python/src/infer/pyCore.cpp,
python/src/parsers/pyOnnx.cpp, python/packaging/bindings_wheel/tensorrt/__init__.py for `nptype`);
Python's own argument checking rejects an unknown keyword, as pybind11 does. Return values and
refusals follow the documented contract (include/NvInferRuntime.h, NvInfer.h): `parse_from_file` and
`set_tensor_address` and `execute_async_v3` return False on failure (an I/O tensor without an address
is one: "each input must have a non-null address and each output must have a non-null address"),
`build_serialized_network` and `deserialize_cuda_engine` return None. The logged text of TensorRT's
own errors is not reproduced: TensorRT's core is closed source.

Dynamic shapes as TensorRT 10.3 has them: a parsed network's inputs carry -1 for a dynamic axis
(INetworkDefinition.num_inputs/get_input, ITensor.name/.shape: pyGraph.cpp); a network with a dynamic
input and no optimization profile does not build (NvInferRuntime.h, IOptimizationProfile: "users need
to specify at least one optimization profile"), nor does a profile whose shapes leave a fixed axis or
are not min <= opt <= max (set_shape raises RuntimeError "Shape provided for min is inconsistent with
other shapes.", pyCore.cpp opt_profile_set_shape); the engine keeps -1 in get_tensor_shape, the
execution context takes set_input_shape within the profile (False outside it) and enqueues only with
every dynamic input's shape set.

The "engine" runs the ONNX file with onnxruntime, reading its inputs from and writing its outputs to
fake_pycuda's device memory at the addresses the caller set, so a wrong address or a missing copy
shows up in the numbers. CALLS records (method, arguments) for the tests.
"""

from __future__ import annotations

import enum
import json
from pathlib import Path

import numpy as np

from . import fake_pycuda

__version__ = "10.3.0"
CALLS: list[tuple[str, dict]] = []
LOG: list[str] = []
PLAN_MAGIC = b"FAKE-TRT-10.3-PLAN\n"
FAST_FP16 = True


def reset() -> None:
    global FAST_FP16
    CALLS.clear()
    LOG.clear()
    FAST_FP16 = True


def calls(name: str) -> list[dict]:
    return [kw for n, kw in CALLS if n == name]


class DataType(enum.Enum):  # pyFoundationalTypes.cpp
    FLOAT = 0
    HALF = 1
    INT8 = 2
    INT32 = 3
    BOOL = 4
    UINT8 = 5
    INT64 = 9


float32, float16, int8, int32, int64 = DataType.FLOAT, DataType.HALF, DataType.INT8, DataType.INT32, DataType.INT64
bool = DataType.BOOL  # noqa: A001 - tensorrt/__init__.py exports `bool` the same way
uint8 = DataType.UINT8
_NP = {DataType.FLOAT: np.float32, DataType.HALF: np.float16, DataType.INT8: np.int8, DataType.INT32: np.int32,
       DataType.INT64: np.int64, DataType.BOOL: np.bool_, DataType.UINT8: np.uint8}
_FROM_NP = {np.dtype(v): k for k, v in _NP.items()}


def nptype(trt_type):
    if trt_type in _NP:
        return _NP[trt_type]
    raise TypeError("Could not resolve TensorRT datatype to an equivalent numpy datatype.")


class ILogger:
    class Severity(enum.IntEnum):
        INTERNAL_ERROR = 0
        ERROR = 1
        WARNING = 2
        INFO = 3
        VERBOSE = 4

    INTERNAL_ERROR, ERROR, WARNING, INFO, VERBOSE = Severity  # pybind11 exports enum values to the class


class Logger(ILogger):
    def __init__(self, min_severity=ILogger.Severity.WARNING):
        self.min_severity = min_severity

    def log(self, severity, msg):
        if severity <= self.min_severity:
            LOG.append(msg)


class MemoryPoolType(enum.Enum):
    WORKSPACE = 0
    DLA_MANAGED_SRAM = 1
    DLA_LOCAL_DRAM = 2
    DLA_GLOBAL_DRAM = 3
    TACTIC_DRAM = 4
    TACTIC_SHARED_MEMORY = 5


class BuilderFlag(enum.Enum):
    FP16 = 0
    INT8 = 1
    DEBUG = 2
    GPU_FALLBACK = 3
    REFIT = 5
    TF32 = 7
    BF16 = 17


class TensorIOMode(enum.Enum):
    NONE = 0
    INPUT = 1
    OUTPUT = 2


class ExecutionContextAllocationStrategy(enum.Enum):
    STATIC = 0
    ON_PROFILE_CHANGE = 1
    USER_MANAGED = 2


class ITensor:
    def __init__(self, name: str, shape: tuple):
        self.name, self.shape = name, shape


class INetworkDefinition:
    def __init__(self, flags):
        self.flags = flags
        self.onnx = None
        self._inputs: list[ITensor] = []

    @property
    def num_inputs(self):
        return len(self._inputs)

    def get_input(self, index):
        return self._inputs[index]


def _onnx_inputs(path: str) -> list[ITensor]:
    import onnx

    model = onnx.load(path, load_external_data=False)
    inits = {t.name for t in model.graph.initializer}
    return [ITensor(vi.name, tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else -1
                                   for d in vi.type.tensor_type.shape.dim))
            for vi in model.graph.input if vi.name not in inits]


class IOptimizationProfile:
    def __init__(self):
        self.shapes: dict[str, tuple] = {}

    def set_shape(self, input, min, opt, max):  # noqa: A002 - pyCore.cpp's keyword names
        CALLS.append(("set_shape", {"input": input, "min": tuple(min), "opt": tuple(opt), "max": tuple(max)}))
        lo, mid, hi = tuple(min), tuple(opt), tuple(max)
        if not (len(lo) == len(mid) == len(hi)) or any(not a <= b <= c for a, b, c in zip(lo, mid, hi, strict=True)):
            raise RuntimeError("Shape provided for min is inconsistent with other shapes.")
        self.shapes[input] = (lo, mid, hi)

    def get_shape(self, input):  # noqa: A002
        return list(self.shapes.get(input, ()))


class ParserError:
    def __init__(self, desc: str):
        self._desc = desc

    def desc(self):
        return self._desc

    def __str__(self):
        return f"In node -1 with name:  and operator:  (parseFromFile): {self._desc}"


class OnnxParser:
    def __init__(self, network, logger):
        CALLS.append(("OnnxParser", {"network": network, "logger": logger}))
        self.network, self.logger = network, logger
        self._errors: list[ParserError] = []

    def parse_from_file(self, model):
        CALLS.append(("parse_from_file", {"model": model}))
        import onnx

        try:
            onnx.checker.check_model(str(model))  # the file, with its external data next to it
        except Exception as e:  # FileNotFoundError, ValidationError, DecodeError
            self._errors.append(ParserError(f"Failed to parse the ONNX file {model}: {type(e).__name__}"))
            return False
        self.network.onnx = str(model)
        self.network._inputs = _onnx_inputs(str(model))
        return True

    @property
    def num_errors(self):
        return len(self._errors)

    def get_error(self, index):
        return self._errors[index]


class IBuilderConfig:
    def __init__(self):
        self.pools: dict = {}
        self.flags: set = set()
        self.profiles: list[IOptimizationProfile] = []

    def add_optimization_profile(self, profile):
        CALLS.append(("add_optimization_profile", {"profile": profile}))
        if not profile.shapes:  # NvInfer.h: -1 if the profile is not valid
            return -1
        self.profiles.append(profile)
        return len(self.profiles) - 1

    def set_memory_pool_limit(self, pool, pool_size):
        CALLS.append(("set_memory_pool_limit", {"pool": pool, "pool_size": pool_size}))
        self.pools[pool] = pool_size

    def set_flag(self, flag):
        CALLS.append(("set_flag", {"flag": flag}))
        self.flags.add(flag)

    def get_flag(self, flag):
        return flag in self.flags


class IHostMemory(bytes):
    @property
    def nbytes(self):
        return len(self)


class Builder:
    def __init__(self, logger):
        CALLS.append(("Builder", {"logger": logger}))
        self.logger = logger

    @property
    def platform_has_fast_fp16(self):
        return FAST_FP16

    def create_network(self, flags=0):
        CALLS.append(("create_network", {"flags": flags}))
        return INetworkDefinition(flags)

    def create_builder_config(self):
        return IBuilderConfig()

    def create_optimization_profile(self):
        CALLS.append(("create_optimization_profile", {}))
        return IOptimizationProfile()

    def build_serialized_network(self, network, config):
        CALLS.append(("build_serialized_network", {"network": network, "config": config}))
        if network.onnx is None:  # an empty network: TensorRT logs an error and returns nullptr
            return None
        profile = config.profiles[0].shapes if config.profiles else {}
        for t in network._inputs:
            if -1 not in t.shape:
                continue
            if t.name not in profile:  # a dynamic input needs a profile (NvInferRuntime.h): nullptr
                LOG.append(f"fake: dynamic input {t.name} {t.shape} has no optimization profile")
                return None
            if any(not all(g in (-1, d) for g, d in zip(t.shape, s, strict=True)) or len(s) != len(t.shape)
                   for s in profile[t.name]):
                LOG.append(f"fake: profile {profile[t.name]} does not fit {t.name} {t.shape}")
                return None
        body = {"onnx": network.onnx, "fp16": BuilderFlag.FP16 in config.flags,
                "profile": {n: [list(x) for x in s] for n, s in profile.items()}}
        return IHostMemory(PLAN_MAGIC + json.dumps(body).encode())


class Runtime:
    def __init__(self, logger):
        self.logger = logger

    def deserialize_cuda_engine(self, serialized_engine):
        CALLS.append(("deserialize_cuda_engine", {"bytes": len(serialized_engine)}))
        blob = bytes(serialized_engine)
        if not blob.startswith(PLAN_MAGIC):
            return None  # NvInferRuntime.h: nullptr if it could not be deserialized
        return ICudaEngine(json.loads(blob[len(PLAN_MAGIC):]))


class ICudaEngine:
    def __init__(self, body: dict):
        import onnxruntime as ort

        self.onnx = body["onnx"]
        self.fp16 = body["fp16"]
        self.profile = {n: tuple(tuple(x) for x in s) for n, s in body.get("profile", {}).items()}
        self._session = ort.InferenceSession(self.onnx, providers=["CPUExecutionProvider"])
        io = [(t, TensorIOMode.INPUT) for t in self._session.get_inputs()]
        io += [(t, TensorIOMode.OUTPUT) for t in self._session.get_outputs()]
        self._io = {t.name: (mode, tuple(d if isinstance(d, int) else -1 for d in t.shape), _ort_dtype(t.type))
                    for t, mode in io}
        self._names = list(self._io)

    @property
    def num_io_tensors(self):
        return len(self._names)

    def get_tensor_name(self, index):
        return self._names[index]

    def get_tensor_mode(self, name):
        return self._io[name][0] if name in self._io else TensorIOMode.NONE

    def get_tensor_shape(self, name):
        return self._io[name][1]

    def get_tensor_dtype(self, name):
        return self._io[name][2]

    def get_tensor_profile_shape(self, name, profile_index):
        if profile_index != 0 or name not in self.profile:
            return []
        return list(self.profile[name])

    @property
    def device_memory_size_v2(self):
        return 64 * 2**20

    def create_execution_context(self, strategy=ExecutionContextAllocationStrategy.STATIC):
        CALLS.append(("create_execution_context", {"strategy": strategy}))
        return IExecutionContext(self)


def _ort_dtype(type_str: str) -> DataType:
    return {"tensor(float)": DataType.FLOAT, "tensor(float16)": DataType.HALF, "tensor(int64)": DataType.INT64,
            "tensor(int32)": DataType.INT32, "tensor(bool)": DataType.BOOL}[type_str]


class IExecutionContext:
    def __init__(self, engine: ICudaEngine):
        self.engine = engine
        self.addresses: dict[str, int] = {}
        self.input_shapes: dict[str, tuple] = {}

    def set_input_shape(self, name, shape):
        CALLS.append(("set_input_shape", {"name": name, "shape": tuple(shape)}))
        e, shape = self.engine, tuple(shape)
        if e.get_tensor_mode(name) != TensorIOMode.INPUT:
            return False  # NvInferRuntime.h: false if the name does not map to an input tensor
        graph = e._io[name][1]
        if len(shape) != len(graph) or any(g not in (-1, d) for g, d in zip(graph, shape, strict=True)):
            return False
        if name in e.profile:
            lo, _, hi = e.profile[name]
            if any(not a <= d <= b for a, d, b in zip(lo, shape, hi, strict=True)):
                return False  # outside the profile
        self.input_shapes[name] = shape
        return True

    def _shapes(self) -> dict[str, tuple]:
        """Every I/O tensor's shape in this context: -1 where an input's is not set (and its outputs')."""
        e = self.engine
        ins = {n: self.input_shapes.get(n, e._io[n][1]) for n in e._names if e._io[n][0] == TensorIOMode.INPUT}
        outs = [n for n in e._names if e._io[n][0] == TensorIOMode.OUTPUT]
        if any(-1 in s for s in ins.values()):
            return {**ins, **{n: e._io[n][1] for n in outs}}
        feed = {n: np.zeros(s, nptype(e._io[n][2])) for n, s in ins.items()}
        values = e._session.run(None, feed)
        return {**ins, **{n: tuple(v.shape) for n, v in zip(outs, values, strict=True)}}

    def get_tensor_shape(self, name):
        return self._shapes().get(name, ())

    def set_tensor_address(self, name, memory):
        CALLS.append(("set_tensor_address", {"name": name, "memory": memory}))
        if self.engine.get_tensor_mode(name) == TensorIOMode.NONE:
            return False  # NvInferRuntime.h: false if the name does not map to an input or output tensor
        self.addresses[name] = memory
        return True

    def execute_async_v3(self, stream_handle):
        CALLS.append(("execute_async_v3", {"stream_handle": stream_handle}))
        e = self.engine
        if any(not self.addresses.get(n) for n in e._names):
            return False  # every input and output needs a non-null address before enqueueV3
        shapes = self._shapes()
        if any(-1 in shapes[n] for n in e._names if e._io[n][0] == TensorIOMode.INPUT):
            return False  # a dynamic input's shape was never set (all_binding_shapes_specified is false)
        feed = {}
        for name in e._names:
            mode, _, dtype = e._io[name]
            shape = shapes[name]
            if mode != TensorIOMode.INPUT:
                continue
            nbytes = int(np.prod(shape)) * np.dtype(nptype(dtype)).itemsize
            buf, off = fake_pycuda._region(self.addresses[name], nbytes, "enqueueV3")
            feed[name] = np.frombuffer(bytes(buf[off:off + nbytes]), dtype=nptype(dtype)).reshape(shape)
        outs = e._session.run(None, feed)
        for name, value in zip([n for n in e._names if e._io[n][0] == TensorIOMode.OUTPUT], outs, strict=True):
            raw = np.ascontiguousarray(value).tobytes()
            buf, off = fake_pycuda._region(self.addresses[name], len(raw), "enqueueV3")
            buf[off:off + len(raw)] = raw
        return True


def plan_onnx(plan_file: Path) -> str:
    """The ONNX file a fake plan was built from (for tests)."""
    return json.loads(plan_file.read_bytes()[len(PLAN_MAGIC):])["onnx"]
