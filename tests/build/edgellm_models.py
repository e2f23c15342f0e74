"""Checkpoints for the Edge-LLM export tests: a tiny random Llama with the embedded model's tokenizer and chat
template, and the embedded SmolLM2-135M's HF-layout files with its tokenizer beside them (an HF checkpoint
directory as a download has it). Written with torch and safetensors: no hub, no transformers."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

TINY = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16}


def edgellm_available() -> None:
    """The Edge-LLM export tools, or a skip (a failure in CI, whose `make test-full` installs them)."""
    from orin_llm.build.edgellm import edgellm_bin
    from orin_llm.errors import OrinError

    try:
        edgellm_bin("tensorrt-edgellm-export")
    except OrinError as e:
        if os.environ.get("CI"):
            pytest.fail(f"{e} (CI's `make test-full` installs it)")
        pytest.skip(str(e))


def with_tokenizer(out: Path, engine: Path) -> None:
    for f in (engine / "tokenizer").iterdir():
        (out / f.name).write_bytes(f.read_bytes())
    gen = engine / "target" / "generation_config.json"
    (out / "generation_config.json").write_bytes(gen.read_bytes())


def tiny_llama(out: Path, engine: Path) -> Path:
    """A 2-layer random Llama of the embedded model's vocabulary and config (rope, eps, tied head)."""
    import torch
    from safetensors.torch import save_file

    out.mkdir(parents=True)
    cfg = json.loads((engine / "target" / "config.json").read_text())
    cfg.update(TINY, dtype="float16")
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    g = torch.Generator().manual_seed(0)
    h, i, d = cfg["hidden_size"], cfg["intermediate_size"], cfg["head_dim"]
    q, kv = cfg["num_attention_heads"] * d, cfg["num_key_value_heads"] * d

    def rand(*shape):
        return (torch.randn(*shape, generator=g) * 0.02).to(torch.float16)

    weights = {"model.embed_tokens.weight": rand(cfg["vocab_size"], h), "model.norm.weight": torch.ones(h).half()}
    for n in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{n}."
        weights.update({p + "self_attn.q_proj.weight": rand(q, h), p + "self_attn.k_proj.weight": rand(kv, h),
                        p + "self_attn.v_proj.weight": rand(kv, h), p + "self_attn.o_proj.weight": rand(h, q),
                        p + "mlp.gate_proj.weight": rand(i, h), p + "mlp.up_proj.weight": rand(i, h),
                        p + "mlp.down_proj.weight": rand(h, i), p + "input_layernorm.weight": torch.ones(h).half(),
                        p + "post_attention_layernorm.weight": torch.ones(h).half()})
    save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
    with_tokenizer(out, engine)
    return out


def embedded_checkpoint(out: Path, engine: Path) -> Path:
    """The embedded model as an HF checkpoint directory: its weights and config linked, its tokenizer copied."""
    out.mkdir(parents=True)
    for name in ("config.json", "model.safetensors"):
        os.symlink(engine / "target" / name, out / name)
    with_tokenizer(out, engine)
    return out


def profile_text(name: str, model: Path, **limits: int) -> str:
    lim = {"max_input_len": 1024, "max_seq_len": 1536, "max_batch_size": 2, **limits}
    return (f'name = "{name}"\nbackend = "edgellm"\nprefix_reuse = true\ncached_prefix_tokens = 2048\n'
            '[device]\nname = "cpu"\nmemory_gib = 8\n'
            f'[target]\nmodel = "{model}"\nweights = "fp16"\nkv_cache = "fp16"\ndtype = "float16"\n'
            "[limits]\n" + "".join(f"{k} = {v}\n" for k, v in lim.items()))
