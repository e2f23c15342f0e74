"""A fake `tensorrt` (TensorRT 10.3's Python API) with what the policy's TensorRT backend calls.

Class, method and keyword names are those of NVIDIA/TensorRT v10.3.0 (python/src/infer/pyCore.cpp,
python/src/parsers/pyOnnx.cpp, python/packaging/bindings_wheel/tensorrt/__init__.py for `nptype`);
Python's own argument checking rejects an unknown keyword, as pybind11 does. Return values and
refusals follow the documented contract (include/NvInferRuntime.h, NvInfer.h): `parse_from_file` and
`set_tensor_address` and `execute_async_v3` return False on failure (an I/O tensor without an address
is one: "each input must have a non-null address and each output must have a non-null address"),
`build_serialized_network` and `deserialize_cuda_engine` return None. The logged text of TensorRT's
own errors is not reproduced: TensorRT's core is closed source.

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


class INetworkDefinition:
    def __init__(self, flags):
        self.flags = flags
        self.onnx = None


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

    def build_serialized_network(self, network, config):
        CALLS.append(("build_serialized_network", {"network": network, "config": config}))
        if network.onnx is None:  # an empty network: TensorRT logs an error and returns nullptr
            return None
        body = {"onnx": network.onnx, "fp16": BuilderFlag.FP16 in config.flags}
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
        feed = {}
        for name in e._names:
            mode, shape, dtype = e._io[name]
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
