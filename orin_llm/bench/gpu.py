"""The GPU check (issue 36): one run on a CUDA machine with nothing from the network, one JSON.

    python -m orin_llm.bench.gpu --out gpu_check.json [--tokenizer DIR] [--budget-s 330]
    python -m orin_llm.bench.gpu --out smoke.json --cpu-smoke      (the plumbing, on tiny shapes, on a CPU)

bench/gpu_check.sh installs the wheels that travel with the repo and calls this. Each stage runs under
the time left and inside try/except: a stage that fails or has no time left records why, the JSON is
rewritten after every stage (and once more, with the goals, however the run ends), and the others
still run. Stages, the numbers that settle the issue's goals first:

1. env, bandwidth (a device-to-device copy: bytes read + written); tests: the CUDA tests in groups,
   each a subprocess under its own cap (gpu_tests.py): the new kernels at a 3B layer's shapes first;
   one that fails is turned off for the measurements after it (`gated` in the JSON);
2. a Llama-3.2-3B-shaped engine with random weights (orin_llm/bench/shaped.py; fixed INT8 KV scales:
   random weights have nothing to calibrate) loaded on the CUDA path (Q4_1 on the int4 kernel chosen
   per layer shape at load, INT8 KV, CUDA graphs, the step's small ops fused, the Triton prefill):
   decode_int4 (batch 1), then decode_int4pack and decode_gemv (each int4 kernel forced) and
   decode_unfused (the step's small ops unfused) side by side; roofline: the bytes a batch-1 step
   must read (weights as held, K/V at its context) over the measured bandwidth, and each one's share;
3. hf: transformers' generate with a static cache and torch.compile on the same shape (a subprocess);
4. decode_batches (4 and 8), home (TTFT with a 4k-token home cold and pinned, a warm plan against the
   task alone), speculation (greedy output with lookup, draft and combined against plain decoding),
   profile (where a batch-1 step's and a prompt chunk's GPU time goes); peak memory in each decode;
5. with what time is left: int4_kernel (each int4 kernel per layer shape at 1, 9, 72 and 256 rows,
   timed as CUDA graphs of calls), fp16 (our dense bf16 layers, FP16 KV), compiled (ORIN_LLM_COMPILE),
   no_graphs (eager decode), tests_rest (the other CUDA tests).

The figures are honest for time and memory only: random weights say nothing (shaped.py).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
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
            "issue": 36, "mode": "cpu-smoke" if smoke else "gpu",
            "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "command": "bash bench/gpu_check.sh" + (" --cpu-smoke" if smoke else ""), "machine": machine(),
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


# ---------------------------------------------------------------------------------------------- stages


def env_stage(device: str) -> dict:
    out: dict[str, Any] = {"python": sys.version.split()[0], "torch": torch.__version__, "device": device}
    for mod in ("triton", "transformers", "numpy", "safetensors", "llguidance", "pydantic"):
        try:
            out[mod] = __import__(mod).__version__
        except Exception as e:  # noqa: BLE001 (a missing package is a finding)
            out[mod] = f"missing ({type(e).__name__})"
    if device == "cuda":
        p = torch.cuda.get_device_properties(0)
        out.update(gpu=p.name, capability=f"{p.major}.{p.minor}", memory_gib=round(p.total_memory / 2**30, 1),
                   sms=p.multi_processor_count, cuda=torch.version.cuda)
    return out


def bandwidth_stage(device: str, smoke: bool) -> dict:
    """A device-to-device copy: (bytes read + bytes written) / time, best of 10 after warm-up."""
    n = (16 << 20) if smoke else (2 << 30)
    a = torch.empty(n, dtype=torch.uint8, device=device)
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    _sync()
    best = float("inf")
    for _ in range(10):
        t = time.perf_counter()
        b.copy_(a)
        _sync()
        best = min(best, time.perf_counter() - t)
    del a, b
    return {"bytes_copied": n, "gb_per_s": round(2 * n / best / 1e9, 1), "counting": "read + written"}


def write_engine(run: Run, tokenizer: Path, out: Path) -> dict:
    from ..bench.shaped import write_shaped_engine
    from ..manifest import load_manifest, write_manifest

    if run.smoke:
        cfg = out.parent / "tiny" / "config.json"
        cfg.parent.mkdir(parents=True, exist_ok=True)
        cfg.write_text(json.dumps(TINY))
        scale, draft = KV_SCALE_TINY, 2
    else:
        cfg, scale, draft = CONFIG_3B, KV_SCALE_3B, 2
    memory = torch.cuda.get_device_properties(0).total_memory / 2**30 if torch.cuda.is_available() else None
    write_shaped_engine(cfg, out, tokenizer, kv_scale=scale, draft_layers=draft, force=True, memory_gib=memory)
    m = load_manifest(out)
    m.limits["max_batch_size"] = 8  # batch 8 is measured; the pool is sized below (kv_tokens)
    write_manifest(out, m)
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    return {"config": str(cfg.relative_to(ROOT) if cfg.is_relative_to(ROOT) else cfg.name),
            "bytes_on_disk": size, "kv_scale": scale, "draft_layers": draft}


def _ids(n: int, seed: int, repeat: bool = False) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    if repeat:  # a prompt that repeats itself: lookup speculation finds drafts in it
        base = torch.randint(1000, 40000, (max(1, n // 4),), generator=g).tolist()
        return (base * 4)[:n]
    return torch.randint(1000, 40000, (n,), generator=g).tolist()


def _gen(engine, ids: list[int], max_tokens: int, speculation: str = "none"):
    from ..runtime.sampling import SamplingParams

    gen = engine.generate(ids, SamplingParams(max_tokens=max_tokens), speculation=speculation)
    gen.stop_ids = set()  # random weights: a plan's end token must not end a timing early
    return gen


def load_engine(path: Path, device: str, **kw):
    from ..runtime.engine import Engine

    t = time.perf_counter()
    eng = Engine.load(path, device=device, kv_tokens=8 * 4096 + 8192, **kw)
    return eng, time.perf_counter() - t


def engine_report(eng, load_s: float) -> dict:
    k = eng.kernels()
    return {"load_s": round(load_s, 1), "kernels": {n: k.get(n) for n in (
        "device", "weights", "kv_cache", "int4_cuda_linear", "triton_int4_linear", "cuda_graphs", "torch_compile",
        "triton_step_ops", "triton_prefill_attention", "rows_independent", "exact_decode_width", "int4_layers")},
        "steps": k.get("steps", {}).get("int8")}


def decode_stage(eng, batches: tuple[int, ...], prompt: int, tokens: int, device: str) -> dict:
    """Steady decode: B requests prefilled, then timed from every request's first token to the last."""
    out: dict[str, Any] = {}
    for b in batches:
        eng.tune(max_running=b)
        # a first pass of the same shape, untimed: graphs are captured as the context crosses buckets
        warm = [_gen(eng, _ids(prompt, 50 + i), tokens) for i in range(b)]
        for g in warm:
            eng.submit(g)
        while eng.busy:
            eng.step()
        gens = [_gen(eng, _ids(prompt, 100 + i), tokens) for i in range(b)]
        for g in gens:
            eng.submit(g)
        while any(not g.out for g in gens):
            eng.step()
        _sync()
        start, before = time.perf_counter(), sum(len(g.out) for g in gens)
        steps = eng.steps
        while eng.busy:
            eng.step()
        _sync()
        dt = time.perf_counter() - start
        made = sum(len(g.out) for g in gens) - before
        out[f"batch_{b}"] = {"tok_per_s_per_request": round(made / b / dt, 1),
                             "tok_per_s_total": round(made / dt, 1),
                             "steps": eng.steps - steps, "step_ms": round(1000 * dt / max(1, eng.steps - steps), 3),
                             "tokens": made}
    eng.tune(max_running=eng.capabilities.max_batch)
    if device == "cuda":
        out["peak_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    if eng.model.graphs is not None:
        out["graphs"] = eng.model.graphs.report()
        out["replay_ms"] = replay_ms(eng)
    return out


def replay_ms(eng, reps: int = 50) -> dict:
    """Each captured graph's replay alone (the GPU's part of a decode step, no Python around it)."""
    out = {}
    for (b, nb), entry in sorted(eng.model.graphs.entries.items()):
        if entry.graph is None:
            continue
        entry.graph.replay()
        _sync()
        t = time.perf_counter()
        for _ in range(reps):
            entry.graph.replay()
        _sync()
        out[f"{b}x{nb}"] = round(1000 * (time.perf_counter() - t) / reps, 3)
    return out


def _top(prof, steps: int, n: int = 12) -> dict:
    """The profile's ops by GPU time and by their own CPU time, per step (ms) and calls per step."""
    ka = prof.key_averages()

    def gpu(e) -> float:
        return float(getattr(e, "device_time_total", 0) or getattr(e, "cuda_time_total", 0) or 0)

    def rows(key) -> list:
        return [[e.key[:90], round(key(e) / steps / 1000, 3), round(e.count / steps, 1)]
                for e in sorted(ka, key=key, reverse=True)[:n]]

    return {"gpu_ms_per_step": round(sum(gpu(e) for e in ka if e.key.startswith(("void", "triton", "Memcpy",
                                                                                    "ampere", "sm90", "cutlass"))
                                         ) / steps / 1000, 3),
            "by_gpu_time": rows(gpu), "by_cpu_self_time": rows(lambda e: float(e.self_cpu_time_total)),
            "columns": ["op", "ms per step", "calls per step"]}


def profile_stage(eng, smoke: bool) -> dict:
    """Where a step's time goes: torch.profiler over batch-1 decode steps and over a prompt's chunks."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    out: dict[str, Any] = {}
    n = 3 if smoke else 16
    eng.tune(max_running=1)
    gen = _gen(eng, _ids(64, 300), n + 8)
    eng.submit(gen)
    while not gen.out:
        eng.step()
    for _ in range(3):  # (graphs for this length captured before the window)
        eng.step()
    _sync()
    t = time.perf_counter()
    with profile(activities=acts) as prof:
        for _ in range(n):
            eng.step()
        _sync()
    out["decode_batch_1"] = {"wall_ms_per_step": round(1000 * (time.perf_counter() - t) / n, 3), **_top(prof, n)}
    while eng.busy:
        eng.step()
    chunks = 2
    gen = _gen(eng, _ids(chunks * eng.prefill_chunk_tokens + 8, 301), 1)
    eng.submit(gen)
    _sync()
    t = time.perf_counter()
    with profile(activities=acts) as prof:
        for _ in range(chunks):
            eng.step()
        _sync()
    out["prefill_chunk"] = {"tokens": eng.prefill_chunk_tokens,
                            "wall_ms_per_chunk": round(1000 * (time.perf_counter() - t) / chunks, 3),
                            **_top(prof, chunks)}
    while eng.busy:
        eng.step()
    eng.tune(max_running=eng.capabilities.max_batch)
    return out


def step_bytes(eng, context: int) -> dict:
    """The bytes a batch-1 decode step must read: every weight the step multiplies by, as held (the
    embedding's one row aside), and the K/V of `context` tokens."""
    model, seen, weights = eng.model, set(), 0
    emb = model.embed_tokens
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        if t is None or t.data_ptr() in seen or name in ("cos", "sin") or name.startswith("embed_tokens"):
            continue
        seen.add(t.data_ptr())
        weights += t.numel() * t.element_size()
    head = model.lm_head
    if hasattr(head, "weight") and head.weight.data_ptr() not in seen:
        weights += head.weight.numel() * head.weight.element_size()
    kv = context * eng.cache.target_pool.bytes_per_token
    return {"weights_bytes": weights, "kv_bytes": kv, "total_bytes": weights + kv, "context": context,
            "embedding_bytes_not_counted": sum(t.numel() * t.element_size() for t in emb.buffers())}


def speculation_stage(eng, tokens: int) -> dict:
    ids = _ids(96, 7, repeat=True)
    eng.clear_cache()
    plain = eng.run(_gen(eng, ids, tokens, "none"))
    out: dict[str, Any] = {"tokens": len(plain.token_ids)}
    for mode in ("lookup", "draft_model", "combined"):
        eng.clear_cache()
        t = time.perf_counter()
        res = eng.run(_gen(eng, ids, tokens, mode))
        out[mode] = {"identical": res.token_ids == plain.token_ids, "accepted": res.speculation.accepted,
                     "drafted": res.speculation.drafted, "steps": res.speculation.steps,
                     "seconds": round(time.perf_counter() - t, 2)}
        if res.token_ids != plain.token_ids:
            pairs = zip(res.token_ids, plain.token_ids, strict=False)
            first = next((i for i, (a, b) in enumerate(pairs) if a != b), None)
            out[mode]["first_difference_at"] = first
    out["all_identical"] = all(out[m]["identical"] for m in ("lookup", "draft_model", "combined"))
    return out


def home_stage(eng, home_tokens: int, task_tokens: int, plan_tokens: int) -> dict:
    home, task = _ids(home_tokens, 11), _ids(task_tokens, 12)
    eng.clear_cache()
    cold = eng.run(_gen(eng, home + task, plan_tokens))
    pin = eng.pin(home)
    try:
        warm = eng.run(_gen(eng, home + task, plan_tokens))
        warm2 = eng.run(_gen(eng, home + _ids(task_tokens, 13), plan_tokens))
    finally:
        eng.unpin(pin)
    alone = eng.run(_gen(eng, task, plan_tokens))
    alone2 = eng.run(_gen(eng, _ids(task_tokens, 14), plan_tokens))
    t_alone = min(alone.timings.total_s, alone2.timings.total_s)
    t_warm = min(warm.timings.total_s, warm2.timings.total_s)
    return {"home_tokens": home_tokens, "task_tokens": task_tokens, "plan_tokens": plan_tokens,
            "ttft_cold_ms": round(1000 * cold.timings.ttft_s, 1), "ttft_warm_ms": round(1000 * warm2.timings.ttft_s, 1),
            "cached_prompt_tokens_warm": warm2.timings.cached_prompt_tokens,
            "plan_warm_s": round(t_warm, 3), "plan_task_alone_s": round(t_alone, 3),
            "warm_over_alone": round(t_warm / t_alone, 2)}


def int4_kernel_stage(device: str, smoke: bool) -> dict:
    """Per Llama 3.2 3B layer shape, each int4 kernel's GPU time per call at 1 row, the decode step's 9
    (batch 1), 72 (batch 8) and a 256-row prompt chunk: torch's int4 kernel, the Triton GEMV's candidate
    tiles, the Triton tiled kernel, and the layer dequantized to bf16 (what the bytes alone would allow,
    at 4x the bytes), each timed as a CUDA graph of calls (cuda_linear.time_us: no Python launch cost,
    unlike run 2's figures); and each shape's bytes over the measured bandwidth."""
    from ..kernels.cuda_linear import Int4PackLinear, TritonQ4Gemv, TritonQ4Linear, TritonQ8Head, time_us
    from ..kernels.quant import QuantLinear
    from ..kernels.triton.int4_gemv import CANDIDATES

    shapes = {"qkv": (5120, 3072), "o": (3072, 3072), "gate_up": (16384, 3072), "down": (3072, 8192)}
    if smoke:
        shapes = {"qkv": (512, 256)}
    if device != "cuda":
        return {"skipped": "needs a CUDA device (the kernels are CUDA's)"}
    out: dict[str, Any] = {"timing": "GPU time per call, a CUDA graph of 20 calls replayed 5 times"}
    g = torch.Generator().manual_seed(0)
    for name, (n, k) in shapes.items():
        q = QuantLinear(torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, generator=g),
                        torch.full((n, k // 32), 0.004), torch.bfloat16, torch.full((n, k // 32), -0.03)).to(device)
        kernels: dict[str, Any] = {"dequantized_bf16": None}
        row: dict[str, Any] = {"weight_bytes_int4": n * k // 2 + 2 * 2 * n * k // 32}
        builds = [("int4pack", Int4PackLinear.build, ()), ("triton_tiled", TritonQ4Linear.build, ()),
                  *[(f"gemv_{c.label()}", TritonQ4Gemv.build, (c,)) for c in CANDIDATES]]
        for label, build, extra in builds:
            layer, why = build(q, torch.bfloat16, *extra)
            if layer is None:
                row[label] = f"refused: {why}"
            else:
                kernels[label] = layer
        w = q.dequantize().to(torch.bfloat16)
        for m in (1, 9, 72, 256):
            x = torch.randn(m, k, dtype=torch.bfloat16, device=device)
            for label, layer in kernels.items():
                fn = (lambda x=x, w=w: torch.nn.functional.linear(x, w)) if layer is None else \
                    (lambda x=x, lay=layer: lay(x))
                try:
                    row[f"{label}_m{m}_us"] = round(time_us(fn), 2)
                except Exception as e:  # noqa: BLE001 (one kernel's failure is a finding, not the stage's end)
                    row[f"{label}_m{m}_error"] = f"{type(e).__name__}: {str(e)[:200]}"
        out[name] = row
        del kernels, w
    if not smoke:  # the head: 128256 x 3072, bf16 against the Triton INT8 kernel over Q8_0 blocks
        codes = torch.randint(-127, 128, (128256, 3072), dtype=torch.int8, device=device)
        scales = torch.full((128256, 96), 0.0003, device=device)
        head, why = TritonQ8Head.build(codes, scales)
        w = (codes.to(torch.bfloat16) * 0.0003)
        row = {"triton_int8": why or "ok"}
        for m in (1, 9):
            x = torch.randn(m, 3072, dtype=torch.bfloat16, device=device)
            row[f"bf16_m{m}_us"] = round(time_us(lambda x=x: torch.nn.functional.linear(x, w)), 2)
            if head is not None:
                row[f"triton_int8_m{m}_us"] = round(time_us(lambda x=x: head(x)), 2)
        out["lm_head"] = row
        del codes, w
    return out


def _free(device: str) -> None:
    import gc

    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


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


# ---------------------------------------------------------------------------------------------- main


def variant_stage(engine_dir: Path, device: str, prompt: int, tokens: int, batches: tuple[int, ...] = (1,),
                  **kw) -> dict:
    """Another engine load (switches, cache dtype) and its decode, then freed."""
    eng, s = load_engine(engine_dir, device, **kw)
    try:
        return {**engine_report(eng, s), **decode_stage(eng, batches, prompt, tokens, device)}
    finally:
        del eng
        _free(device)


def unfused_stage(eng, prompt: int, tokens: int, device: str) -> dict:
    """The loaded engine's batch-1 decode with its step's small ops unfused (the graphs captured again),
    against the fused step: what the fused kernels save. The engine is left as it was."""
    from dataclasses import replace

    model = eng.model
    plan = model.plan
    if not plan.fused_step_ops:
        return {"skipped": "the fused step ops do not run on this engine: "
                + str(dict(plan.why_not).get("triton_step_ops", "not planned"))}
    try:
        model.plan = replace(plan, fused_step_ops=False)
        model.graphs.entries.clear()
        return decode_stage(eng, (1,), prompt, tokens, device)
    finally:
        model.plan = plan
        model.graphs.entries.clear()


def _goals(run: Run) -> dict:
    s = run.data["stages"]
    ours = s.get("decode_int4", {}).get("batch_1", {}).get("tok_per_s_per_request")
    hf = s.get("hf", {}).get("compiled_static_tok_per_s_batch_1")
    return {"batch1_fraction_of_roofline": s.get("roofline", {}).get("fraction_of_roofline"),
            "over_transformers_compiled": round(ours / hf, 2) if ours and hf else None,
            "warm_plan_over_task_alone": s.get("home", {}).get("warm_over_alone"),
            "greedy_identical_with_speculation": s.get("speculation", {}).get("all_identical")}


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp")) / "gpu_check.json")
    p.add_argument("--tokenizer", type=Path, default=ROOT / ".whl" / "tokenizer",
                   help="an exported tokenizer dir (tokenizer.json, generation_config.json)")
    p.add_argument("--budget-s", type=float, default=330.0, help="the whole run's seconds (stages skip past it)")
    p.add_argument("--cpu-smoke", action="store_true", help="tiny shapes on the CPU: the plumbing only")
    p.add_argument("--work", type=Path, default=Path("/tmp/orin_llm_gpu"))
    p.add_argument("--stages", help="comma-separated stage names to run (default: all)")
    p.add_argument("--hf-only", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--device", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    device = a.device or ("cpu" if a.cpu_smoke else "cuda")
    if a.hf_only:
        hf_run(a.hf_only, device, a.cpu_smoke, a.budget_s)
        return 0
    if device == "cuda" and not torch.cuda.is_available():
        print("[gpu] torch sees no CUDA device: use --cpu-smoke on a CPU", file=sys.stderr)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    run = Run(a.out, a.budget_s, a.cpu_smoke, set(a.stages.split(",")) if a.stages else None)
    try:
        return _stages(run, a, device)
    finally:  # whatever ended the run (a stage's crash aside: each records its own), the goals and JSON
        run.data["goals"] = _goals(run)
        run.save()


def _stages(run: Run, a, device: str) -> int:
    """The stages, the numbers that settle issue 36's goals first (module doc)."""
    from dataclasses import replace

    from ..runtime.kernel_plan import KernelSwitches
    from .gpu_tests import FIRST, REST, gate, run_groups

    smoke = a.cpu_smoke
    run.stage("env", lambda: env_stage(device), 0)
    run.stage("bandwidth", lambda: bandwidth_stage(device, smoke), 5)
    # 1. the CUDA tests, each group under its own cap: the new kernels gate the measurements below
    tests = run.stage("tests", lambda: run_groups(FIRST, a.tokenizer, run.left), 30) or {}
    off = gate(tests)
    switches = KernelSwitches()
    if "int4_kernel" in off:
        switches = replace(switches, int4_kernel="int4pack")
    if "fused_step" in off:
        switches = replace(switches, fused_step=False)
    run.data["gated"] = off
    engine_dir = a.work / "engine"
    if run.stage("engine_write", lambda: write_engine(run, a.tokenizer, engine_dir), 40) is None:
        return 1
    holder: dict[str, Any] = {}
    prompt, tokens = (32, 8) if smoke else (64, 128)

    def load_main() -> dict:
        holder["eng"], s = load_engine(engine_dir, device, switches=switches)
        return engine_report(holder["eng"], s)

    # 2. batch-1 decode: the int4 kernel chosen per shape at load, then each choice forced, the step unfused
    run.stage("load_int4", load_main, 30)
    eng = holder.get("eng")
    decode = run.stage("decode_int4", lambda: decode_stage(eng, (1,), prompt, tokens, device), 15) if eng else None
    bw = run.data["stages"].get("bandwidth", {}).get("gb_per_s")

    def roofline() -> dict:
        b = step_bytes(eng, prompt + tokens // 2)
        out = {**b, "bandwidth_gb_per_s": bw}
        if bw:
            out["roofline_tok_per_s"] = round(bw * 1e9 / b["total_bytes"], 1)
            st = run.data["stages"]
            for name in ("decode_int4", "decode_int4pack", "decode_gemv", "decode_unfused"):
                got = st.get(name, {}).get("batch_1", {}).get("tok_per_s_per_request")
                if got:
                    out[f"{name}_fraction"] = round(got / out["roofline_tok_per_s"], 3)
            if decode:
                out["measured_tok_per_s"] = decode["batch_1"]["tok_per_s_per_request"]
                out["fraction_of_roofline"] = out["decode_int4_fraction"]
        return out

    if eng is not None:
        run.stage("roofline", roofline, 0)  # (again below, with the variants' fractions)
    short = max(8, tokens // 2)
    if switches.int4_kernel == "auto":
        for kernel in ("int4pack", "gemv"):
            run.stage(f"decode_{kernel}", lambda k=kernel: variant_stage(
                engine_dir, device, prompt, short, switches=replace(switches, int4_kernel=k)), 25)
    if eng is not None:
        run.stage("decode_unfused", lambda: unfused_stage(eng, prompt, short, device), 10)
        run.stage("roofline", roofline, 0)
    # 3. against transformers' compiled generate (a subprocess under its own cap)
    run.stage("hf", lambda: hf_stage(run, device, cap_s=60 if smoke else 90), 50)
    if eng is not None:
        # 4. batch 4 and 8, TTFT cold and warm on a 4k home, greedy speculation, where a step's time goes
        run.stage("decode_batches", lambda: decode_stage(eng, (4, 8), prompt, short, device), 20)
        run.stage("home", lambda: home_stage(eng, 256 if smoke else 4096, 48, 16 if smoke else 32), 30)
        run.stage("speculation", lambda: speculation_stage(eng, 24 if smoke else 64), 15)
        run.stage("profile", lambda: profile_stage(eng, smoke), 20)
        holder.clear()
        del eng
        _free(device)
    # 5. the kernels alone, the other paths, the rest of the tests: what time is left
    run.stage("int4_kernel", lambda: int4_kernel_stage(device, smoke), 20)
    run.stage("fp16", lambda: variant_stage(engine_dir, device, prompt, short, (1, 8), kv_cache="fp16",
                                            switches=replace(switches, int4_cuda=False)), 30)
    run.stage("compiled", lambda: variant_stage(engine_dir, device, prompt, short,
                                                switches=replace(switches, torch_compile=True)), 75)
    run.stage("no_graphs", lambda: variant_stage(engine_dir, device, prompt, 16,
                                                 switches=replace(switches, cuda_graphs=False)), 30)
    run.stage("tests_rest", lambda: run_groups(REST, a.tokenizer, run.left), 30)
    print(f"[gpu] done in {time.perf_counter() - run.t0:.0f} s: {a.out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
