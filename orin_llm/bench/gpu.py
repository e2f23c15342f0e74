"""The GPU check (issues 36, 47): one run on a CUDA machine with nothing from the network, one JSON.

    python -m orin_llm.bench.gpu --out gpu_check.json [--tokenizer DIR] [--budget-s 300]
    python -m orin_llm.bench.gpu --out smoke.json --cpu-smoke      (the plumbing, on tiny shapes, on a CPU)

bench/gpu_check.sh checks and installs the wheels that travel with the repo and calls this. Each stage
runs under the time left and inside try/except: a stage that fails or has no time left records why, the
JSON is rewritten after every stage (and once more, with the goals, however the run ends: SIGTERM
included), and the others still run. The JSON carries what ran (gpu_stamp.py: the commit the command
gave, a digest of the source tree, the carried wheels). Stages, the numbers that settle issue 47's goals
first:

1. env, bandwidth (a device-to-device copy, read + written, and a read-only pass); tests: the CUDA tests
   in groups, each a subprocess under its own cap (gpu_tests.py): the new kernels at a 3B layer's shapes
   first; one that fails is turned off for the measurements after it (`gated` in the JSON);
2. a Llama-3.2-3B-shaped engine with random weights (orin_llm/bench/shaped.py; fixed INT8 KV scales:
   random weights have nothing to calibrate) loaded on the CUDA path (Q4_1 on the int4 kernel chosen
   per layer shape at load, INT8 KV, CUDA graphs, the step's small ops fused, the Triton prefill):
   decode_int4 (batch 1), decode_4k (after a 4k-token prompt), decode_constrained (the example home's
   plan grammar), each three repeats and their median (gpu_decode.py); roofline: the bytes a batch-1
   step must read, the head's counted once (gpu_roofline.py), over both bandwidths;
3. hf: transformers' generate, static cache, compiled, in bf16 and with torch's int4 kernel in every
   linear (the same quantization), in a subprocess (gpu_hf.py);
4. profile (where a batch-1 step's and a prompt chunk's GPU time goes: the configuration measured above),
   speculation (greedy output with lookup, draft and combined against plain decoding), decode_batches
   (4 and 8), then decode_int4pack, decode_gemv and decode_family (each int4 kernel forced) and
   decode_unfused side by side, home (TTFT with a 4k-token home cold and pinned);
5. with what time is left: int4_kernel (each int4 kernel per layer shape at 1, 9, 72 and 256 rows, its
   weights cold in L2), fp16 (our dense bf16 layers, FP16 KV), compiled (ORIN_LLM_COMPILE), no_graphs
   (eager decode), tests_rest (the engine's CUDA tests, the other kernels').

The default budget (300 s) leaves a 6-minute device call a minute to rerun one stage: `--stages
engine_write,load_int4,<stage>` (a stage on the engine needs it written and loaded).
The figures are honest for time and memory only: random weights say nothing (shaped.py).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, Optional

import torch

from .gpu_decode import constrained_stage, context_stage, decode_stage
from .gpu_hf import hf_run, hf_stage
from .gpu_kernels import bandwidth_stage, int4_kernel_stage, profile_stage
from .gpu_roofline import roofline, step_bytes
from .gpu_run import CONFIG_3B, KV_SCALE_3B, KV_SCALE_TINY, ROOT, TINY, Run, _free, _gen, _ids

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


def write_engine(run: Run, tokenizer: Path, out: Path) -> dict:
    from ..manifest import load_manifest, write_manifest
    from .shaped import write_shaped_engine

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


def load_engine(path: Path, device: str, **kw):
    from ..runtime.engine import Engine
    from ..runtime.engine_config import EngineConfig

    t = time.perf_counter()
    eng = Engine.load(path, EngineConfig.at_edge(device=device, kv_tokens=8 * 4096 + 8192, **kw))
    return eng, time.perf_counter() - t


def engine_report(eng, load_s: float) -> dict:
    k = eng.kernels()
    return {"load_s": round(load_s, 1), "kernels": {n: k.get(n) for n in (
        "device", "weights", "kv_cache", "int4_cuda_linear", "triton_int4_linear", "cuda_graphs", "torch_compile",
        "triton_step_ops", "triton_prefill_attention", "rows_independent", "exact_decode_width", "int4_layers")},
        "steps": k.get("steps", {}).get("int8")}


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


def step_ops_stage(eng, prompt: int, tokens: int, device: str, fused: bool) -> dict:
    """The loaded engine's batch-1 decode with its step's small ops fused or not (the graphs captured
    again), against how it was loaded: what the fused kernels save. `fused=True` on an engine whose
    fused ops were turned off because their CUDA test failed measures speed alone (the output is not
    trusted, and the JSON says so). The engine is left as it was."""
    from dataclasses import replace

    model = eng.model
    plan = model.plan
    if plan.fused_step_ops == fused:
        return {"skipped": f"the engine's step already runs {'fused' if fused else 'unfused'}"}
    if fused and not (device == "cuda" and plan.cuda_graphs):
        return {"skipped": "the fused step ops run only in the CUDA graphs' step"}
    if not fused and not plan.fused_step_ops:
        return {"skipped": "the fused step ops do not run on this engine: "
                + str(dict(plan.why_not).get("triton_step_ops", "not planned"))}
    try:
        model.plan = replace(plan, fused_step_ops=fused)
        eng.runner.graphs.entries.clear()
        out = decode_stage(eng, (1,), prompt, tokens, device)
        if fused:
            out["note"] = "their CUDA test failed on this machine (tests.new_kernels.why): speed only"
        return out
    finally:
        model.plan = plan
        eng.runner.graphs.entries.clear()


def _goals(run: Run) -> dict:
    s = run.data["stages"]

    def rate(stage: str, key: str = "tok_per_s_per_request"):
        return s.get(stage, {}).get("batch_1", {}).get(key)

    ours = rate("decode_int4")
    hf = s.get("hf", {})
    bf16, int4 = hf.get("compiled_static_tok_per_s_batch_1"), hf.get("int4_compiled_static_tok_per_s_batch_1")
    return {"batch1_fraction_of_roofline": s.get("roofline", {}).get("fraction_of_roofline"),
            "batch1_fraction_of_read_roofline": s.get("roofline", {}).get("fraction_of_read_roofline"),
            "over_transformers_compiled": round(ours / bf16, 2) if ours and bf16 else None,
            "over_transformers_int4_compiled": round(ours / int4, 2) if ours and int4 else None,
            "constrained_step_over_plain": s.get("decode_constrained", {}).get("step_over_plain"),
            "decode_4k_over_short": s.get("decode_4k", {}).get("over_short_context"),
            "warm_plan_over_task_alone": s.get("home", {}).get("warm_over_alone"),
            "greedy_identical_with_speculation": s.get("speculation", {}).get("all_identical")}


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp")) / "gpu_check.json")
    p.add_argument("--tokenizer", type=Path, default=ROOT / ".whl" / "tokenizer",
                   help="an exported tokenizer dir (tokenizer.json, generation_config.json)")
    p.add_argument("--budget-s", type=float, default=300.0, help="the whole run's seconds (stages skip past it)")
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
    from .gpu_stamp import stamp

    run.data["provenance"] = stamp(wheel_dir=Path(os.environ.get("ORIN_LLM_WHEELS", ROOT / ".whl")))
    run.save()

    def terminated(signum, frame):  # (bench/gpu_check.sh's hard limit: the finally below still writes)
        raise SystemExit(f"[gpu] ended by signal {signum} after {time.perf_counter() - run.t0:.0f} s")

    signal.signal(signal.SIGTERM, terminated)
    try:
        return _stages(run, a, device)
    finally:  # whatever ended the run (a stage's crash aside: each records its own), the goals and JSON
        run.data["goals"] = _goals(run)
        run.save()


def _stages(run: Run, a, device: str) -> int:
    """The stages, the numbers that settle issue 47's goals first (module doc)."""
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
    if run.stage("engine_write", lambda: write_engine(run, a.tokenizer, engine_dir), 40) is None \
            and "engine_write" in run.data["stages"]:  # (failed or out of time; left out by --stages: go on)
        return 1
    holder: dict[str, Any] = {}  # the engine measured, while it is loaded
    kept: dict[str, Any] = {}  # its step's bytes, for the roofline after it is freed
    prompt, tokens = (32, 8) if smoke else (64, 128)
    short = max(8, tokens // 2)
    st = run.data["stages"]

    def load_main() -> dict:
        holder["eng"], s = load_engine(engine_dir, device, switches=switches)
        return engine_report(holder["eng"], s)

    # 2. batch-1 decode on the kernels chosen at load: short context, 4k context, constrained; the roofline
    run.stage("load_int4", load_main, 30)
    eng = holder.get("eng")

    def batch_1(stage: str) -> Optional[dict]:
        return st.get(stage, {}).get("batch_1")

    def roofline_stage() -> dict:
        """The step's bytes (counted once, on the engine measured) against both bandwidths and every decode
        stage so far."""
        if "bytes" not in kept:
            kept["bytes"] = step_bytes(holder["eng"].model, holder["eng"].cache.target_pool.bytes_per_token,
                                       prompt + tokens // 2)
        bw = st.get("bandwidth", {})
        return roofline(kept["bytes"], bw.get("gb_per_s"), bw.get("read_gb_per_s"), st)

    if eng is not None:
        run.stage("decode_int4", lambda: decode_stage(eng, (1,), prompt, tokens, device), 15)
        run.stage("decode_4k", lambda: context_stage(eng, 256 if smoke else 4096, short, batch_1("decode_int4")), 15)
        run.stage("decode_constrained", lambda: constrained_stage(eng, prompt, short, batch_1("decode_int4")), 15)
        run.stage("roofline", roofline_stage, 0)  # (again below, with the variants' fractions)
    # 3. against transformers' compiled generate, bf16 and the same quantization (a subprocess, capped)
    run.stage("hf", lambda: hf_stage(run, device, cap_s=90 if smoke else 120), 60)
    if eng is not None:
        # 4. where a step's time goes, greedy speculation, batch 4 and 8; each int4 kernel forced, unfused
        run.stage("profile", lambda: profile_stage(eng, smoke), 15)
        run.stage("speculation", lambda: speculation_stage(eng, 24 if smoke else 64), 15)
        run.stage("decode_batches", lambda: decode_stage(eng, (4, 8), prompt, short, device), 20)
        if "fused_step" in off:
            run.stage("decode_fused_untested", lambda: step_ops_stage(eng, prompt, short, device, True), 10)
        else:
            run.stage("decode_unfused", lambda: step_ops_stage(eng, prompt, short, device, False), 10)
        run.stage("home", lambda: home_stage(eng, 256 if smoke else 4096, 48, 16 if smoke else 32), 30)
        holder.clear()
        del eng
        _free(device)
    if switches.int4_kernel == "auto":
        for kernel in ("int4pack", "gemv", "family"):
            run.stage(f"decode_{kernel}", lambda k=kernel: variant_stage(
                engine_dir, device, prompt, short, switches=replace(switches, int4_kernel=k)), 25)
    if "bytes" in kept:
        run.stage("roofline", roofline_stage, 0)
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
