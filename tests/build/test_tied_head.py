"""build/tied_head.py: the model directory convert_checkpoint.py reads for a tied lm_head, checked with the
safetensors library itself, and against the fake 0.12 converter, which fails without it as 0.12 does."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import save_file

from orin_llm.build.tied_head import HEAD_FILE, main, untie
from orin_llm.build.trtllm import check_model_dir
from orin_llm.errors import OrinError
from orin_llm.profile import ModelSpec
from tests.build import fake_trtllm_tools as tools

CONFIG = {"vocab_size": 7, "num_hidden_layers": 1, "hidden_size": 5, "max_position_embeddings": 64,
          "tie_word_embeddings": True}


def hf_dir(root: Path, tied: bool = True, config: dict | None = None) -> Path:
    """A two-shard HF checkpoint; the embedding in the second shard, after another tensor."""
    d = root / "hf"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(config or CONFIG))
    rng = np.random.default_rng(0)
    save_file({"model.norm.weight": rng.standard_normal(5).astype(np.float16)}, str(d / "model-00001.safetensors"))
    second = {"model.layers.0.mlp.up_proj.weight": rng.standard_normal((3, 5)).astype(np.float32),
              "model.embed_tokens.weight": rng.standard_normal((7, 5)).astype(np.float16)}
    if not tied:
        second["lm_head.weight"] = rng.standard_normal((7, 5)).astype(np.float16)
    save_file(second, str(d / "model-00002.safetensors"))
    return d


def test_untie_adds_the_embedding_as_lm_head(tmp_path):
    src = hf_dir(tmp_path)
    out = tmp_path / "out"
    assert untie(src, out) is True
    assert sorted(p.name for p in out.iterdir()) == ["config.json", HEAD_FILE, "model-00001.safetensors",
                                                    "model-00002.safetensors"]
    assert (out / "model-00002.safetensors").resolve() == (src / "model-00002.safetensors").resolve()
    with safe_open(str(out / HEAD_FILE), framework="numpy") as f, \
            safe_open(str(src / "model-00002.safetensors"), framework="numpy") as g:
        assert list(f.keys()) == ["lm_head.weight"]
        head, emb = f.get_tensor("lm_head.weight"), g.get_tensor("model.embed_tokens.weight")
    assert head.dtype == np.float16 and np.array_equal(head, emb)
    # as 0.12's ModelWeightsLoader opens it: framework="pt", get_slice (model_weights_loader.py L155, L176)
    import torch

    with safe_open(str(out / HEAD_FILE), framework="pt", device="cpu") as f:
        sliced = f.get_slice("lm_head.weight")
        assert sliced.get_shape() == [7, 5] and torch.equal(sliced[:], torch.from_numpy(emb))
    # what the fake 0.12 converter (the unified loader's glob of *.safetensors) now converts
    tools.convert_checkpoint(["--model_dir", str(out), "--output_dir", str(tmp_path / "ckpt"),
                              "--use_weight_only", "--weight_only_precision", "int4"])
    quant = json.loads((tmp_path / "ckpt" / "config.json").read_text())["quantization"]
    assert quant["quant_algo"] == "W4A16"


def test_without_the_links_the_fake_fails_as_0_12_does(tmp_path):
    with pytest.raises(AttributeError, match="'NoneType' object has no attribute 'to'"):
        tools.convert_checkpoint(["--model_dir", str(hf_dir(tmp_path)), "--output_dir", str(tmp_path / "c")])


def test_weight_only_precision_without_use_weight_only_quantizes_nothing(tmp_path):
    """0.12's args_to_quant_config: --weight_only_precision alone leaves the weights in fp16."""
    tools.convert_checkpoint(["--model_dir", str(hf_dir(tmp_path, tied=False)), "--output_dir",
                              str(tmp_path / "c"), "--weight_only_precision", "int4"])
    assert json.loads((tmp_path / "c" / "config.json").read_text())["quantization"]["quant_algo"] is None


def test_an_untied_checkpoint_gets_links_only_and_a_rerun_starts_over(tmp_path):
    src = hf_dir(tmp_path, tied=False)
    out = tmp_path / "out"
    out.mkdir()
    (out / HEAD_FILE).write_bytes(b"stale")
    assert untie(src, out) is False
    assert not (out / HEAD_FILE).exists()


def test_the_module_runs_as_the_build_runs_it(tmp_path):
    src = hf_dir(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "orin_llm.build.tied_head", "--model_dir", str(src),
                           "--output_dir", str(tmp_path / "o")], capture_output=True, text=True)
    assert proc.returncode == 0 and "lm_head.weight = model.embed_tokens.weight" in proc.stdout


def test_no_embedding_is_an_error_that_says_what_to_do(tmp_path, capsys):
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text("{}")
    save_file({"x": np.zeros(2, np.float32)}, str(d / "model.safetensors"))
    assert main(["--model_dir", str(d), "--output_dir", str(tmp_path / "o")]) == 1
    assert "no model.embed_tokens.weight" in capsys.readouterr().err


@pytest.mark.parametrize("weights, quant, words", [
    ("int4_gptq", None, "needs a 4-bit GPTQ checkpoint"),
    ("int4_gptq", {"quant_method": "gptq", "bits": 4, "group_size": 32}, "int4_group_size = 32"),
    ("int4_wo", {"quant_method": "gptq", "bits": 4, "group_size": 128}, 'set weights = "int4_gptq"'),
    ("int4_wo", {"quant_method": "awq", "bits": 4}, "point model at the float checkpoint"),
])
def test_the_checkpoint_must_be_what_the_profile_says(tmp_path, weights, quant, words):
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"quantization_config": quant} if quant else {}))
    with pytest.raises(OrinError, match=words):
        check_model_dir("target", ModelSpec(model=str(d), weights=weights), d)


def test_a_matching_gptq_checkpoint_passes(tmp_path):
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"quantization_config": {"quant_method": "gptq", "bits": 4,
                                                                       "group_size": 128}}))
    check_model_dir("target", ModelSpec(model=str(d), weights="int4_gptq"), d)


@pytest.mark.parametrize("argv, words", [
    (["--weight_only_precision", "int4_awq"], "invalid choice: 'int4_awq'"),  # AWQ is quantize.py's (L158-162)
    (["--kv_cache_dtype", "int8"], "unrecognized arguments: --kv_cache_dtype"),  # quantize.py's flag
    (["--max_output_len", "64"], "unrecognized arguments: --max_output_len"),
])
def test_the_fake_converter_refuses_as_0_12s_argparse(tmp_path, argv, words):
    log = tmp_path / "log"
    with open(log, "w") as f:
        proc = tools.run(["python3", "/x/examples/llama/convert_checkpoint.py", "--model_dir", str(tmp_path), *argv],
                         stdout=f)
    assert proc.returncode == 2
    assert words in log.read_text()  # argparse's message, in the step's log as the real tool's would be
