"""The import boundary to TensorRT and CUDA for the policy runner: the only module that imports
`tensorrt` or `pycuda`, or opens libcuda.

What the TensorRT backend (tensorrt.py) uses comes from the `Bindings` this returns:

* `trt` — TensorRT 10.3's Python module (JetPack 6.1 ships TensorRT 10.3: python3-libnvinfer).
* `cuda` — `pycuda.driver`: the context, device buffers, page-locked host buffers, copies and
  cuMemGetInfo.
* `streams` — stream creation *with a priority*. pycuda's Stream takes only `flags`
  (inducer/pycuda src/wrapper/wrap_cudadrv.cpp: `py::init<unsigned int>(py::arg("flags")=0)`;
  src/cpp/cuda.hpp: `cuStreamCreate(&m_stream, flags)`), so the prioritized stream comes from the
  CUDA driver API itself: cuCtxGetStreamPriorityRange and cuStreamCreateWithPriority (lower numbers
  are higher priorities; out-of-range values are clamped) and cuStreamDestroy, via ctypes on the
  libcuda.so.1 that pycuda has loaded already.

The imports are lazy: the package, the CLI and the onnxruntime backend work without any of this.
Where it is missing, asking for the TensorRT backend is an OrinError that says what to install.
Tests put fakes in its place with :func:`set_bindings` (tests/policy/fake_tensorrt.py, fake_pycuda.py).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any, Optional

from ..errors import OrinError

INSTALL_HINT = ("on the Orin: sudo apt install nvidia-jetpack (TensorRT 10.3's Python bindings) and "
                "pip install -e '.[device,policy]' (pycuda); elsewhere run the policy with --backend onnxruntime")
SUPPORTED_TRT_PREFIX = "10."  # the enqueueV3 / named-tensor API (TensorRT 10); JetPack 6.1 has 10.3


class DriverStreams:
    """Prioritized CUDA streams through the driver API (CUDA Driver API, Stream Management)."""

    def __init__(self, lib: Any = None):
        self.lib = lib if lib is not None else ctypes.CDLL("libcuda.so.1")

    def _call(self, name: str, *args) -> None:
        code = getattr(self.lib, name)(*args)
        if code != 0:  # CUresult: CUDA_SUCCESS is 0
            raise OrinError(f"{name} failed with CUresult {code}; is a CUDA context current (pycuda) and the "
                            "driver working (nvidia-smi / tegrastats)?")

    def priority_range(self) -> tuple[int, int]:
        """(least, greatest): greatest is the highest priority, the numerically lowest value."""
        least, greatest = ctypes.c_int(), ctypes.c_int()
        self._call("cuCtxGetStreamPriorityRange", ctypes.byref(least), ctypes.byref(greatest))
        return least.value, greatest.value

    def create(self, priority: int) -> int:
        handle = ctypes.c_void_p()
        self._call("cuStreamCreateWithPriority", ctypes.byref(handle), ctypes.c_uint(0), ctypes.c_int(priority))
        return int(handle.value or 0)

    def destroy(self, handle: int) -> None:
        self._call("cuStreamDestroy_v2", ctypes.c_void_p(handle))


@dataclass
class Bindings:
    trt: Any
    cuda: Any
    streams: Any


_override: Optional[Bindings] = None


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _check_version(trt: Any) -> None:
    version = getattr(trt, "__version__", None)
    if isinstance(version, str) and not version.startswith(SUPPORTED_TRT_PREFIX):
        raise OrinError(f"TensorRT {version} is installed; the policy runner speaks TensorRT 10's API "
                        "(JetPack 6.1: TensorRT 10.3)")


def bindings() -> Bindings:
    """TensorRT, pycuda.driver and the driver's stream API (or the test fakes)."""
    if _override is not None:
        _check_version(_override.trt)
        return _override
    try:
        import tensorrt as trt
    except (ImportError, OSError) as e:  # OSError: the module is there but libnvinfer is not
        raise OrinError(f"TensorRT is not importable: {_first_line(e)}; {INSTALL_HINT}") from None
    _check_version(trt)
    try:
        import pycuda.driver as cuda
    except (ImportError, OSError) as e:
        raise OrinError(f"pycuda is not importable: {_first_line(e)}; {INSTALL_HINT}") from None
    try:
        streams = DriverStreams()
    except OSError as e:
        raise OrinError(f"libcuda.so.1 cannot be opened: {_first_line(e)}; {INSTALL_HINT}") from None
    return Bindings(trt, cuda, streams)


def usable() -> bool:
    """Whether the TensorRT backend can run here: the bindings import and the driver sees a device."""
    try:
        b = bindings()
        b.cuda.init()
        return b.cuda.Device.count() > 0
    except Exception:  # OrinError, pycuda's own errors (no driver, no device): not usable
        return False


def set_bindings(b: Optional[Bindings]) -> Optional[Bindings]:
    """Use `b` instead of the real modules (None: the real ones again); returns the previous override."""
    global _override
    previous, _override = _override, b
    return previous
