"""A shaped engine (random weights of a config.json's shape, orin_llm/bench/shaped.py) loads and runs as
a built one does: the runtime's own loader, INT8 KV scales calibrated, the manifest's arch the config's.
A small Llama shape stands in for the 3B (the same code path, seconds instead of minutes)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from orin_llm.bench.shaped import WEIGHT_STD, write_shaped_engine
from orin_llm.errors import OrinError
from orin_llm.kernels.quant import QuantLinear
from orin_llm.manifest import load_manifest
from orin_llm.runtime.engine import Engine
from orin_llm.runtime.sampling import SamplingParams
from orin_llm.runtime.weights import Q4_1_FILE
from tests.conftest import tiny_fixture

from ..conftest import ROOT

tiny_engine_dir = tiny_fixture("engine_dir")  # random weights do here (tests/conftest.py)

SMALL = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256, "head_dim": 64,
         "intermediate_size": 512, "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
         "vocab_size": 49152, "tie_word_embeddings": True, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
         "max_position_embeddings": 8192, "torch_dtype": "bfloat16"}


def _config(tmp_path, **change):
    path = tmp_path / "small" / "config.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps({**SMALL, **change}))
    return path


def test_a_shaped_engine_loads_and_decodes_like_a_built_one(engine_dir, tmp_path):
    out = write_shaped_engine(_config(tmp_path), tmp_path / "engine", engine_dir, calibration_size=1)
    m = load_manifest(out)
    assert m.draft is None and m.target.weights == "q4_1" and m.target.kv_cache.dtype == "int8"
    assert m.target.arch.num_layers == 2 and m.target.arch.hidden_size == 256 and m.target.kv_cache.scales
    eng = Engine.load(out, device="cpu", draft=False)
    layers = [mod for n, mod in eng.model.named_modules() if n.startswith("layers.") and isinstance(mod, QuantLinear)]
    assert len(layers) == 2 * 4  # q|k|v, o, gate|up and down in each layer, fused as the loader fuses them
    blocks = load_file(str(out / "target" / Q4_1_FILE))  # one layer's weights, dequantized as gguf does
    name = "model.layers.0.mlp.down_proj"
    codes = blocks[name + ".qweight"]
    q = torch.stack([codes & 15, codes >> 4], dim=-1).view(codes.shape[0], -1, 32).float()
    w = q * blocks[name + ".scales"][..., None] + blocks[name + ".mins"][..., None]
    assert abs(w.std().item() - WEIGHT_STD) < 0.1 * WEIGHT_STD and abs(w.mean().item()) < 1e-3
    ids = eng.chat_ids([{"role": "user", "content": "Put the cup in the sink."}])
    gen = eng.generate(ids, SamplingParams(max_tokens=6, temperature=0.0), speculation="none")
    eng.run(gen)
    out_ids = gen.context[len(ids):]
    assert 1 <= len(out_ids) <= 6 and all(0 <= t < SMALL["vocab_size"] for t in out_ids)
    assert gen.timings.prompt_tokens == len(ids)
    with pytest.raises(OrinError, match="already exists"):
        write_shaped_engine(_config(tmp_path), out, engine_dir)


@pytest.mark.parametrize("change, message", [({"tie_word_embeddings": False}, "ties its head"),
                                             ({"vocab_size": 32000}, "smaller than the tokenizer"),
                                             ({"intermediate_size": 500}, "whole Q4_1 blocks")])
def test_shapes_it_cannot_write_are_refused_with_why(engine_dir, tmp_path, change, message):
    with pytest.raises(OrinError, match=message):
        write_shaped_engine(_config(tmp_path, **change), tmp_path / "engine", engine_dir, calibration_size=1)
    assert not (tmp_path / "engine").exists() and not list(tmp_path.glob(".engine.*"))


def test_the_script_says_what_is_wrong(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "bench/shaped_engine.py"), "--config", str(tmp_path / "nope.json"),
                        "--out", str(tmp_path / "e")], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 1 and "no such config.json" in r.stderr
