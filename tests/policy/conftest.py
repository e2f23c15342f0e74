"""The policy's fixtures: a small stand-in ONNX (made once per session, as the runner's users make it)
and TensorRT + pycuda + libcuda replaced by fakes at the import boundary (orin_llm/policy/trt_bindings.py)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def stand_in(tmp_path_factory) -> Path:
    from orin_llm.policy.standin import export_stand_in

    return export_stand_in("cpu", tmp_path_factory.mktemp("policy") / "stand-in-cpu.onnx")


@pytest.fixture
def trt_fakes():
    from orin_llm.policy.trt_bindings import Bindings, DriverStreams, set_bindings
    from tests.policy import fake_pycuda, fake_tensorrt

    fake_pycuda.reset()
    fake_tensorrt.reset()
    lib = fake_pycuda.LibCuda()
    previous = set_bindings(Bindings(fake_tensorrt, fake_pycuda, DriverStreams(lib)))
    yield fake_tensorrt, fake_pycuda, lib
    set_bindings(previous)
    fake_pycuda.reset()
    fake_tensorrt.reset()
