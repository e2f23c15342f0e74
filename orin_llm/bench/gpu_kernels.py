"""The GPU check's kernel-level stages (orin_llm/bench/gpu.py): the memory bandwidth the roofline
divides by, each int4 kernel per layer shape, a captured step's replay alone, and where a step's GPU
time goes (torch.profiler)."""

from __future__ import annotations

import time
from typing import Any

import torch

from .gpu_run import _gen, _ids, _sync


def bandwidth_stage(device: str, smoke: bool) -> dict:
    """Two bandwidths, best of 10 after warm-up each: a device-to-device copy ((bytes read + bytes
    written) / time, the runs before issue 47's roofline) and a read-only pass (a float32 sum: bytes read
    / time, what a decode step's weights cost at best)."""
    n = (16 << 20) if smoke else (2 << 30)
    a = torch.empty(n, dtype=torch.uint8, device=device)
    b = torch.empty_like(a)
    words = a.view(torch.float32)
    copy_s, read_s = _best(lambda: b.copy_(a)), _best(lambda: words.sum())
    return {"bytes_copied": n, "gb_per_s": round(2 * n / copy_s / 1e9, 1), "counting": "read + written",
            "read_gb_per_s": round(n / read_s / 1e9, 1), "read_counting": "bytes read by a float32 sum"}


def _best(fn, reps: int = 10) -> float:
    for _ in range(3):
        fn()
    _sync()
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        _sync()
        best = min(best, time.perf_counter() - t)
    return best


def replay_ms(eng, reps: int = 50) -> dict:
    """Each captured graph's replay alone (the GPU's part of a decode step, no Python around it)."""
    out = {}
    graphs = eng.runner.graphs
    for (b, w, nb), entry in sorted(graphs.entries.items()):
        if entry.graph is None:
            continue
        entry.graph.replay()
        _sync()
        t = time.perf_counter()
        for _ in range(reps):
            entry.graph.replay()
        _sync()
        out[f"{b}x{nb}" + ("" if w == graphs.width else f"w{w}")] = round(1000 * (time.perf_counter() - t) / reps, 3)
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


def int4_kernel_stage(device: str, smoke: bool) -> dict:
    """Per Llama 3.2 3B layer shape, each int4 kernel's GPU time per call at 1 row, the decode step's 9
    (batch 1), 72 (batch 8) and a 256-row prompt chunk: torch's int4 kernel, the Triton GEMV's candidate
    tiles, the decode family's tiles (its prompt GEMM at 256 rows), the Triton tiled kernel, and the layer
    dequantized to bf16 (what the bytes alone would allow, at 4x the bytes), each timed as a CUDA graph
    of calls over copies of the layer that keep its weights cold in L2 (kernels/cuda_timing.py: as a
    decode step reads them; the runs before issue 47 timed them warm, from L2)."""
    from ..kernels.cuda_linear import (
        Int4PackLinear,
        TritonQ4Family,
        TritonQ4Gemv,
        TritonQ4Linear,
        TritonQ8Head,
        decode_rows,
    )
    from ..kernels.cuda_timing import time_layer_cold_us
    from ..kernels.quant import QuantLinear
    from ..kernels.triton.decode_gemv import FAMILY_CANDIDATES, MAX_ROWS
    from ..kernels.triton.int4_gemv import CANDIDATES

    shapes = {"qkv": (5120, 3072), "o": (3072, 3072), "gate_up": (16384, 3072), "down": (3072, 8192)}
    if smoke:
        shapes = {"qkv": (512, 256)}
    if device != "cuda":
        return {"skipped": "needs a CUDA device (the kernels are CUDA's)"}
    out: dict[str, Any] = {"timing": "GPU time per call, a CUDA graph of >= 20 calls replayed 5 times, the "
                                     "weights cold in L2 (copies of the layer called in turn)"}
    g = torch.Generator().manual_seed(0)
    for name, (n, k) in shapes.items():
        q = QuantLinear(torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, generator=g),
                        torch.full((n, k // 32), 0.004), torch.bfloat16, torch.full((n, k // 32), -0.03)).to(device)
        kernels: dict[str, Any] = {"dequantized_bf16": None}
        row: dict[str, Any] = {"weight_bytes_int4": n * k // 2 + 2 * 2 * n * k // 32}
        builds = [("int4pack", Int4PackLinear.build, ()), ("triton_tiled", TritonQ4Linear.build, ()),
                  *[(f"gemv_{c.label()}", TritonQ4Gemv.build, (c,)) for c in CANDIDATES],
                  *[(f"family_{c.label()}", TritonQ4Family.build, (c,)) for c in FAMILY_CANDIDATES]]
        for label, build, extra in builds:
            layer, why = build(q, torch.bfloat16, *extra)
            if layer is None:
                row[label] = f"refused: {why}"
            else:
                kernels[label] = layer
        kernels["dequantized_bf16"] = _linear(q.dequantize().to(torch.bfloat16))
        for m in (1, 9, 72, 256):
            x = torch.randn(m, k, dtype=torch.bfloat16, device=device)
            for label, layer in kernels.items():
                try:
                    if m <= MAX_ROWS:  # (as a decode step calls it: the family's decode kernel)
                        with decode_rows():
                            row[f"{label}_m{m}_us"] = round(time_layer_cold_us(layer, x), 2)
                    else:  # (a prompt chunk: the family's GEMM)
                        row[f"{label}_m{m}_us"] = round(time_layer_cold_us(layer, x), 2)
                except Exception as e:  # noqa: BLE001 (one kernel's failure is a finding, not the stage's end)
                    row[f"{label}_m{m}_error"] = f"{type(e).__name__}: {str(e)[:200]}"
        out[name] = row
        del kernels
    if not smoke:  # the head: 128256 x 3072, bf16 against the Triton INT8 kernel over Q8_0 blocks
        codes = torch.randint(-127, 128, (128256, 3072), dtype=torch.int8, device=device)
        scales = torch.full((128256, 96), 0.0003, device=device)
        head, why = TritonQ8Head.build(codes, scales)
        bf16 = _linear(codes.to(torch.bfloat16) * 0.0003)
        row = {"triton_int8": why or "ok"}
        for m in (1, 9):
            x = torch.randn(m, 3072, dtype=torch.bfloat16, device=device)
            row[f"bf16_m{m}_us"] = round(time_layer_cold_us(bf16, x), 2)
            if head is not None:
                row[f"triton_int8_m{m}_us"] = round(time_layer_cold_us(head, x), 2)
        out["lm_head"] = row
        del codes, bf16
    return out


def _linear(w: torch.Tensor) -> torch.nn.Linear:
    """A bias-free Linear over `w` (as it is: no copy), to time and copy like the int4 layers."""
    lin = torch.nn.Linear(w.shape[1], w.shape[0], bias=False, device="meta")
    lin.weight = torch.nn.Parameter(w, requires_grad=False)
    return lin
