"""What the TensorRT-LLM tests need to run on the fake and on the real bindings (tests/runtime/conftest.py's
`eng`): the real engine to run on or the reason to skip, the mark of a fake-only test, and the fake when a
test runs on it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

import pytest

from orin_llm.runtime.trtllm.engine import TrtllmEngine

REAL_ENGINE = "ORIN_LLM_TEST_TRTLLM_ENGINE"


def fake_only(reason: str):
    """Mark a test that needs the fake's insides; `reason` says which, one line."""
    return pytest.mark.fake_only(reason)


def real_engine_dir() -> Path:
    """The real bindings and an engine to run them on, or the reason to skip."""
    try:
        import tensorrt_llm.bindings.executor as executor
    except Exception as e:  # ImportError, OSError (libnvinfer missing), the PyPI stub's own errors
        text = str(e).strip().splitlines()
        pytest.skip(f"the real TensorRT-LLM bindings do not import here ({type(e).__name__}: "
                    f"{text[0] if text else ''})")
    if not hasattr(executor, "Executor"):  # a stub package that imports but binds nothing
        pytest.skip(f"tensorrt_llm.bindings.executor imports from {getattr(executor, '__file__', '?')} but has "
                    "no Executor: not TensorRT-LLM 0.12.0-jetson's bindings (jetson/setup.sh builds them)")
    path = os.environ.get(REAL_ENGINE)
    if not path or not (Path(path) / "manifest.json").is_file():
        pytest.skip(f"the real TensorRT-LLM bindings import, but {REAL_ENGINE} names no trtllm engine directory "
                    "(on the Orin: the engine orin-llm build wrote, e.g. engines/agx-orin-64gb)")
    return Path(path)


def on_fake(engine: TrtllmEngine) -> Optional[Any]:
    """The fake executor module when `engine` runs on it (for checks only the fake can make), else None."""
    from tests.runtime import fake_trtllm

    return fake_trtllm if engine.module is fake_trtllm else None
