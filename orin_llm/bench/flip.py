"""An A/B of two decode paths of one engine, flipped between requests in one process (so both see
the same machine, warm caches and the same tasks): plain decode and lookup speculation one request at a
time, `batch` requests at once (one forward per step for all of them), and how many greedy plans of
10 held-out tasks differ between the two. Used by bench/int8_decode_attention.py and bench/decode_layer.py."""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable

from ..calibration_data import load_split
from ..runtime.planner import Planner
from ..runtime.sampling import SamplingParams


def flip_ab(planner: Planner, use: Callable[[bool], None], rounds: int, batch: int, max_tokens: int) -> dict:
    """use(True) / use(False) switch the engine to path A / B. Returns {"cases": {case: {"a": median
    tok/s, "b": ..., "ratio": a/b}}, "plans_differing_of_10": n}; the engine is left on A."""
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0)
    tasks = [item.task for item in load_split("heldout")]
    counter = iter(range(10**9))

    def task(base: str) -> str:  # a new request each time: only the home is cached, as for a robot's next call
        return f"{base} (request {next(counter)})"

    def one(mode: str, base: str) -> float:
        return planner.plan(task(base), params, speculation=mode).result.timings.decode_tokens_per_s

    def many(base: str) -> float:
        gens = [planner.start(task(base), params, speculation="none") for _ in range(batch)]
        iters = [iter(g) for g in gens]
        t0 = time.perf_counter()
        for i in iters:  # all admitted before any finishes (engine.max_batch_size permitting)
            next(i)
        for i in iters:
            for _ in i:
                pass
        return sum(g.result.timings.completion_tokens for g in gens) / (time.perf_counter() - t0)

    cases = {"plain": lambda b: one("none", b), "lookup": lambda b: one("lookup", b), f"{batch} at once, plain": many}
    times = {c: {True: [], False: []} for c in cases}
    try:
        for r in range(rounds + 1):  # round 0 warms both paths up, untimed
            for c, fn in cases.items():
                base = tasks[(r * len(cases) + list(cases).index(c)) % len(tasks)]  # the same task both ways
                for on in (True, False):
                    use(on)
                    tps = fn(base)
                    if r:
                        times[c][on].append(tps)
            print(f"round {r}/{rounds}", file=sys.stderr, flush=True)
        differ = 0  # the same tasks through both paths: do the greedy plans agree?
        for t in tasks[:10]:
            ids = {}
            for on in (True, False):
                use(on)
                ids[on] = planner.plan(t, params, speculation="none").result.token_ids
            differ += ids[True] != ids[False]
    finally:
        use(True)
    rows = {c: {"a": statistics.median(v[True]), "b": statistics.median(v[False])} for c, v in times.items()}
    for row in rows.values():
        row["ratio"] = row["a"] / row["b"]
    return {"cases": rows, "plans_differing_of_10": differ}


def report(result: dict, names: tuple[str, str], home_tokens: int, rounds: int, threads: int) -> None:
    print(f"decode tokens/s (median of {rounds}), home of {home_tokens} tokens, {threads} thread(s)")
    print(f"{'':22s} {names[0]:>12s} {names[1]:>12s} {'ratio':>7s}")
    for c, row in result["cases"].items():
        print(f"{c:22s} {row['a']:12.1f} {row['b']:12.1f} {row['ratio']:6.2f}×")
    print(f"greedy plans of 10 held-out tasks that differ between the two: {result['plans_differing_of_10']}")
