"""TTFT with the environment prefix pinned (warm) vs computed per request (cold), for prefixes
of about 1k, 2k and 4k tokens, against the floor: the task alone, with no environment."""

from __future__ import annotations

import time
from pathlib import Path

from ..calibration_data import home_names, load_home
from ..environment import prefix_messages, task_message
from ..runtime.planner import Planner
from ..runtime.sampling import SamplingParams
from .common import median_of, progress, pyplot, scaled_environment, write_json

TASK = "Bring the mug from the kitchen to the sofa."
ONE = SamplingParams(max_tokens=1)


def _ttft(gen) -> float:
    t0 = time.perf_counter()
    it = iter(gen)
    for _ in it:
        break
    ttft = time.perf_counter() - t0
    for _ in it:
        pass
    return ttft


def run(engine, out: Path, quick: bool = False) -> dict:
    sizes = [1024] if quick else [1024, 2048, 4096]
    repeats = 2 if quick else 5
    limit = engine.manifest.limits["max_input_len"]
    homes = [load_home(n) for n in home_names()]
    render = lambda env: engine.chat_text(prefix_messages(env), add_generation_prompt=False)  # noqa: E731
    alone = engine.chat_ids([task_message(TASK)])
    engine.pinned = []
    floor = median_of(repeats, lambda: _ttft(engine.generate(alone, ONE, "none")))
    progress(f"task alone ({len(alone)} tokens): TTFT {floor * 1e3:.1f} ms")
    rows = []
    for size in sizes:
        env = scaled_environment(homes, engine.encode, render, min(size, limit - 64))
        planner = Planner(engine, env)
        ids = planner.prompt_ids(planner.messages(TASK))
        warm = median_of(repeats, lambda p=planner: _ttft(p.start(TASK, ONE, speculation="none")))

        def cold(ids=ids) -> float:
            engine.pinned = []  # forget the prefix: the whole prompt is prefilled
            return _ttft(engine.generate(ids, ONE, "none"))

        cold_s = median_of(max(2, repeats // 2), cold)
        row = {"prefix_tokens": len(planner.prefix.ids), "prompt_tokens": len(ids),
               "ttft_cold_ms": cold_s * 1e3, "ttft_warm_ms": warm * 1e3, "ttft_task_alone_ms": floor * 1e3,
               "cold_over_warm": cold_s / warm, "warm_over_task_alone": warm / floor}
        rows.append(row)
        progress(f"prefix {row['prefix_tokens']} tokens: cold {row['ttft_cold_ms']:.0f} ms, "
                 f"warm {row['ttft_warm_ms']:.1f} ms ({row['cold_over_warm']:.1f}×), "
                 f"warm/alone {row['warm_over_task_alone']:.2f}")
    kv = {"kv_bytes_per_token_fp16": engine.model.arch.kv_bytes_per_token(2),
          "kv_bytes_per_token_int8": engine.model.arch.kv_bytes_per_token(1),
          "kv_cache_dtype": str(engine.cache.k.dtype), "kv_cache_bytes_per_token": engine.cache.bytes_per_token}
    data = {"engine": engine.name, "task_alone_tokens": len(alone), "rows": rows, "kv": kv}
    write_json(out, "prefix", data)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    xs = [r["prefix_tokens"] for r in rows]
    ax.plot(xs, [r["ttft_cold_ms"] for r in rows], "o-", label="cold (prefix computed per request)")
    ax.plot(xs, [r["ttft_warm_ms"] for r in rows], "o-", label="warm (prefix pinned)")
    ax.axhline(floor * 1e3, color="gray", ls="--", label="task alone (floor)")
    ax.set_xlabel("environment prefix (tokens)")
    ax.set_ylabel("time to first token (ms)")
    ax.set_yscale("log")
    ax.set_title(f"TTFT, {engine.name}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "prefix.png", dpi=120)
    return data
