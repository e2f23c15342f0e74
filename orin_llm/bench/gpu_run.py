"""The GPU check's run (orin_llm/bench/gpu.py): the JSON being written, its clock and stage runner,
the shapes it measures, and the small helpers every stage shares."""

from __future__ import annotations

import json
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

import torch

ROOT = Path(__file__).resolve().parents[2]
CONFIG_3B = ROOT / "jetson" / "models" / "llama-3.2-3b-instruct" / "config.json"
# the smoke run's shape: the tests' tiny Llama (tests/conftest.py), fewer layers
TINY = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256, "head_dim": 64,
        "intermediate_size": 512, "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 4,
        "vocab_size": 49152, "tie_word_embeddings": True, "rms_norm_eps": 1e-5, "rope_theta": 100000.0,
        "max_position_embeddings": 16384, "torch_dtype": "bfloat16"}
KV_SCALE_3B = 4.0 / 127  # K/V of a random 3B-shaped model stay within +-4 (hidden 3072, weights std 0.02)
KV_SCALE_TINY = 1.28 / 127


class Run:
    """The JSON being written, the clock, and the stages."""

    def __init__(self, out: Path, budget_s: float, smoke: bool, only: Optional[set[str]] = None):
        self.out, self.budget_s, self.smoke, self.only = out, budget_s, smoke, only
        self.t0 = time.perf_counter()
        from .common import machine

        self.data: dict[str, Any] = {
            "issue": 47, "mode": "cpu-smoke" if smoke else "gpu",
            "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "command": "bash bench/gpu_check.sh" + (" --cpu-smoke" if smoke else ""),
            "argv": sys.argv[1:], "machine": machine(),
            "stages": {}}

    def left(self) -> float:
        return self.budget_s - (time.perf_counter() - self.t0)

    def save(self) -> None:
        self.data["elapsed_s"] = round(time.perf_counter() - self.t0, 1)
        tmp = self.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=2, default=str) + "\n")
        tmp.replace(self.out)

    def stage(self, name: str, fn: Callable[[], dict], need_s: float) -> Optional[dict]:
        """Run one stage if `need_s` seconds are left; record its result or its error."""
        if self.only is not None and name not in self.only:
            return None
        if self.left() < need_s:
            self.data["stages"][name] = {"ok": False, "skipped": f"{self.left():.0f} s left, it needs ~{need_s:.0f}"}
            print(f"[gpu] {name}: skipped ({self.left():.0f} s left)", flush=True)
            self.save()
            return None
        print(f"[gpu] {name} ({self.left():.0f} s left)", flush=True)
        started = time.perf_counter()
        try:
            result = fn()
            self.data["stages"][name] = {"ok": True, "seconds": round(time.perf_counter() - started, 1), **result}
        except Exception as e:  # one stage's failure must not cost the others
            result = None
            self.data["stages"][name] = {"ok": False, "seconds": round(time.perf_counter() - started, 1),
                                         "error": f"{type(e).__name__}: {e}"[:2000],
                                         "traceback": traceback.format_exc()[-3000:]}
            print(f"[gpu] {name} failed: {type(e).__name__}: {e}", flush=True)
        self.save()
        if result is not None:
            print(f"[gpu] {name}: {json.dumps(_brief(result), default=str)[:600]}", flush=True)
        return result


def _brief(d: dict) -> dict:
    return {k: v for k, v in d.items() if not isinstance(v, (dict, list)) or len(str(v)) < 200}


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _free(device: str) -> None:
    import gc

    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def _ids(n: int, seed: int, repeat: bool = False) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    if repeat:  # a prompt that repeats itself: lookup speculation finds drafts in it
        base = torch.randint(1000, 40000, (max(1, n // 4),), generator=g).tolist()
        return (base * 4)[:n]
    return torch.randint(1000, 40000, (n,), generator=g).tolist()


def _gen(engine, ids: list[int], max_tokens: int, speculation: str = "none", constraint=None):
    from ..runtime.sampling import SamplingParams

    gen = engine.generate(ids, SamplingParams(max_tokens=max_tokens), speculation=speculation,
                          constraint=constraint)
    gen.stop_ids = set()  # random weights: a plan's end token must not end a timing early
    return gen
