"""Our side of the TensorRT + pycuda boundary: the engine build, the cached plan, the buffers and the
execution calls, against faithful fakes (fake_tensorrt.py, fake_pycuda.py); the numbers that come
back must be the policy's own (onnxruntime on the same file and the same observation)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from orin_llm.errors import OrinError
from orin_llm.policy import trt_bindings
from orin_llm.policy.backends import OnnxRuntimePolicy, input_specs, open_backend, synthetic_inputs
from orin_llm.policy.tensorrt import WORKSPACE_BYTES, TensorRTPolicy


def test_builds_runs_and_returns_the_policys_actions(trt_fakes, stand_in, tmp_path):
    trt, cuda, lib = trt_fakes
    policy = TensorRTPolicy(stand_in, cache_dir=tmp_path / "cache")
    assert trt.calls("parse_from_file") == [{"model": str(stand_in)}]
    assert trt.calls("create_network") == [{"flags": 0}]
    assert trt.calls("set_memory_pool_limit") == [{"pool": trt.MemoryPoolType.WORKSPACE, "pool_size": WORKSPACE_BYTES}]
    assert trt.calls("set_flag") == [{"flag": trt.BuilderFlag.FP16}]
    assert policy.plan_file.is_file() and trt.plan_onnx(policy.plan_file) == str(stand_in)
    assert policy.device == "NVIDIA Fake GPU"
    names = {c["name"] for c in trt.calls("set_tensor_address")}
    assert names == {"image_tokens", "task_ids", "state", "noise", "actions"}
    actions = policy.step().copy()
    ref = OnnxRuntimePolicy(stand_in).step()  # same file, same synthetic observation (seed 0)
    np.testing.assert_allclose(actions, ref, rtol=1e-5, atol=1e-5)
    assert cuda.CALLS.count("memcpy_htod") == 4 and cuda.CALLS.count("memcpy_dtoh") == 1
    # the stream: created at the context's greatest priority, and the one the engine ran on
    (handle, priority), = lib.created.items()
    assert priority == -5 and policy.priority_range == (0, -5)
    assert trt.calls("execute_async_v3") == [{"stream_handle": handle}]
    io_bytes = sum(a.nbytes for a in synthetic_inputs(input_specs(stand_in)).values()) + actions.nbytes
    assert policy.device_bytes() >= io_bytes  # what cuMemGetInfo saw go: at least the I/O buffers
    policy.close()
    assert cuda.MEMORY == {} and lib.destroyed == [handle]
    assert cuda.CALLS[-2:] == ["Context.pop", "Context.detach"] and cuda.STATE["stack"] == []


def test_the_plan_is_cached_per_onnx_file_and_rebuilt_when_it_changes(trt_fakes, stand_in, tmp_path):
    trt, _, lib = trt_fakes
    TensorRTPolicy(stand_in, cache_dir=tmp_path).close()
    TensorRTPolicy(stand_in, cache_dir=tmp_path, stream_priority="default").close()
    assert len(trt.calls("build_serialized_network")) == 1 and len(trt.calls("deserialize_cuda_engine")) == 2
    assert sorted(lib.created.values()) == [-5, 0]  # high, then the default priority
    copy = tmp_path / "other" / stand_in.name  # its weights file is named inside it: keep the name
    copy.parent.mkdir()
    copy.write_bytes(stand_in.read_bytes())
    (copy.parent / (copy.name + ".data")).write_bytes((stand_in.parent / (stand_in.name + ".data")).read_bytes())
    TensorRTPolicy(copy, cache_dir=tmp_path).close()
    assert len(trt.calls("build_serialized_network")) == 2
    assert len(list(tmp_path.glob("*.plan"))) == 2


def test_no_fp16_flag_where_the_gpu_has_no_fast_fp16(trt_fakes, stand_in, tmp_path):
    trt, _, _ = trt_fakes
    trt.FAST_FP16 = False
    TensorRTPolicy(stand_in, cache_dir=tmp_path).close()
    assert trt.calls("set_flag") == []


def test_parser_refusal_is_one_line_with_the_parsers_errors(trt_fakes, tmp_path):
    _, cuda, _ = trt_fakes
    bad = tmp_path / "broken.onnx"
    bad.write_bytes(b"not a protobuf")
    with pytest.raises(OrinError, match=r"refused .*broken.onnx|not a readable ONNX"):
        TensorRTPolicy(bad, cache_dir=tmp_path)
    assert cuda.STATE["stack"] == [] and cuda.STATE["retained"] == 0  # the context was given back


def test_a_stale_plan_is_refused_with_what_to_do(trt_fakes, stand_in, tmp_path):
    trt, _, _ = trt_fakes
    p = TensorRTPolicy(stand_in, cache_dir=tmp_path)
    p.close()
    p.plan_file.write_bytes(b"a plan from another TensorRT")
    with pytest.raises(OrinError, match="could not load .*delete it to rebuild"):
        TensorRTPolicy(stand_in, cache_dir=tmp_path)


def test_a_failed_enqueue_is_an_error_not_a_silent_zero(trt_fakes, stand_in, tmp_path, monkeypatch):
    trt, _, _ = trt_fakes
    policy = TensorRTPolicy(stand_in, cache_dir=tmp_path)
    policy.context.addresses.pop("actions")  # as if the output's address had never been set
    with pytest.raises(OrinError, match="execute_async_v3 returned False"):
        policy.step()
    policy.close()


def test_fakes_refuse_what_the_real_api_refuses(trt_fakes, stand_in, tmp_path):
    trt, cuda, lib = trt_fakes
    with pytest.raises(cuda.LogicError, match="cuMemAlloc failed: invalid device context"):
        cuda.init() or cuda.mem_alloc(16)  # no context pushed
    policy = TensorRTPolicy(stand_in, cache_dir=tmp_path)
    assert policy.context.set_tensor_address("no_such_tensor", 1234) is False
    with pytest.raises(TypeError):
        policy.context.set_tensor_address(name="actions", address=1)  # the keyword is `memory`
    with pytest.raises(TypeError):
        trt.Builder(trt.Logger()).create_network(flag=0)
    policy.close()
    with pytest.raises(OrinError, match="cuStreamDestroy_v2 failed with CUresult 400"):
        trt_bindings.DriverStreams(lib).destroy(next(iter(lib.created)))  # destroyed twice


def test_dynamic_shapes_in_the_engine_are_refused(trt_fakes, stand_in, tmp_path, monkeypatch):
    trt, _, _ = trt_fakes
    real = trt.ICudaEngine.get_tensor_shape
    monkeypatch.setattr(trt.ICudaEngine, "get_tensor_shape",
                        lambda self, name: (-1,) + tuple(real(self, name))[1:])
    with pytest.raises(OrinError, match="dynamic shape .* export the policy with fixed shapes"):
        TensorRTPolicy(stand_in, cache_dir=tmp_path)


@pytest.mark.skipif(importlib.util.find_spec("tensorrt") is not None, reason="TensorRT is installed here")
def test_without_tensorrt_here_the_backend_says_what_to_install(stand_in):
    assert trt_bindings._override is None
    with pytest.raises(OrinError, match="TensorRT is not importable: .*nvidia-jetpack"):
        trt_bindings.bindings()
    assert trt_bindings.usable() is False
    with pytest.raises(OrinError, match="TensorRT is not importable"):
        open_backend("tensorrt", stand_in)
    assert open_backend("auto", stand_in).name == "onnxruntime"  # and the runner reports which ran


def test_auto_picks_tensorrt_where_it_can_run(trt_fakes, stand_in, tmp_path):
    backend = open_backend("auto", stand_in, cache_dir=tmp_path)
    assert backend.name == "tensorrt"
    backend.close()


def test_a_tensorrt_other_than_10_is_refused(trt_fakes, monkeypatch):
    trt, _, _ = trt_fakes
    monkeypatch.setattr(trt, "__version__", "8.6.2")
    with pytest.raises(OrinError, match="TensorRT 8.6.2 is installed; .*TensorRT 10"):
        trt_bindings.bindings()
