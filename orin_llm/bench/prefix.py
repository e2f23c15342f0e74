"""TTFT with the environment prefix pinned (warm) vs computed per request (cold), for prefixes
of about 1k, 2k and 4k tokens, against the floor: the task alone, with no environment. Runs on
either backend; each row says how many prompt tokens the warm request took from the cache
(`cached_prompt_tokens`).

Both backends keep the KV blocks of *every* prompt they ran, not only the pinned prefix (the torch
engine's paged cache, TensorRT-LLM's block reuse): a repeated prompt would reuse its own earlier
blocks. Every measured request is therefore new to the engine (the task is numbered, and a cold
request gets a home of its own name), and each row also reports, per kind of request, `requests`:
the longest prompt measured and `reusable_tokens`, the most prompt tokens it could find stored,
i.e. its longest common prefix with any prompt run before, in whole blocks (an upper bound: both
evict blocks least-recently-used when the cache is full). Cold requests still share the chat
template and system prompt with the others. Without block reuse (TensorRT-LLM 0.12 cannot combine
it with an INT8 KV cache) nothing is reused, and cold and warm are the same computation.
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from ..planning.calibration_data import home_names, load_home
from ..planning.home import prefix_messages, task_message
from ..planning.planner import Planner
from ..runtime.sampling import SamplingParams
from .common import manifest_kv, median_of, progress, pyplot, scaled_environment, write_json

TASK = "Bring the mug from the kitchen to the sofa."
ONE = SamplingParams(max_tokens=1)


def _ttft(engine, gen) -> float:
    t0 = time.perf_counter()
    it = engine.deltas(gen)
    for _ in it:
        break
    ttft = time.perf_counter() - t0
    for _ in it:
        pass
    return ttft


def _common_prefix(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


class _StoredBlocks:
    """The prompts a TensorRT-LLM executor has run, to bound what a new prompt can reuse (module doc).
    `log(requests, ids)` records a measured request; `summary` sums a kind of request up."""

    def __init__(self, engine):
        if engine.manifest.backend == "trtllm":
            self.block = engine.tokens_per_block if engine.block_reuse else 0
        else:
            self.block = engine.cache.block_size
        self.prompts: list[list[int]] = []

    def run(self, ids: list[int]) -> int:
        """Record `ids` as run; returns how many of its tokens blocks stored before could hold. The
        last prompt token is always computed (as in both engines' cached_prefix)."""
        common = max((_common_prefix(ids, p) for p in self.prompts), default=0)
        self.prompts.append(list(ids))
        return min(common, len(ids) - 1) // self.block * self.block if self.block else 0

    def log(self, requests: list[tuple[int, int]], ids: list[int]) -> None:
        requests.append((len(ids), self.run(ids)))

    @staticmethod
    def summary(requests: list[tuple[int, int]]) -> dict:
        return {"prompt_tokens": max(n for n, _ in requests), "reusable_tokens": max(r for _, r in requests)}


def _side_by_side(rounds: int, per_round: int, alone: Callable[[], float], pin: Callable[[], None],
                  warm: Callable[[], float]) -> tuple[float, float]:
    """Median TTFT of the task alone and of the warm request, measured in alternating blocks (each
    after one untimed call: a first call of a shape sets up kernels) so that the ratio compares the
    two on the same machine: a shared 2-core VM drifts by tens of percent within a minute. `pin`
    makes sure the prefix is stored before each warm block (TensorRT-LLM's blocks can be evicted)."""
    alone_s: list[float] = []
    warm_s: list[float] = []
    for _ in range(rounds):
        alone()
        alone_s += [alone() for _ in range(per_round)]
        pin()
        warm()
        warm_s += [warm() for _ in range(per_round)]
    return statistics.median(alone_s), statistics.median(warm_s)


def run(engine, out: Path, quick: bool = False) -> dict:
    sizes = [1024] if quick else [1024, 2048, 4096]
    rounds, per_round = (1, 2) if quick else (3, 3)
    limit = engine.manifest.limits["max_input_len"]
    homes = [load_home(n) for n in home_names()]
    render = lambda env: engine.chat_text(prefix_messages(env), add_generation_prompt=False)  # noqa: E731
    trtllm = engine.manifest.backend == "trtllm"
    stored = _StoredBlocks(engine)
    numbers = itertools.count()

    def task() -> str:  # every request is new to the engine (module doc)
        return f"Request {next(numbers)}: {TASK}"

    alone_requests: list[tuple[int, int]] = []

    def task_alone() -> float:
        ids = engine.chat_ids([task_message(task())])
        stored.log(alone_requests, ids)
        return _ttft(engine, engine.generate(ids, ONE, "none"))

    alone = engine.chat_ids([task_message(TASK)])
    rows = []
    for size in sizes:
        env = scaled_environment(homes, engine.encode, render, min(size, limit - 64))
        planner = Planner(engine, env)
        ids = planner.prompt_ids(planner.messages(TASK))
        stored.run(list(planner.prefix.ids))  # the Planner pinned it: a request on the engine
        cached: list[int] = []
        warm_requests: list[tuple[int, int]] = []
        cold_requests: list[tuple[int, int]] = []

        def warm(p=planner, cached=cached, log=warm_requests) -> float:
            t = task()
            stored.log(log, p.prompt_ids(p.messages(t)))
            gen = p.start(t, ONE, speculation="none").request
            ttft = _ttft(p.engine, gen)
            cached.append(gen.result.timings.cached_prompt_tokens)
            return ttft

        def pin(p=planner) -> None:  # untimed; the torch engine's pin holds its blocks anyway
            if trtllm and engine.pinned != list(p.prefix.ids):
                engine.pin(list(p.prefix.ids))

        floor, warm_s = _side_by_side(rounds, per_round, task_alone, pin, warm)

        def cold(env=env, log=cold_requests) -> float:
            # a home of its own name: none of its blocks past the system prompt are stored
            own = env.model_copy(update={"name": f"cold{next(numbers)}_{env.name}"})
            ids = engine.chat_ids(prefix_messages(own) + [task_message(TASK)])
            stored.log(log, ids)
            return _ttft(engine, engine.generate(ids, ONE, "none"))

        cold_s = median_of(max(2, rounds * per_round // 2), cold)
        row = {"prefix_tokens": len(planner.prefix.ids), "prompt_tokens": len(ids),
               "ttft_cold_ms": cold_s * 1e3, "ttft_warm_ms": warm_s * 1e3, "ttft_task_alone_ms": floor * 1e3,
               "cold_over_warm": cold_s / warm_s, "warm_over_task_alone": warm_s / floor,
               "cached_prompt_tokens": max(cached),
               "requests": {"warm": stored.summary(warm_requests), "cold": stored.summary(cold_requests),
                            "task_alone": stored.summary(alone_requests)}}
        rows.append(row)
        progress(f"prefix {row['prefix_tokens']} tokens: cold {row['ttft_cold_ms']:.0f} ms, "
                 f"warm {row['ttft_warm_ms']:.1f} ms ({row['cold_over_warm']:.1f}×), task alone "
                 f"({len(alone)} tokens) {row['ttft_task_alone_ms']:.1f} ms, warm/alone "
                 f"{row['warm_over_task_alone']:.2f}, cached {row['cached_prompt_tokens']} tokens")
    if trtllm:
        kv = {**manifest_kv(engine.manifest), "block_reuse": engine.block_reuse,
              "tokens_per_block": engine.tokens_per_block}
    else:
        pool = engine.cache.target_pool
        kv = {"kv_bytes_per_token_fp16": engine.model.arch.kv_bytes_per_token(2),
              "kv_bytes_per_token_int8": engine.model.arch.kv_bytes_per_token(1),
              "kv_cache_dtype": str(pool.k.dtype), "kv_cache_bytes_per_token": pool.bytes_per_token,
              "block_reuse": True, "tokens_per_block": engine.cache.block_size}
    data = {"engine": engine.name, "backend": engine.manifest.backend, "task_alone_tokens": len(alone),
            "rows": rows, "kv": kv}
    write_json(out, "prefix", data)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    xs = [r["prefix_tokens"] for r in rows]
    ax.plot(xs, [r["ttft_cold_ms"] for r in rows], "o-", label="cold (prefix computed per request)")
    ax.plot(xs, [r["ttft_warm_ms"] for r in rows], "o-", label="warm (prefix pinned)")
    ax.plot(xs, [r["ttft_task_alone_ms"] for r in rows], "o--", color="gray", label="task alone (floor)")
    ax.set_xlabel("environment prefix (tokens)")
    ax.set_ylabel("time to first token (ms)")
    ax.set_yscale("log")
    ax.set_title(f"TTFT, {engine.name} ({engine.manifest.backend})")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "prefix.png", dpi=120)
    return data
