"""A torch engine of a model's shape with random weights: honest for time and memory, never for what it
says (its plans are noise, so no acceptance, agreement or quality figure may come from it).

Why: the embedded SmolLM2-135M is an odd shape for timing ratios. Its 30 narrow layers attend over a
4k-token home with about as many multiply-adds per token as all its linear layers hold weights
(30 · 9 heads · 64 · 2 · 4k ≈ 141 M against ~106 M), where Llama 3.2 3B, the product's planner,
attends with ~0.7 G against ~3.2 G. A ratio such as issue #15's warm plan / task alone is mostly that
proportion, so it is measured on both shapes (docs/BENCHMARKS.md).

What is written is what `orin-llm build` writes for a Q4_1 target (runtime/weights.py), from a
config.json (jetson/models/*/config.json) instead of a GGUF:

- target/q4_1.safetensors: every decoder linear layer as Q4_1 blocks of uniform random codes, with
  fp16-exact scales (weights of standard deviation ~0.02, as an initialised Llama's), and the
  embedding as Q8_0 blocks (the tied head runs on them, runtime/head.py);
- target/model.safetensors: the norms (ones) and the embedding's float values; no float linear
  weights (loading q4_1 never reads them);
- the tokenizer, chat template and EOS ids of another torch engine (the embedded one's): ids past its
  vocabulary never come out as text, and the model's own vocabulary size is kept, so the embedding and
  the head cost what the real model's do;
- INT8 KV scales calibrated as a build does (build/calibrate.py), on a few items of the calib split,
  or one fixed scale for every layer and KV head (kv_scale: the tests' tiny engine, written in seconds).

With draft_layers, a draft model too: the target's first layers with the same weights (a random
model's layers each move the residual stream a little, so it agrees with the target often, not always:
both the accepted and the rejected paths of speculation run).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Optional

import torch

from ..arch import arch_from_config_file
from ..errors import OrinError
from ..kernels.quant import GGUF_BLOCK
from ..manifest import load_manifest, write_manifest
from ..profile import ModelSpec, embedded_profile
from ..runtime.weights import Q4_1_FILE
from .common import progress

WEIGHT_STD = 0.02  # an initialised Llama's (config initializer_range)
_PROJ = {"self_attn": ("q_proj", "k_proj", "v_proj", "o_proj"), "mlp": ("gate_proj", "up_proj", "down_proj")}


def _fp16_exact(x: torch.Tensor) -> torch.Tensor:
    return x.half().float()  # the loader keeps scales as fp16 where each one is exact in it (q8_dot)


def _q4_1(out: int, inp: int, g: torch.Generator) -> dict[str, torch.Tensor]:
    """Uniform codes 0..15 around zero: scale·(q − 7.5) has standard deviation 4.61·scale."""
    blocks = inp // GGUF_BLOCK
    scales = _fp16_exact(torch.full((out, blocks), WEIGHT_STD / 4.61))
    codes = torch.randint(0, 256, (out, inp // 2), dtype=torch.uint8, generator=g)
    return {"qweight": codes, "scales": scales, "mins": _fp16_exact(-7.5 * scales)}


def _shapes(cfg: dict) -> dict[str, tuple[int, int]]:
    h, d = cfg["hidden_size"], cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    q, kv, ff = cfg["num_attention_heads"] * d, cfg["num_key_value_heads"] * d, cfg["intermediate_size"]
    return {"q_proj": (q, h), "k_proj": (kv, h), "v_proj": (kv, h), "o_proj": (h, q),
            "gate_proj": (ff, h), "up_proj": (ff, h), "down_proj": (h, ff)}


def write_weights(cfg: dict, target: Path, seed: int = 0) -> None:
    from safetensors.torch import save_file

    if not cfg.get("tie_word_embeddings", False):
        raise OrinError("a shaped engine ties its head to the embedding (as Llama 3.2 1B/3B do); "
                        "this config.json has tie_word_embeddings false")
    g = torch.Generator().manual_seed(seed)
    shapes, h, vocab = _shapes(cfg), cfg["hidden_size"], cfg["vocab_size"]
    if any(i % GGUF_BLOCK or o % 8 for o, i in shapes.values()) or h % GGUF_BLOCK:
        raise OrinError(f"shapes {shapes} are not whole Q4_1 blocks of {GGUF_BLOCK} (and 8 output rows)")
    quant: dict[str, torch.Tensor] = {}
    for layer in range(cfg["num_hidden_layers"]):
        for module, names in _PROJ.items():
            for name in names:
                for k, t in _q4_1(*shapes[name], g).items():
                    quant[f"model.layers.{layer}.{module}.{name}.{k}"] = t
    codes = torch.randint(-127, 128, (vocab, h), dtype=torch.int8, generator=g)
    scales = _fp16_exact(torch.full((vocab, h // GGUF_BLOCK), WEIGHT_STD / 73.3))  # uniform ±127: σ 73.3
    quant["model.embed_tokens.codes"], quant["model.embed_tokens.scales"] = codes, scales
    save_file(quant, str(target / Q4_1_FILE), metadata={"format": "pt", "orin_llm_weights": "q4_1"})
    embed = (codes.view(vocab, h // GGUF_BLOCK, GGUF_BLOCK).float() * scales[..., None]).view(vocab, h)
    other = {"model.embed_tokens.weight": embed, "model.norm.weight": torch.ones(h)}
    for layer in range(cfg["num_hidden_layers"]):
        for norm in ("input_layernorm", "post_attention_layernorm"):
            other[f"model.layers.{layer}.{norm}.weight"] = torch.ones(h)
    save_file(other, str(target / "model.safetensors"), metadata={"format": "pt", "orin_llm_weights": "q4_1"})


def _tokenizer_files(source: Path) -> tuple[Path, Optional[Path]]:
    """The tokenizer dir and generation_config.json of a torch engine, or of a dir that holds an
    exported tokenizer (build/convert.py export_tokenizer) and, optionally, a generation_config.json."""
    if not (source / "manifest.json").is_file():
        if not (source / "tokenizer.json").is_file():
            raise OrinError(f"{source}: neither an engine nor a tokenizer dir (no manifest.json, no tokenizer.json)")
        gen = source / "generation_config.json"
        return source, gen if gen.is_file() else None
    tok = load_manifest(source)
    if tok.backend != "torch":
        raise OrinError(f"{source}: the tokenizer comes from a torch engine")
    return source / "tokenizer", source / tok.target.dir / "generation_config.json"


def _write_draft(target: Path, draft: Path, cfg: dict, layers: int) -> None:
    """The target's first `layers` layers, its embedding and final norm: the same tensors."""
    from safetensors.torch import load_file, save_file

    if not 0 < layers < cfg["num_hidden_layers"]:
        raise OrinError(f"draft_layers {layers}: a draft keeps 1 to {cfg['num_hidden_layers'] - 1} layers")
    draft.mkdir()
    dropped = tuple(f"model.layers.{i}." for i in range(layers, cfg["num_hidden_layers"]))
    for name in (Q4_1_FILE, "model.safetensors"):
        tensors = load_file(str(target / name))
        save_file({k: v for k, v in tensors.items() if not k.startswith(dropped)}, str(draft / name),
                  metadata={"format": "pt", "orin_llm_weights": "q4_1"})
    (draft / "config.json").write_text(json.dumps({**cfg, "num_hidden_layers": layers}, indent=2) + "\n")
    for name in ("generation_config.json",):
        if (target / name).is_file():
            shutil.copy(target / name, draft / name)


