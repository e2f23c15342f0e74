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
from orin_llm.policy.inputs import ShapeRange, parse_range_option, parse_shape_option
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
    # what it allocated: the engine (the plan's bytes), the context's scratch, the I/O buffers; no free-memory
    # difference (on unified memory that moves with the page cache)
    assert policy.memory == {"engine": policy.plan_file.stat().st_size, "context": 64 * 2**20, "io": io_bytes}
    assert policy.device_bytes() == sum(policy.memory.values())
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


def dynamic_policy(path, second: str | int = 8):
    """A policy as most exports are: obs [batch, 8] (batch dynamic; the second axis too if named) → [batch, 4]."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.random.default_rng(1).standard_normal((8, 4)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["obs", "w"], ["act"])], "dyn",
        [helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["batch", second])],
        [helper.make_tensor_value_info("act", TensorProto.FLOAT, ["batch", 4])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_a_dynamic_batch_policy_gets_a_profile_of_the_runners_shape(trt_fakes, tmp_path):
    trt, cuda, _ = trt_fakes
    onnx_file = dynamic_policy(tmp_path / "dyn.onnx")
    policy = TensorRTPolicy(onnx_file, cache_dir=tmp_path / "cache")
    assert trt.calls("set_shape") == [{"input": "obs", "min": (1, 8), "opt": (1, 8), "max": (1, 8)}]
    assert len(trt.calls("add_optimization_profile")) == 1
    assert trt.calls("set_input_shape") == [{"name": "obs", "shape": (1, 8)}]
    actions = policy.step().copy()
    np.testing.assert_allclose(actions, OnnxRuntimePolicy(onnx_file).step(), rtol=1e-6)
    assert actions.shape == (1, 4)
    assert "mem_get_info" not in cuda.CALLS
    policy.close()


def test_stated_ranges_become_the_profile_and_the_runner_feeds_opt(trt_fakes, tmp_path):
    trt, _, _ = trt_fakes
    onnx_file = dynamic_policy(tmp_path / "dyn.onnx")
    ranges = {"obs": ShapeRange((1, 8), (4, 8), (8, 8))}
    policy = TensorRTPolicy(onnx_file, cache_dir=tmp_path, ranges=ranges)
    assert trt.calls("set_shape") == [{"input": "obs", "min": (1, 8), "opt": (4, 8), "max": (8, 8)}]
    assert policy.step().shape == (4, 4)
    # another profile is another engine: the plan cache keys on it
    TensorRTPolicy(onnx_file, cache_dir=tmp_path).close()
    assert len(list(tmp_path.glob("*.plan"))) == 2
    policy.close()


def test_the_fake_builds_no_dynamic_network_without_a_profile(trt_fakes, tmp_path, monkeypatch):
    """TensorRT's rule (NvInferRuntime.h, IOptimizationProfile), in the fake: so our profile is what builds it."""
    trt, _, _ = trt_fakes
    import orin_llm.policy.tensorrt as backend

    monkeypatch.setattr(backend, "_add_profile", lambda *a, **k: None)
    with pytest.raises(OrinError, match="could not build an engine"):
        TensorRTPolicy(dynamic_policy(tmp_path / "dyn.onnx"), cache_dir=tmp_path)
    assert any("no optimization profile" in line for line in trt.LOG)


def test_the_fakes_profile_and_context_refuse_as_tensorrt(trt_fakes, tmp_path):
    trt, _, _ = trt_fakes
    profile = trt.Builder(trt.Logger()).create_optimization_profile()
    with pytest.raises(RuntimeError, match="Shape provided for min is inconsistent"):
        profile.set_shape("obs", (4, 8), (1, 8), (8, 8))
    policy = TensorRTPolicy(dynamic_policy(tmp_path / "dyn.onnx"), cache_dir=tmp_path,
                            ranges={"obs": ShapeRange((1, 8), (2, 8), (4, 8))})
    assert policy.context.set_input_shape("obs", (5, 8)) is False  # outside the profile
    assert policy.context.set_input_shape("obs", (2, 9)) is False  # a fixed axis changed
    assert policy.context.set_input_shape("act", (2, 4)) is False  # not an input
    policy.close()


def test_a_dynamic_axis_past_the_batch_needs_a_stated_shape(trt_fakes, tmp_path):
    onnx_file = dynamic_policy(tmp_path / "dyn.onnx", second="features")
    with pytest.raises(OrinError, match=r"dynamic axis 1 .*--input-shape obs=1xN"):
        TensorRTPolicy(onnx_file, cache_dir=tmp_path)
    policy = TensorRTPolicy(onnx_file, cache_dir=tmp_path, shapes={"obs": (2, 8)})
    assert policy.step().shape == (2, 4)
    policy.close()


def test_shape_options_parse_and_refuse_with_the_fix():
    assert parse_shape_option("obs=2x8") == ("obs", (2, 8))
    assert parse_range_option("obs=1x8:4x8:8x8") == ("obs", ShapeRange((1, 8), (4, 8), (8, 8)))
    with pytest.raises(OrinError, match="min <= opt <= max"):
        parse_range_option("obs=4x8:1x8:8x8")
    with pytest.raises(OrinError, match="NAME=DxDx"):
        parse_shape_option("2x8")
    with pytest.raises(OrinError, match="positive axis sizes"):
        parse_shape_option("obs=2x-1")


def test_a_shape_for_an_input_the_policy_lacks_is_refused(tmp_path):
    onnx_file = dynamic_policy(tmp_path / "dyn.onnx")
    with pytest.raises(OrinError, match=r"no input named 'image'; its inputs are obs\[-1, 8\]"):
        input_specs(onnx_file, {"image": (1, 3)})


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
