"""The GPU check's baseline (orin_llm/bench/gpu.py, stage hf): transformers' generate with a static
cache, eager and compiled by transformers' own recipe, on the same shape, in a subprocess under a cap."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

from .gpu_run import CONFIG_3B, ROOT, TINY, Run, _sync


def hf_stage(run: Run, device: str, cap_s: float) -> dict:
    """transformers' generate in a subprocess (its compile can take long: a timeout bounds it)."""
    timeout = max(30.0, min(cap_s, run.left() - 15))
    res = Path("/tmp/orin_llm_gpu_hf.json")
    res.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "orin_llm.bench.gpu", "--hf-only", str(res), "--device", device,
           "--budget-s", str(timeout - 5)]
    if run.smoke:
        cmd.append("--cpu-smoke")
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{os.environ.get('PYTHONPATH', '')}"}
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
        tail = (proc.stdout + proc.stderr)[-2000:]
    except subprocess.TimeoutExpired:
        tail = f"timed out after {timeout:.0f} s"
    out = json.loads(res.read_text()) if res.is_file() else {}
    if not out:
        raise RuntimeError(f"no result from the transformers run: {tail}")
    out["log_tail"] = tail[-800:]
    return out


def hf_run(path: Path, device: str, smoke: bool, budget_s: float = 1e9) -> None:
    """The transformers baseline, written to `path` step by step (eager static cache first, then compiled)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = dict(TINY) if smoke else json.loads(CONFIG_3B.read_text())
    dtype = torch.bfloat16
    out: dict[str, Any] = {"dtype": "bfloat16", "layers": cfg["num_hidden_layers"]}
    t0 = time.perf_counter()
    config = LlamaConfig(**{k: v for k, v in cfg.items() if k not in ("architectures", "torch_dtype")})
    t = time.perf_counter()
    with torch.device(device):
        model = LlamaForCausalLM(config).to(dtype).eval()
    out["build_s"] = round(time.perf_counter() - t, 1)
    new = 16 if smoke else 64
    g = torch.Generator().manual_seed(0)
    compiled = {"on": False}

    def timed(batch: int) -> float:
        ids = torch.randint(1000, 40000, (batch, 64), generator=g).to(device)
        # disable_compile: transformers compiles a static-cache forward by itself; here only the explicit
        # torch.compile below does, so "eager" is eager
        kw = dict(max_new_tokens=new, min_new_tokens=new, do_sample=False, cache_implementation="static",
                  attention_mask=torch.ones_like(ids), pad_token_id=0, disable_compile=not compiled["on"])
        try:
            model.generate(ids, **kw)  # warm-up (and compilation)
        except (TypeError, ValueError) as e:  # a transformers without disable_compile
            if "disable_compile" not in str(e):
                raise
            kw.pop("disable_compile")
            model.generate(ids, **kw)
        _sync()
        start = time.perf_counter()
        model.generate(ids, **kw)
        _sync()
        return new / (time.perf_counter() - start)

    def save():
        path.write_text(json.dumps(out, indent=2))

    out["eager_static_tok_per_s_batch_1"] = round(timed(1), 1)
    save()
    # compiled: transformers' own recipe, a static cache makes generate compile the forward itself
    # (generation_config.compile_config: fullgraph, "reduce-overhead", its CUDA-graph steps marked); a
    # forward wrapped in torch.compile by hand failed there (its cache writes overwrite graph outputs)
    compiled["on"] = True
    if smoke:
        from transformers.generation.configuration_utils import CompileConfig

        model.generation_config.compile_config = CompileConfig(backend="eager")
    t = time.perf_counter()
    try:
        out["compiled_static_tok_per_s_batch_1"] = round(timed(1), 1)
        out["compiled_by"] = "transformers generate's own torch.compile (static cache, compile_config)"
    except Exception as e:  # noqa: BLE001 (then by hand, without CUDA graphs: what compiles)
        out["auto_compile_error"] = f"{type(e).__name__}: {str(e)[:400]}"
        save()
        compiled["on"] = False
        model.forward = torch.compile(model.forward, mode="max-autotune-no-cudagraphs", dynamic=False)
        out["compiled_static_tok_per_s_batch_1"] = round(timed(1), 1)
        out["compiled_by"] = "torch.compile(model.forward, mode='max-autotune-no-cudagraphs')"
    out["compile_and_run_s"] = round(time.perf_counter() - t, 1)
    save()
    if time.perf_counter() - t0 < budget_s / 2:  # a second shape compiles again
        out["compiled_static_tok_per_s_batch_8"] = round(timed(8), 1)
    out["note"] = f"tok/s counts the whole generate call of 64 prompt tokens + {new} new tokens, per request"
    save()
