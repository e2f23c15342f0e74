"""Fixtures shared by the TensorRT-LLM backend's tests in this directory.

`eng` runs each test twice: on the fake executor (tests/runtime/fake_trtllm.py) and on the real
TensorRT-LLM 0.12.0-jetson bindings, so the first run on an Orin executes the assertions the fake
passes here. The real run needs `tensorrt_llm.bindings.executor` to import (not PyPI's stub) and
ORIN_LLM_TEST_TRTLLM_ENGINE to name a trtllm engine directory that orin-llm build wrote; it is skipped
with the reason otherwise. A test that needs the fake's insides (a fault injected, a setting 0.12
does not document toggled, an engine built another way) says so with `@fake_only("why")`: its real
run is skipped with that reason. Checks that only the fake can make inside a test that runs on both
go through `on_fake(eng)` (both in tests/runtime/trtllm_both.py).
"""

from __future__ import annotations

import pytest

from orin_llm.runtime.trtllm.bindings import set_executor_module
from orin_llm.runtime.trtllm.engine import TrtllmEngine

from .test_trtllm_engine import install_models, make_engine_dir
from .trtllm_both import real_engine_dir


@pytest.fixture(params=["fake", "real"])
def eng(request, tmp_path):
    """A loaded TrtllmEngine: on the fake with its scripted models (engine_dir: the module's, a tiny
    random-weight engine where the module says so), or on the real bindings and ORIN_LLM_TEST_TRTLLM_ENGINE."""
    if request.param == "real":
        marker = request.node.get_closest_marker("fake_only")
        if marker is not None:
            pytest.skip(f"fake only: {marker.args[0]}")
        path = real_engine_dir()
        previous = set_executor_module(None)
        try:
            engine = TrtllmEngine.load(path)
        except BaseException:
            set_executor_module(previous)
            raise
    else:
        fake = request.getfixturevalue("fake")
        previous = None
        engine_dir = request.getfixturevalue("engine_dir")
        engine = TrtllmEngine.load(make_engine_dir(engine_dir, tmp_path / "trt", limits={"max_batch_size": 2}))
        engine.reference = install_models(fake, engine)  # the scripted target: its greedy run is the truth
    try:
        yield engine
    finally:
        engine.close()
        if request.param == "real":
            set_executor_module(previous)
