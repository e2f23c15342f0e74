"""Fixtures shared by the TensorRT-LLM backend's tests in this directory."""

import pytest

from orin_llm.runtime.trtllm.engine import TrtllmEngine

from .test_trtllm_engine import install_models, make_engine_dir


@pytest.fixture
def eng(tmp_path, engine_dir, fake):
    """A TrtllmEngine on the fake executor with its scripted models installed (engine_dir: the module's,
    a tiny random-weight engine where the module says so)."""
    engine = TrtllmEngine.load(make_engine_dir(engine_dir, tmp_path / "trt"))
    install_models(fake, engine)
    yield engine
    engine.close()
