"""The policy's memory from its ONNX file: every initializer counted to the byte, inline or external,
in subgraphs too, and an unreadable file named."""

from __future__ import annotations

import re

import pytest

from orin_llm.errors import OrinError
from orin_llm.policy.onnx_size import onnx_initializer_bytes


def policy_model():
    """An ONNX graph with initializers of several types, one of them in an If branch."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((4, 8), np.float32), "w")  # 128 B
    b = numpy_helper.from_array(np.ones(8, np.float16), "b")  # 16 B
    big = numpy_helper.from_array(np.zeros((16, 16), np.float32), "big")  # 1024 B
    idx = numpy_helper.from_array(np.arange(3, dtype=np.int64), "idx")  # 24 B
    branch_c = numpy_helper.from_array(np.ones(5, np.float64), "c")  # 40 B, inside the If body
    then = helper.make_graph([helper.make_node("Identity", ["c"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", TensorProto.DOUBLE, [5])], [branch_c])
    other = helper.make_graph([helper.make_node("Identity", ["c"], ["t"])], "else", [],
                              [helper.make_tensor_value_info("t", TensorProto.DOUBLE, [5])],
                              [numpy_helper.from_array(np.ones(5, np.float64), "c")])  # 40 B
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"]),
             helper.make_node("Cast", ["b"], ["b16"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["y", "b16"], ["z"]),
             helper.make_node("If", ["cond"], ["t"], then_branch=then, else_branch=other)]
    graph = helper.make_graph(nodes, "policy",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4]),
                               helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 8]),
                               helper.make_tensor_value_info("t", TensorProto.DOUBLE, [5])],
                              [w, b, big, idx])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model, 128 + 16 + 1024 + 24 + 40 + 40


def test_onnx_initializers_counted_to_the_byte(tmp_path):
    import onnx

    model, expected = policy_model()
    inline = tmp_path / "inline.onnx"
    onnx.save_model(model, str(inline))
    assert onnx_initializer_bytes(inline) == expected

    ext = tmp_path / "ext" / "policy.onnx"
    ext.parent.mkdir()
    model = policy_model()[0]  # save_model(save_as_external_data=True) rewrites the proto in place
    onnx.save_model(model, str(ext), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="policy.bin", size_threshold=0)
    stored = onnx.load(str(ext), load_external_data=False)
    assert any(t.data_location == onnx.TensorProto.EXTERNAL for t in stored.graph.initializer)
    assert ext.stat().st_size < 1024 < (ext.parent / "policy.bin").stat().st_size
    assert onnx_initializer_bytes(ext) == expected

    mixed = tmp_path / "mixed" / "policy.onnx"  # only `big` goes to the external file
    mixed.parent.mkdir()
    model = policy_model()[0]
    onnx.save_model(model, str(mixed), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="big.bin", size_threshold=512)
    stored = onnx.load(str(mixed), load_external_data=False)
    external = [t.name for t in stored.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    assert external == ["big"]
    assert onnx_initializer_bytes(mixed) == expected


def test_unreadable_onnx_names_the_path(tmp_path):
    garbage = tmp_path / "policy.onnx"
    garbage.write_bytes(b"\xff\xfe not a protobuf \x00\x01" * 10)
    with pytest.raises(OrinError, match=re.escape(str(garbage))):
        onnx_initializer_bytes(garbage)
    with pytest.raises(OrinError, match=re.escape(str(tmp_path / "absent.onnx"))):
        onnx_initializer_bytes(tmp_path / "absent.onnx")
