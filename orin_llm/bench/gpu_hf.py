"""The GPU check's baselines (orin_llm/bench/gpu.py, stage hf), in the same run as our figures:
transformers' generate with a static cache, compiled by transformers' own recipe, on the same shape, in
bf16 and with torch's int4 kernel in every linear (the same quantization as ours: what is left of a
ratio against it is the runtime's, not the weights' bytes); in a subprocess under a cap. A compile that
fails is recorded, not retried another way (the run has minutes)."""

from __future__ import annotations

import json
import os
import statistics
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
    """The transformers baselines, written to `path` as each lands: bf16 compiled (static cache), then
    the same model with torch's int4 kernel in every linear (the same quantization as ours: Q4_1's
    values on _weight_int4pack_mm, the head's too), compiled; then bf16 eager where time is left. Each
    figure the median of REPEATS timed calls after a warm-up (and compilation) call."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from .gpu_decode import REPEATS

    cfg = dict(TINY) if smoke else json.loads(CONFIG_3B.read_text())
    dtype = torch.bfloat16
    new = 16 if smoke else 64
    out: dict[str, Any] = {"dtype": "bfloat16", "layers": cfg["num_hidden_layers"], "repeats": REPEATS,
                           "note": f"tok/s counts the whole generate call of 64 prompt tokens + {new} new tokens, "
                                   "per request; the median of the repeats"}
    t0 = time.perf_counter()
    config = LlamaConfig(**{k: v for k, v in cfg.items() if k not in ("architectures", "torch_dtype")})

    def save():
        path.write_text(json.dumps(out, indent=2))

    def build(int4: bool):
        t = time.perf_counter()
        with torch.device(device):
            model = LlamaForCausalLM(config).to(dtype).eval()
        if int4:
            out["int4_layers"] = int4_linears(model)
        out[f"{'int4' if int4 else 'bf16'}_build_s"] = round(time.perf_counter() - t, 1)
        if smoke:  # (the CPU smoke run checks the plumbing: no inductor build on a CPU)
            from transformers.generation.configuration_utils import CompileConfig

            model.generation_config.compile_config = CompileConfig(backend="eager")
        return model

    for label, int4 in (("compiled_static", False), ("int4_compiled_static", True)):
        model = build(int4)
        t = time.perf_counter()
        try:
            runs = _timed(model, device, 1, new, compiled=True)
        except Exception as e:  # noqa: BLE001 (the error is the finding; the other baseline still runs)
            out[f"{label}_error"] = f"{type(e).__name__}: {str(e)[:400]}"
            save()
            del model
            continue
        out[f"{label}_tok_per_s_batch_1"] = round(statistics.median(runs), 1)
        out[f"{label}_repeats"] = [round(r, 1) for r in runs]
        out[f"{label}_compile_and_run_s"] = round(time.perf_counter() - t, 1)
        out["compiled_by"] = "transformers generate's own torch.compile (static cache, compile_config)"
        save()
        if not int4 and time.perf_counter() - t0 < budget_s / 2:
            eager = _timed(model, device, 1, new, compiled=False)
            out["eager_static_tok_per_s_batch_1"] = round(statistics.median(eager), 1)
            save()
        del model
        if device == "cuda":
            torch.cuda.empty_cache()


def _timed(model, device: str, batch: int, new: int, compiled: bool) -> list[float]:
    """tok/s per request of REPEATS generate calls after one untimed (compiling) call."""
    from .gpu_decode import REPEATS

    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, 40000, (batch, 64), generator=g).to(device)
    # disable_compile: transformers compiles a static-cache forward by itself; "eager" is eager
    kw = dict(max_new_tokens=new, min_new_tokens=new, do_sample=False, cache_implementation="static",
              attention_mask=torch.ones_like(ids), pad_token_id=0, disable_compile=not compiled)
    model.generate(ids, **kw)
    runs = []
    for _ in range(REPEATS):
        _sync()
        start = time.perf_counter()
        model.generate(ids, **kw)
        _sync()
        runs.append(new / (time.perf_counter() - start))
    return runs


def int4_linears(model: torch.nn.Module) -> str:
    """Every nn.Linear of `model` (the head's too) quantized to Q4_1 and put on torch's int4 kernel
    (cuda_linear.Int4PackLinear, what our runtime runs where it is faster), in place; on a CPU a
    dequantized stand-in (the plumbing only). Returns the kernel, in words."""
    from ..kernels.cuda_linear import Int4PackLinear
    from ..kernels.quant import QuantLinear
    from ..kernels.triton.q4_linear import quantize_q4_1

    names = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    words = "torch's int4 kernel (aten._weight_int4pack_mm), Q4_1 values, every linear"
    for name in names:
        lin = model.get_submodule(name)
        qweight, scales, mins = quantize_q4_1(lin.weight.data)
        q = QuantLinear(qweight, scales, torch.float32, mins)
        layer, why = Int4PackLinear.build(q, torch.bfloat16)
        if layer is None:
            if lin.weight.is_cuda:
                raise RuntimeError(f"{name}: {why}")
            layer, words = _Dequantized(q.dequantize().to(lin.weight.dtype)), f"dequantized stand-in ({why})"
        model.set_submodule(name, layer)
    return words


class _Dequantized(torch.nn.Module):
    """The CPU stand-in: no `weight` attribute, as Int4PackLinear has none (so the smoke run finds any
    transformers code that reaches for one)."""

    def __init__(self, w: torch.Tensor):
        super().__init__()
        self.register_buffer("dequantized", w)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(x, self.dequantized)