def write_shaped_engine(config: Path, out: Path, tokenizer_engine: Path, calibration_size: int = 4,
                        force: bool = False, seed: int = 0, kv_scale: Optional[float] = None,
                        draft_layers: Optional[int] = None, memory_gib: Optional[float] = None) -> Path:
    """An engine directory at `out` of `config`'s shape (module doc), the embedded profile's settings
    otherwise (Q4_1 weights, INT8 KV, limits, cached prefix tokens), no draft model unless
    draft_layers. tokenizer_engine: a torch engine, or a dir with an exported tokenizer.
    kv_scale: the INT8 KV scale of every layer and KV head, instead of calibrating.
    memory_gib: the memory of the machine that will run it (a GPU's), where the embedded profile's
    24 GiB is not that machine's: the memory plan is checked against it."""
    from tokenizers import Tokenizer

    from ..build.calibrate import SCALES_FILE, calibrate_engine, write_scales
    from ..build.memory import check_feasible, plan_memory
    from ..build.pipeline import _entry, _manifest, staged
    from ..build.source import resolve_source

    if out.exists() and not force:
        raise OrinError(f"{out} already exists; pass force to replace it")
    if not config.is_file():
        raise OrinError(f"{config}: no such config.json")
    tok_dir, gen_config = _tokenizer_files(tokenizer_engine)
    cfg = json.loads(config.read_text())
    words = Tokenizer.from_file(str(tok_dir / "tokenizer.json")).get_vocab_size()
    if cfg["vocab_size"] < words:
        raise OrinError(f"{config}: vocab_size {cfg['vocab_size']} is smaller than the tokenizer's {words} "
                        f"({tokenizer_engine}): its ids would index past the embedding")
    name = f"{config.parent.name}-shaped-random"
    base = embedded_profile()
    spec = ModelSpec(model=str(config.parent), weights="q4_1", kv_cache="int8", dtype="float32")
    # the memory plan sizes a draft from the profile's model: the target's config (an upper bound)
    profile = base.model_copy(update={
        "name": name, "draft": spec if draft_layers else None, "calibration_size": calibration_size,
        "target": spec,
        **({"device": base.device.model_copy(update={"memory_gib": memory_gib})} if memory_gib else {})})
    plan = check_feasible(plan_memory(profile))  # infeasible here: refused with the numbers
    with staged(out) as tmp:
        target = tmp / "target"
        target.mkdir()
        shutil.copy(config, target / "config.json")
        if gen_config is not None:
            shutil.copy(gen_config, target / "generation_config.json")
        shutil.copytree(tok_dir, tmp / "tokenizer")
        arch_from_config_file(target)  # a config this runtime cannot run is refused before the weights
        progress(f"shaped engine: random Q4_1 weights of {config} ({cfg['num_hidden_layers']} layers)")
        write_weights(cfg, target, seed)
        if draft_layers:
            _write_draft(target, tmp / "draft", cfg, draft_layers)
        roles = ("target", "draft") if draft_layers else ("target",)
        if kv_scale is not None:
            for role in roles:
                arch = arch_from_config_file(tmp / role)
                full = torch.full((arch.num_layers, arch.num_kv_heads), kv_scale * 127)
                write_scales(tmp / role / SCALES_FILE, full, full, {"fixed": str(kv_scale), "role": role})
        source = resolve_source(str(config.parent))
        entries = {role: _entry(tmp, role, spec, source, []) for role in roles}
        if kv_scale is not None:
            for role, entry in entries.items():
                entry.kv_cache.scales = f"{role}/{SCALES_FILE}"
        write_manifest(tmp, _manifest(profile, tmp, entries["target"], entries.get("draft"), plan))
        if kv_scale is None:
            progress(f"shaped engine: calibrating INT8 KV scales on {calibration_size} items of the calib split")
            calibrate_engine(tmp, "calib", calibration_size, quiet=False)
    return out
