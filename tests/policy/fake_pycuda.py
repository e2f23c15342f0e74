"""A fake `pycuda.driver` with the calls the policy's TensorRT backend makes, for tests.

Names, positional order and keywords are pycuda's (inducer/pycuda src/wrapper/wrap_cudadrv.cpp:
`init(flags=0)`, `Device(ordinal)`, `Device.count()`, `Device.name()`, `Device.retain_primary_context()`,
`Context.push()`, `Context.pop()` (static), `Context.detach()`, `mem_get_info()` → (free, total),
`mem_alloc(bytes)` → DeviceAllocation (int() is the device pointer, `.free()`),
`pagelocked_empty(shape, dtype, order="C", mem_flags=0)`, `memcpy_htod(dest, src)`,
`memcpy_dtoh(dest, src)`). Device memory is a dict of bytearrays by address, so data really travels
host → device → engine → device → host. Like the driver, everything but init/Device needs a current
context, and an error reads as pycuda's do: "<cuFunction> failed: <reason>" (src/cpp/cuda.hpp).
"""

from __future__ import annotations

import numpy as np

TOTAL = 80 * 2**30
MEMORY: dict[int, bytearray] = {}
STATE = {"initialized": False, "stack": [], "next": 0x7F0000000000, "retained": 0, "devices": 1}
CALLS: list[str] = []


def reset(devices: int = 1) -> None:
    MEMORY.clear()
    CALLS.clear()
    STATE.update(initialized=False, stack=[], next=0x7F0000000000, retained=0, devices=devices)


class Error(Exception):
    pass


class LogicError(Error):
    pass


class MemoryError(Error):  # noqa: A001 - pycuda.driver.MemoryError shadows the builtin the same way
    pass


def _need_context(fn: str) -> None:
    if not STATE["initialized"]:
        raise LogicError(f"{fn} failed: initialization error")
    if not STATE["stack"]:
        raise LogicError(f"{fn} failed: invalid device context")


def init(flags=0):
    CALLS.append("init")
    STATE["initialized"] = True


class Context:
    def __init__(self, device):
        self.device = device
        self.live = True

    def push(self):
        CALLS.append("Context.push")
        STATE["stack"].append(self)

    @staticmethod
    def pop():
        CALLS.append("Context.pop")
        if not STATE["stack"]:
            raise LogicError("cuCtxPopCurrent failed: invalid device context")
        STATE["stack"].pop()

    def detach(self):
        CALLS.append("Context.detach")
        STATE["retained"] -= 1
        self.live = False

    @staticmethod
    def synchronize():
        _need_context("cuCtxSynchronize")


class Device:
    def __init__(self, ordinal):
        if not STATE["initialized"]:
            raise LogicError("cuDeviceGet failed: initialization error")
        if not 0 <= ordinal < STATE["devices"]:
            raise LogicError("cuDeviceGet failed: invalid device ordinal")
        self.ordinal = ordinal

    @staticmethod
    def count():
        if not STATE["initialized"]:
            raise LogicError("cuDeviceGetCount failed: initialization error")
        return STATE["devices"]

    def name(self):
        return "NVIDIA Fake GPU"

    def retain_primary_context(self):
        CALLS.append("retain_primary_context")
        STATE["retained"] += 1
        return Context(self)


class DeviceAllocation:
    def __init__(self, ptr: int, size: int):
        self.ptr, self.size = ptr, size

    def __int__(self):
        return self.ptr

    def free(self):
        MEMORY.pop(self.ptr, None)


def mem_get_info():
    _need_context("cuMemGetInfo")
    used = sum(len(b) for b in MEMORY.values())
    return TOTAL - used, TOTAL


def mem_alloc(bytes):  # noqa: A002 - pycuda's parameter name
    _need_context("cuMemAlloc")
    if bytes > mem_get_info()[0]:
        raise MemoryError("cuMemAlloc failed: out of memory")
    ptr = STATE["next"]
    STATE["next"] += (bytes + 255) // 256 * 256  # cudaMalloc's alignment
    MEMORY[ptr] = bytearray(bytes)
    return DeviceAllocation(ptr, bytes)


def pagelocked_empty(shape, dtype, order="C", mem_flags=0):
    _need_context("cuMemHostAlloc")
    return np.empty(shape, dtype=dtype, order=order)


def _region(ptr: int, nbytes: int, fn: str) -> tuple[bytearray, int]:
    for base, buf in MEMORY.items():
        if base <= ptr and ptr + nbytes <= base + len(buf):
            return buf, ptr - base
    raise LogicError(f"{fn} failed: invalid argument")


def memcpy_htod(dest, src):
    _need_context("cuMemcpyHtoD")
    data = memoryview(np.ascontiguousarray(src)).cast("B")
    buf, off = _region(int(dest), len(data), "cuMemcpyHtoD")
    buf[off:off + len(data)] = data
    CALLS.append("memcpy_htod")


def memcpy_dtoh(dest, src):
    _need_context("cuMemcpyDtoH")
    out = memoryview(dest).cast("B")
    buf, off = _region(int(src), len(out), "cuMemcpyDtoH")
    out[:] = buf[off:off + len(out)]
    CALLS.append("memcpy_dtoh")


class LibCuda:
    """libcuda.so.1 as ctypes sees it, for the three driver calls trt_bindings.DriverStreams makes (CUDA
    Driver API, Stream Management): out-parameters arrive as ctypes.byref(...) and are written through,
    the result is a CUresult (0: CUDA_SUCCESS). cuCtxGetStreamPriorityRange reports (least, greatest)
    = (0, -5), as on Ampere and Hopper GPUs; cuStreamCreateWithPriority clamps into that range."""

    CUDA_ERROR_INVALID_CONTEXT = 201
    CUDA_ERROR_INVALID_HANDLE = 400

    def __init__(self):
        self.created: dict[int, int] = {}  # handle -> priority
        self.destroyed: list[int] = []
        self._next = 0x5000

    def cuCtxGetStreamPriorityRange(self, least, greatest):
        if not STATE["stack"]:
            return self.CUDA_ERROR_INVALID_CONTEXT
        least._obj.value, greatest._obj.value = 0, -5
        return 0

    def cuStreamCreateWithPriority(self, handle, flags, priority):
        if not STATE["stack"]:
            return self.CUDA_ERROR_INVALID_CONTEXT
        self._next += 16
        self.created[self._next] = min(0, max(-5, priority.value))
        handle._obj.value = self._next
        return 0

    def cuStreamDestroy_v2(self, handle):
        h = handle.value
        if h not in self.created or h in self.destroyed:
            return self.CUDA_ERROR_INVALID_HANDLE
        self.destroyed.append(h)
        return 0
