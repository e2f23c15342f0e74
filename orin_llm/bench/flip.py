"""An A/B of two decode paths in one process (so both see the same machine and the same tasks),
requests alternating: plain decode and lookup speculation one request at a time, `batch` requests at
once (one forward per step for all of them), optionally the warm TTFT of a new task, and how many
greedy plans of 10 held-out tasks differ between the two. The paths are one engine flipped between
requests (bench/int8_decode_attention.py, bench/decode_layer.py) or two engines (bench/q8_dot.py):
`planner(True)` / `planner(False)` switch to path A / B and return the planner that runs it."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable

import torch

from ..planning.calibration_data import load_split
from ..planning.planner import Planner
from ..runtime.sampling import SamplingParams
from .common import machine


def arguments(home_tokens: int = 0) -> argparse.Namespace:
    """The A/B scripts' options (`--home-tokens` where the script builds a home of that size: its
    default). Sets torch's threads to --threads (the engines it loads leave them so)."""
    ap = argparse.ArgumentParser()
    if home_tokens:
        ap.add_argument("--home-tokens", type=int, default=home_tokens, help="the home's size in tokens")
    ap.add_argument("--engine", default="engines/smollm2-135m-demo")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (the daemon's default here: 1)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--out")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    return a


def run(planner: Callable[[bool], Planner], names: tuple[str, str], a: argparse.Namespace, ttft: bool = False) -> None:
    """flip_ab with the script's options, its table printed, and its JSON written to --out if given."""
    result = flip_ab(planner, a.rounds, a.batch, a.max_tokens, ttft)
    home_tokens = len(planner(True).prefix.ids)
    report(result, names, home_tokens, a.rounds, a.threads)
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"command": "python " + " ".join(sys.argv),
                       "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": machine(),
                       "rounds": a.rounds, "home_tokens": home_tokens,
                       "arms": {"a": names[0], "b": names[1]}, **result}, f, indent=1)


def flip_ab(planner: Callable[[bool], Planner], rounds: int, batch: int, max_tokens: int, ttft: bool = False) -> dict:
    """Returns {"cases": {case: {"a": median, "b": ..., "ratio": a/b (b/a for times: > 1 means A is
    faster)}}, "plans_differing_of_10": n}; tokens/s, or ms for "warm TTFT (ms)". Ends on path A."""
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0)
    tasks = [item.task for item in load_split("heldout")]
    counter = iter(range(10**9))

    def task(base: str) -> str:
        # a new request each time: only the home is cached, as for a robot's next call. The number
        # comes first: after the task, the second arm found the first one's blocks of the same task
        # cached and computed fewer tokens (one engine flipped between arms shares one pool)
        return f"(request {next(counter)}) {base}"

    def one(p: Planner, mode: str, base: str) -> float:
        return p.plan(task(base), params, speculation=mode).result.timings.decode_tokens_per_s

    def first_token(p: Planner, base: str) -> float:  # the task's tokens after the cached home, and one step
        r = p.plan(task(base), SamplingParams(max_tokens=1, temperature=0.0), speculation="none").result
        return r.timings.ttft_s * 1000

    def many(p: Planner, base: str) -> float:
        gens = [p.start(task(base), params, speculation="none").request for _ in range(batch)]
        iters = [p.engine.deltas(g) for g in gens]
        t0 = time.perf_counter()
        for i in iters:  # all admitted before any finishes (engine.max_batch_size permitting)
            next(i)
        for i in iters:
            for _ in i:
                pass
        return sum(g.result.timings.completion_tokens for g in gens) / (time.perf_counter() - t0)

    cases = {"plain": lambda p, b: one(p, "none", b), "lookup": lambda p, b: one(p, "lookup", b),
             f"{batch} at once, plain": many}
    if ttft:
        cases["warm TTFT (ms)"] = first_token
    times = {c: {True: [], False: []} for c in cases}
    try:
        for r in range(rounds + 1):  # round 0 warms both paths up, untimed
            for c, fn in cases.items():
                base = tasks[(r * len(cases) + list(cases).index(c)) % len(tasks)]  # the same task both ways
                for on in (True, False):
                    value = fn(planner(on), base)
                    if r:
                        times[c][on].append(value)
            print(f"round {r}/{rounds}", file=sys.stderr, flush=True)
        differ = 0  # the same tasks through both paths: do the greedy plans agree?
        for t in tasks[:10]:
            ids = {on: planner(on).plan(t, params, speculation="none").result.token_ids for on in (True, False)}
            differ += ids[True] != ids[False]
    finally:
        planner(True)
    rows = {c: {"a": statistics.median(v[True]), "b": statistics.median(v[False])} for c, v in times.items()}
    for c, row in rows.items():
        row["ratio"] = row["b"] / row["a"] if c.endswith("(ms)") else row["a"] / row["b"]
    return {"cases": rows, "plans_differing_of_10": differ}


def report(result: dict, names: tuple[str, str], home_tokens: int, rounds: int, threads: int) -> None:
    print(f"decode tokens/s or ms (median of {rounds}), home of {home_tokens} tokens, {threads} thread(s); "
          "ratio: how many times faster A is")
    print(f"{'':22s} {names[0]:>16s} {names[1]:>16s} {'ratio':>7s}")
    for c, row in result["cases"].items():
        print(f"{c:22s} {row['a']:16.1f} {row['b']:16.1f} {row['ratio']:6.2f}×")
    print(f"greedy plans of 10 held-out tasks that differ between the two: {result['plans_differing_of_10']}")
