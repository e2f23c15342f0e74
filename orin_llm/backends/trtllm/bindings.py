"""The import boundary to TensorRT-LLM: the only module that imports `tensorrt_llm`.

Everything the TensorRT-LLM runtime (backends/trtllm/: loading.py creates the executors) uses
comes from the module this returns: `tensorrt_llm.bindings.executor` of TensorRT-LLM 0.12.0-jetson,
whose classes and keyword names are listed, with citations, in docs/trtllm-0.12-jetson.md §4. The import is lazy, so the
package (CLI, build, torch runtime) imports and runs on machines without TensorRT-LLM; only
loading a "trtllm" engine needs it, and there a missing install is an OrinError that says how to
install it. There is no fallback to torch: a trtllm engine holds TensorRT plans, not weights.

Tests put a fake in its place with :func:`set_executor_module` (tests/backends/trtllm/fake_trtllm.py).
"""

from __future__ import annotations

from typing import Any, Optional

from ...errors import OrinError

INSTALL_HINT = "install TensorRT-LLM 0.12.0-jetson (jetson/setup.sh) or use a torch engine"

# The executor API (keyword names, overloads) is that of 0.12; 0.13+ renamed and added arguments.
SUPPORTED_VERSION_PREFIX = "0.12."

_override: Optional[Any] = None


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _check_version(module: Any) -> None:
    # `tensorrt_llm.bindings.executor.__version__` = tle::version() (R≡J:
    # cpp/tensorrt_llm/pybind/executor/bindings.cpp L47).
    version = getattr(module, "__version__", None)
    if isinstance(version, str) and not version.startswith(SUPPORTED_VERSION_PREFIX):
        raise OrinError(f"TensorRT-LLM {version} is installed, but this runtime speaks the 0.12 executor "
                        f"API; {INSTALL_HINT}")


def executor_module() -> Any:
    """`tensorrt_llm.bindings.executor` (or the test fake); OrinError with the install hint if missing."""
    if _override is not None:
        _check_version(_override)
        return _override
    try:
        # Submodule "executor" of the pybind module `tensorrt_llm.bindings` (R≡J:
        # cpp/tensorrt_llm/pybind/bindings.cpp L63); jetson's ModelRunnerCpp imports it the same way
        # (J: tensorrt_llm/runtime/model_runner_cpp.py: `import tensorrt_llm.bindings.executor as trtllm`).
        import tensorrt_llm.bindings.executor as executor
    except (ImportError, OSError) as e:  # OSError: the wheel is there but libnvinfer & co. are not
        raise OrinError(f"TensorRT-LLM is not importable: {_first_line(e)}; {INSTALL_HINT}") from None
    _check_version(executor)
    return executor


def set_executor_module(module: Optional[Any]) -> Optional[Any]:
    """Use `module` instead of the real bindings (None: import the real ones again); returns the
    previous override, so a test can restore it."""
    global _override
    previous, _override = _override, module
    return previous
