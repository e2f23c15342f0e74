"""What the TensorRT-LLM tests need to run on the fake and on the real bindings: the `bindings` fixture (each
test twice, fake and real, the real run skipped with the reason where it cannot be made), the `eng` fixture
built on it (a loaded TrtllmEngine), the real engine to run on, the mark of a fake-only test, and the fake
when a test runs on it. tests/conftest.py registers this module as a plugin, so every test module can
ask for the fixtures by name.

The real run needs `tensorrt_llm.bindings.executor` to import (not PyPI's stub) and ORIN_LLM_TEST_TRTLLM_ENGINE
to name a trtllm engine directory that orin-llm build wrote, so the first run on an Orin executes the
assertions the fake passes here. A test that needs the fake's insides (a fault injected, a setting 0.12 does
not document toggled, an engine built another way) says so with `@fake_only("why")`: its real run is
skipped with that reason. Checks that only the fake can make inside a test that runs on both go through
`on_fake(eng)`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, NamedTuple, Optional

import pytest

from orin_llm.backends.trtllm.bindings import set_executor_module
from orin_llm.backends.trtllm.engine import TrtllmEngine

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
    from tests.backends.trtllm import fake_trtllm

    return fake_trtllm if engine.module is fake_trtllm else None


class Bindings(NamedTuple):
    """Which executor bindings a test runs on: `fake` is the fake module (tests/backends/trtllm/fake_trtllm.py) and
    `real_dir` None, or `fake` is None and `real_dir` the real engine (ORIN_LLM_TEST_TRTLLM_ENGINE)."""

    name: str
    fake: Optional[Any]
    real_dir: Optional[Path]


@pytest.fixture(params=["fake", "real"])
def bindings(request):
    """The test's run on the fake executor module, then on the real TensorRT-LLM 0.12.0-jetson bindings and
    the engine ORIN_LLM_TEST_TRTLLM_ENGINE names (skipped with the reason where they do not import, the
    engine is not there, or the test is @fake_only). Either module is the runtime's for the test's length."""
    if request.param == "real":
        marker = request.node.get_closest_marker("fake_only")
        if marker is not None:
            pytest.skip(f"fake only: {marker.args[0]}")
        path = real_engine_dir()
        previous = set_executor_module(None)  # the runtime imports tensorrt_llm itself
        try:
            yield Bindings("real", None, path)
        finally:
            set_executor_module(previous)
    else:
        yield Bindings("fake", request.getfixturevalue("fake"), None)


@pytest.fixture
def eng(bindings, request, tmp_path):
    """A loaded TrtllmEngine: on the fake with its scripted models (engine_dir: the module's, a tiny
    random-weight engine where the module says so), or on the real bindings and ORIN_LLM_TEST_TRTLLM_ENGINE."""
    from tests.backends.trtllm.test_trtllm_engine import install_models, make_engine_dir  # (it imports this module)

    if bindings.real_dir is not None:
        engine = TrtllmEngine.load(bindings.real_dir)
    else:
        engine_dir = request.getfixturevalue("engine_dir")
        engine = TrtllmEngine.load(make_engine_dir(engine_dir, tmp_path / "trt", limits={"max_batch_size": 2}))
        engine.reference = install_models(bindings.fake, engine)  # the scripted target: its greedy run is the truth
    try:
        yield engine
    finally:
        engine.close()
