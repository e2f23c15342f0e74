"""The stand-in policy: a valid ONNX file of the stated shape and size, labelled as a stand-in, that
onnxruntime runs and the memory plan sizes."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from orin_llm.errors import OrinError
from orin_llm.policy.backends import OnnxRuntimePolicy, input_specs
from orin_llm.policy.onnx_size import onnx_initializer_bytes
from orin_llm.policy.standin import SHAPES, STAND_IN_KEY, export_stand_in, is_stand_in, parameter_count


def test_the_cpu_stand_in_is_a_labelled_valid_model_of_its_stated_size(stand_in):
    onnx.checker.check_model(str(stand_in))
    model = onnx.load(str(stand_in), load_external_data=False)
    meta = {p.key: p.value for p in model.metadata_props}
    assert meta[STAND_IN_KEY] == "true" and "STAND-IN" in meta["orin_llm.note"] and "STAND-IN" in model.doc_string
    params = parameter_count(SHAPES["cpu"])
    assert int(meta["orin_llm.parameters"]) == params  # the graph's own count agrees with the formula
    # the memory plan reads the same number from the file: 4 bytes a parameter, plus the graph's shape
    # constants and scalars (a few hundred bytes)
    assert 0 <= onnx_initializer_bytes(stand_in) - 4 * params < 4096
    assert is_stand_in(stand_in)


def test_onnxruntime_runs_it_to_an_action_chunk(stand_in):
    specs = {s.name: s for s in input_specs(stand_in)}
    s = SHAPES["cpu"]
    assert specs["image_tokens"].shape == (1, s.cameras * s.patches, s.vision_dim)
    assert specs["task_ids"].dtype == np.int64 and specs["noise"].shape == (1, s.chunk, s.action_dim)
    out = OnnxRuntimePolicy(stand_in).step()
    assert out.shape == (1, s.chunk, s.action_dim) and np.isfinite(out).all()
    assert 0.1 < float(np.abs(out).mean()) < 10  # activations stay O(1) through every layer


def test_the_orin_default_is_smolvla_class():
    s = SHAPES["smolvla"]
    assert 0.4e9 < parameter_count(s) < 0.5e9 and s.dtype == "float16"
    assert s.chunk == 50 and s.flow_steps == 10 and s.cameras * s.patches // s.shuffle == 128


def test_same_seed_same_weights_and_bad_requests_are_refused(tmp_path, stand_in):
    again = export_stand_in("cpu", tmp_path / "again.onnx")
    a = (stand_in.parent / (stand_in.name + ".data")).read_bytes()
    assert (tmp_path / "again.onnx.data").read_bytes() == a
    with pytest.raises(OrinError, match="unknown stand-in shape 'huge'"):
        export_stand_in("huge", tmp_path / "x.onnx")
    with pytest.raises(OrinError, match="must end in .onnx"):
        export_stand_in("cpu", tmp_path / "x.bin")
    assert again.is_file()


def test_a_float16_export_runs_where_float16_kernels_exist_or_says_why(tmp_path):
    path = export_stand_in("cpu", tmp_path / "half.onnx", dtype="float16")
    assert {s.dtype for s in input_specs(path)} == {np.dtype(np.float16), np.dtype(np.int64)}
    try:
        out = OnnxRuntimePolicy(path).step()
    except OrinError as e:
        assert "onnxruntime cannot load" in str(e)
    else:
        assert out.dtype == np.float16 and np.isfinite(out).all()
