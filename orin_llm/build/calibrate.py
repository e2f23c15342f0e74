"""Static INT8 KV scales from the calibration split: run the model with a full-precision cache,
record per-layer, per-KV-head absmax of K (after RoPE, as stored) and V, scale = absmax / 127.

Each home's prefix is computed once and every task of that home runs on top of it (the prefix
is most of each prompt), so calibrating 240 prompts costs about one prefill per home.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from pathlib import Path
from typing import Optional

import torch
from safetensors.torch import save_file

from ..errors import OrinError
from ..planning.calibration_data import CalibrationItem, load_home, load_split
from ..planning.home import prefix_messages, task_message
from ..progress import Counter
from ..runtime import k_smoothing
from ..runtime.kv_cache import AbsmaxObserver

SCALES_FILE = "kv_scales.safetensors"


def interleave_by_home(items: list[CalibrationItem], limit: Optional[int]) -> list[CalibrationItem]:
    """Round-robin over homes so that any first N items cover as many homes as possible."""
    by_home: dict[str, list[CalibrationItem]] = defaultdict(list)
    for it in items:
        by_home[it.home].append(it)
    mixed = [it for group in itertools.zip_longest(*by_home.values()) for it in group if it is not None]
    return mixed[:limit] if limit else mixed


def sequences(engine, items: list[CalibrationItem], root: Optional[Path] = None):
    """(prefix ids, [ids of each item's task + reference answer]) per home, tokenized the way the
    planner does: prefix and rest separately (docs/ARCHITECTURE.md, invariant 2)."""
    by_home: dict[str, list[CalibrationItem]] = defaultdict(list)
    for it in items:
        by_home[it.home].append(it)
    for home, group in by_home.items():
        env = load_home(home, root)
        prefix_text = engine.chat_text(prefix_messages(env), add_generation_prompt=False)
        rests = []
        for it in group:
            answer = {"role": "assistant", "content": "\n".join(it.reference_plan)}
            full = engine.chat_text(prefix_messages(env) + [task_message(it.task), answer],
                                    add_generation_prompt=False)
            rests.append(engine.encode(full[len(prefix_text):]))
        yield engine.encode(prefix_text), rests


def observe(model, seqs, capacity: int, dtype: torch.dtype,
            progress: Optional[Counter] = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per layer and KV head, the K and V absmax; and K's per channel (k_smoothing.py)."""
    device = model.device
    cache = AbsmaxObserver(model.arch, capacity, dtype, device)
    for prefix, rests in seqs:
        cache.crop(0)
        model(torch.tensor(prefix, device=device), cache)
        for rest in rests:
            cache.crop(len(prefix))
            model(torch.tensor(rest, device=device), cache)
            if progress is not None:
                progress.advance()
    if not torch.all(cache.k_absmax > 0):
        raise OrinError("calibration saw no K/V for some layer or head; is the calibration split empty?")
    return cache.k_absmax, cache.v_absmax, cache.k_channel_absmax


def write_scales(path: Path, k_absmax: torch.Tensor, v_absmax: torch.Tensor, meta: dict[str, str],
                 k_channel_absmax: Optional[torch.Tensor] = None) -> None:
    """absmax/127 per layer and KV head; with K's per-channel absmax, also the K smoothing factors
    (k_smoothing.py) and K's scales for the smoothed keys (the same: the largest channels keep theirs)."""
    tensors = {"v_scale": (v_absmax / 127).contiguous()}
    method = "absmax/127 per layer per kv head"
    if k_channel_absmax is None:
        tensors["k_scale"] = (k_absmax / 127).contiguous()
    else:
        s = k_smoothing.factors(k_channel_absmax)
        tensors["k_scale"] = (k_smoothing.smoothed_absmax(k_channel_absmax, s) / 127).contiguous()
        tensors[k_smoothing.KEY] = s
        method += f"; K smoothed per RoPE channel pair (factors in [1, {k_smoothing.MAX_FACTOR:g}])"
    save_file(tensors, str(path), metadata={"method": method, **meta})


def calibrate(engine, split: str = "calib", limit: Optional[int] = None,
              root: Optional[Path] = None, quiet: bool = True) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Absmax statistics for the target (and the draft, if the engine has one), with a progress line
    prompt by prompt (stderr) unless quiet."""
    items = interleave_by_home(load_split(split, root), limit)
    seqs = list(sequences(engine, items, root))
    capacity = max(len(p) + max(len(r) for r in rs) for p, rs in seqs)
    draft = engine.load_draft()
    models = {"target": engine.model, **({"draft": draft} if draft is not None else {})}
    progress = Counter(f"calibrating ({' and '.join(models)}, {len(seqs)} homes)", len(items) * len(models),
                       unit="prompts", quiet=quiet)
    return {role: observe(model, seqs, capacity, torch.float32, progress) for role, model in models.items()}


def calibrate_engine(engine_dir: Path, split: str = "calib", limit: Optional[int] = None,
                     root: Optional[Path] = None, device: str = "cpu", quiet: bool = True):
    """Derive KV scales for an engine dir and record them in its manifest."""
    from ..manifest import file_entry, write_manifest
    from ..runtime.engine import Engine
    from ..runtime.engine_config import EngineConfig

    engine = Engine.load(engine_dir, EngineConfig.at_edge(device=device, kv_cache="fp32"))
    stats = calibrate(engine, split, limit, root, quiet=quiet)
    manifest = engine.manifest
    n = len(interleave_by_home(load_split(split, root), limit))
    for role, (k_absmax, v_absmax, k_channel) in stats.items():
        entry = manifest.target if role == "target" else manifest.draft
        rel = f"{entry.dir}/{SCALES_FILE}"
        write_scales(engine_dir / rel, k_absmax, v_absmax, {"split": split, "items": str(n), "role": role}, k_channel)
        entry.kv_cache.scales = rel
        entry.files = [f for f in entry.files if f.path != rel] + [file_entry(engine_dir / rel, engine_dir)]
    write_manifest(engine_dir, manifest)
    return manifest
