"""INT8 KV cache vs full precision on the held-out split: teacher-forced argmax agreement, mean
|Δ logprob| of the reference token, per-head vs per-tensor scales, and decode speed.

On a TensorRT-LLM engine the KV cache dtype is compiled in, so one engine has one dtype and what is
measured is that engine's: its KV bytes per token against fp16 (from the manifest), the memory plan's
KV budget, the runtime's kv_usage and the decode speed. The teacher-forced agreement is not measured
there (see NO_AGREEMENT): it is measured by this scenario on the torch engine built from the same
profile and calibration."""

from __future__ import annotations

import time
from pathlib import Path

import torch

from ..build.calibrate import interleave_by_home, sequences
from ..manifest import load_manifest
from ..planning.calibration_data import load_split
from ..runtime.engine import Engine
from ..runtime.engine_config import EngineConfig
from ..runtime.kv_cache import Int8KVCache, KVCache
from ..runtime.kv_pool import load_scales
from ..runtime.sampling import SamplingParams
from .common import loaded, manifest_kv, progress, write_json

PROMPT = [{"role": "user", "content": "Describe every room of a large house in detail."}]

# Why a TensorRT-LLM engine gets no agreement numbers (docs/trtllm-0.12-jetson.md §3, §4).
NO_AGREEMENT = {
    "measured": False,
    "reason": "teacher forcing compares the logits at every prompt position (context logits), which a 0.12 "
              "engine has for OutputConfig(return_context_logits=True) only if built with --gather_context_logits; "
              "trtllm-build refuses that flag with --max_draft_len > 0 (our speculative target), and orin-llm's "
              "build does not pass it (orin_llm/build/trtllm.py)",
    "see": "orin-llm bench --scenario kv on the torch engine built from the same profile and calibration "
           "split: its per_head_scales / per_tensor_scales are the INT8 KV agreement",
}


def _teacher_forced(model, cache, seqs) -> list[torch.Tensor]:
    """Log-probs at every answer position, prefix computed once per home."""
    out = []
    device = model.device
    for prefix, rests in seqs:
        cache.crop(0)
        model(torch.tensor(prefix, device=device), cache)
        for rest in rests:
            cache.crop(len(prefix))
            out.append(torch.log_softmax(model(torch.tensor(rest, device=device), cache, num_logits=len(rest)), -1))
    cache.crop(0)
    return out


def _compare(ref: list[torch.Tensor], got: list[torch.Tensor], seqs) -> dict:
    agree = total = 0
    dlogp = 0.0
    rests = [r for _, rs in seqs for r in rs]
    for a, b, rest in zip(ref, got, rests, strict=True):
        agree += int((a.argmax(-1) == b.argmax(-1)).sum())
        total += a.shape[0]
        nxt = torch.tensor(rest[1:])  # teacher forcing: the reference's next token at each position
        idx = torch.arange(len(nxt))
        dlogp += float((a[idx, nxt] - b[idx, nxt]).abs().sum())
    return {"argmax_agreement": agree / total, "mean_abs_dlogprob": dlogp / max(1, total - len(rests)),
            "positions": total}


def _decode_tps(engine, ids: list[int], n: int) -> float:  # either backend
    res = engine.run(engine.generate(ids, SamplingParams(max_tokens=n, stop_token_ids=[]), "none"))
    return res.timings.decode_tokens_per_s


def _run_trtllm(engine_dir: Path, out: Path, quick: bool) -> dict:
    with loaded(engine_dir, draft=False) as engine:
        m = engine.manifest
        kv = manifest_kv(m)
        prompt = engine.chat_ids(PROMPT)
        n = 32 if quick else 96
        speeds = []
        for _ in range(2 if quick else 3):
            speeds.append(_decode_tps(engine, prompt, n))
            progress(f"decode {kv['kv_cache_dtype']} KV (TensorRT-LLM): {speeds[-1]:.1f} tok/s")
        plan = (m.memory_plan or {}).get("target") or {}
        data = {"engine": engine.name, "backend": m.backend, "kv_cache_dtype": kv["kv_cache_dtype"],
                "kv_bytes_per_token": {"fp16": kv["kv_bytes_per_token_fp16"],
                                       "int8": kv["kv_bytes_per_token_int8"]},
                "fp16_over_kv_cache_bytes": kv["kv_bytes_per_token_fp16"] / kv["kv_cache_bytes_per_token"],
                "memory_plan": {k: plan.get(k) for k in ("kv_bytes_per_token", "max_kv_tokens", "kv_bytes")},
                "kv_usage": engine.kv_usage(), "block_reuse": engine.block_reuse,
                "decode_tokens": n, "decode_tokens_per_s": {kv["kv_cache_dtype"]: speeds},
                "agreement": NO_AGREEMENT}
    write_json(out, "kv", data)
    return data


def run(engine_dir: Path, out: Path, quick: bool = False) -> dict:
    if load_manifest(engine_dir).backend == "trtllm":
        return _run_trtllm(engine_dir, out, quick)
    items = interleave_by_home(load_split("heldout"), 12 if quick else None)
    fp = Engine.load(engine_dir, EngineConfig.at_edge(device="cpu", kv_cache="fp32", draft=False))
    int8 = Engine.load(engine_dir, EngineConfig.at_edge(device="cpu", kv_cache="int8", draft=False))
    seqs = list(sequences(fp, items))
    arch = fp.model.arch
    cap = fp.max_seq_len
    progress(f"teacher forcing {len(items)} held-out answers, fp32 vs int8 KV")
    ref = _teacher_forced(fp.model, KVCache(arch, cap, torch.float32), seqs)
    # the INT8 runs on the INT8 engine's own model: its q/k rows carry the K smoothing (k_smoothing.py)
    per_head = _compare(ref, _teacher_forced(int8.model, int8.contiguous_cache(cap), seqs), seqs)
    k_scale, v_scale = load_scales(engine_dir / fp.manifest.target.kv_cache.scales)
    per_tensor_cache = Int8KVCache(arch, cap, k_scale.amax(1, keepdim=True).expand_as(k_scale),
                                   v_scale.amax(1, keepdim=True).expand_as(v_scale), torch.float32)
    per_tensor = _compare(ref, _teacher_forced(int8.model, per_tensor_cache, seqs), seqs)
    progress(f"agreement per-head {per_head['argmax_agreement']:.4f}, per-tensor {per_tensor['argmax_agreement']:.4f}")
    prompt = fp.chat_ids(PROMPT)
    n = 32 if quick else 96
    speeds = {"fp32": [], "int8": []}
    for _ in range(2 if quick else 3):  # interleaved, so both see the same machine
        for name, eng in (("fp32", fp), ("int8", int8)):
            t0 = time.perf_counter()
            speeds[name].append(_decode_tps(eng, prompt, n))
            progress(f"decode {name}: {speeds[name][-1]:.1f} tok/s ({time.perf_counter() - t0:.1f} s)")
    best = {k: max(v) for k, v in speeds.items()}
    data = {"engine": fp.name, "backend": "torch", "items": len(items),
            "per_head_scales": per_head, "per_tensor_scales": per_tensor,
            "kv_bytes_per_token": {"fp32": KVCache(arch, 1, torch.float32).bytes_per_token,
                                   "fp16": KVCache(arch, 1, torch.float16).bytes_per_token,
                                   "int8": int8.cache.target_pool.bytes_per_token},
            "decode_tokens_per_s": speeds, "int8_over_fp32_decode": best["int8"] / best["fp32"]}
    write_json(out, "kv", data)
    return data
