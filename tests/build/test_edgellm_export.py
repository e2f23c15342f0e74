"""The Edge-LLM export for real (tensorrt-edgellm 0.11.0 in .venv-edgellm, `make edgellm`): `orin-llm build`
on a tiny random Llama and on the embedded SmolLM2-135M, then the artifacts it wrote, read as data: the ONNX
graph's inputs and outputs (with `onnx`, no external data), the runtime config, the tokenizer files (they
encode as the source tokenizer does) and the manifest (it loads, its files verify by sha256). About 15 s
for the tiny model and a minute for the embedded one on a 2-core VM."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orin_llm.build.pipeline import build_engine
from orin_llm.manifest import load_manifest, verify_files
from orin_llm.profile import load_profile
from orin_llm.runtime.tokenizer import Tokenizer
from tests.build.edgellm_models import edgellm_available, embedded_checkpoint, profile_text, tiny_llama

pytestmark = pytest.mark.full

FLOAT16, FLOAT, INT32, INT64 = 10, 1, 6, 7  # onnx.TensorProto's element types


def dims(value) -> list:
    return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]


def build(tmp_path: Path, checkpoint: Path, name: str) -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(profile_text(name, checkpoint))
    return build_engine(load_profile(path), tmp_path / "engines" / name, path.parent, quiet=True)


def check_export(out: Path, checkpoint: Path) -> None:
    import onnx

    src = json.loads((checkpoint / "config.json").read_text())
    layers, kv_heads, head_dim = src["num_hidden_layers"], src["num_key_value_heads"], src["head_dim"]
    llm = out / "onnx" / "llm"
    graph = onnx.load(str(llm / "model.onnx"), load_external_data=False).graph
    inputs = {i.name: i for i in graph.input}
    outputs = {o.name: o for o in graph.output}
    # the embedding lookup is the runtime's (embedding.safetensors): the graph starts from the embeddings
    assert dims(inputs["inputs_embeds"])[1] == src["hidden_size"]
    assert inputs["inputs_embeds"].type.tensor_type.elem_type == FLOAT16
    # one paged FP16 KV cache per layer in and out: [K/V, pages, 128 tokens, kv heads, head dim]
    for n in range(layers):
        for kv in (inputs[f"past_key_values_{n}"], outputs[f"present_key_values_{n}"]):
            assert kv.type.tensor_type.elem_type == FLOAT16
            assert dims(kv)[0] == 2 and dims(kv)[2:] == [128, kv_heads, head_dim]
    assert f"past_key_values_{layers}" not in inputs
    assert inputs["kv_page_table"].type.tensor_type.elem_type == INT32
    assert dims(outputs["logits"]) == ["num_sequences", src["vocab_size"]]
    assert outputs["logits"].type.tensor_type.elem_type == FLOAT
    assert sum(n.op_type == "AttentionPlugin" for n in graph.node) == layers

    config = json.loads((llm / "config.json").read_text())
    assert config["model"] == "llama" and config["edgellm_version"] == "0.11.0"
    assert config["kv_cache_dtype"] == "fp16"
    assert (config["num_hidden_layers"], config["num_key_value_heads"], config["head_dim"]) == (layers, kv_heads,
                                                                                              head_dim)
    assert config["eos_token_id"] == [src["eos_token_id"]]
    from safetensors import safe_open

    with safe_open(str(llm / "embedding.safetensors"), "np") as f:
        (name,) = f.keys()
        assert f.get_slice(name).get_shape() == [src["vocab_size"], src["hidden_size"]]

    # the daemon's tokenizer is the export's: it encodes and applies the chat template as the source's does
    ours, theirs = Tokenizer(out / "tokenizer"), Tokenizer(checkpoint)
    text = "Bring the mug from the kitchen to the coffee table."
    assert ours.encode(text) == theirs.encode(text) != []
    messages = [{"role": "user", "content": text}]
    assert ours.apply_chat_template(messages) == theirs.apply_chat_template(messages)
    assert (out / "tokenizer" / "chat_template.jinja").read_text() == (checkpoint / "chat_template.jinja").read_text()

    m = load_manifest(out)
    verify_files(out, m, hashes=True)
    assert m.backend == "edgellm" and m.target.kv_cache.dtype == "fp16"
    assert m.tools["edgellm_env:tensorrt-edgellm"] == "0.11.0"
    assert m.edgellm["export"]["kv_cache_dtype"] == "fp16" and m.edgellm["export_seconds"] > 0
    assert [s["name"] for s in m.edgellm["device_steps"]] == ["llm_build", "serve"]
    assert m.limits["max_batch_size"] == 2 and m.memory_plan["backend"] == "edgellm"


def test_the_tiny_llama_exports_and_its_artifacts_are_what_the_device_needs(tmp_path, engine_dir):
    edgellm_available()
    checkpoint = tiny_llama(tmp_path / "tiny", engine_dir)
    check_export(build(tmp_path, checkpoint, "tiny-edgellm"), checkpoint)


def test_the_embedded_model_exports_too(tmp_path, engine_dir):
    edgellm_available()
    checkpoint = embedded_checkpoint(tmp_path / "smollm2", engine_dir)
    check_export(build(tmp_path, checkpoint, "smollm2-edgellm"), checkpoint)


def test_a_failed_export_leaves_no_engine_and_says_why(tmp_path, engine_dir):
    edgellm_available()
    checkpoint = tiny_llama(tmp_path / "broken", engine_dir)
    (checkpoint / "model.safetensors").write_bytes(b"not safetensors")
    from orin_llm.errors import OrinError

    with pytest.raises(OrinError, match="tensorrt-edgellm-export failed"):
        build(tmp_path, checkpoint, "broken-edgellm")
    assert not (tmp_path / "engines" / "broken-edgellm").exists()
    assert not list((tmp_path / "engines").glob(".broken-edgellm.*"))
