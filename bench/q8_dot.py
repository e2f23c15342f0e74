"""What the integer dot-product kernels (orin_llm/runtime/q8_dot.py) buy: greedy plans on the daemon's
default home, from two copies of the engine in one process (so both see the same machine, and the same tasks), one on
q8_dot's kernels (int8 activations, llama.cpp's way) and one on torch's weight-only kernels (bf16
activations), requests alternating. Per request: plain decode and lookup speculation, one request at
a time and `--batch` at once; median of `--rounds`. Also the median time of one prompt prefill (a
new task after the cached home) and how many of 10 held-out greedy plans differ between the two
(they may: the activations are rounded differently, int8 per block of 32 against bf16).

    python bench/q8_dot.py --engine engines/smollm2-135m-demo [--threads 1] [--out FILE]
"""
import argparse
import json
import os
import statistics
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument("--engine", default="engines/smollm2-135m-demo")
ap.add_argument("--threads", type=int, default=1, help="torch threads (the daemon's default here: 1)")
ap.add_argument("--rounds", type=int, default=5)
ap.add_argument("--batch", type=int, default=4)
ap.add_argument("--max-tokens", type=int, default=64)
ap.add_argument("--out")
a = ap.parse_args()
os.environ["ORIN_LLM_THREADS"] = str(a.threads)

from orin_llm.bench.common import machine  # noqa: E402
from orin_llm.calibration_data import load_split  # noqa: E402
from orin_llm.environment import EXAMPLE_HOME_PATH, load_environment  # noqa: E402
from orin_llm.runtime import q8_dot  # noqa: E402
from orin_llm.runtime.engine import Engine  # noqa: E402
from orin_llm.runtime.native import NativeLib  # noqa: E402
from orin_llm.runtime.planner import Planner  # noqa: E402
from orin_llm.runtime.quant import QuantLinear  # noqa: E402
from orin_llm.runtime.sampling import SamplingParams  # noqa: E402


def load(on: bool) -> Planner:
    saved = q8_dot._lib
    if not on:  # this copy's layers pack onto torch's kernels (as with ORIN_LLM_Q8_DOT=0)
        q8_dot._lib = NativeLib("q8_dot", "ORIN_LLM_Q8_DOT", "q8_dot", "torch's kernels")
        q8_dot._lib.error = "off for the A/B"
    try:
        eng = Engine.load(a.engine, device="cpu", draft=False)
    finally:
        q8_dot._lib = saved
    layers = [m for m in eng.model.modules() if isinstance(m, QuantLinear)]
    if on != all(m.q8 is not None for m in layers):
        sys.exit(f"the q8_dot kernels are {'not ' if on else ''}in use in the {'op' if on else 'torch'} copy "
                 f"({q8_dot.unavailable() or 'a layer shape they do not take'})")
    return Planner(eng, load_environment(EXAMPLE_HOME_PATH))  # the daemon's default home


planners = {True: load(True), False: load(False)}
params = SamplingParams(max_tokens=a.max_tokens, temperature=0.0)
tasks = [item.task for item in load_split("heldout")]
counter = iter(range(10**9))


def task() -> str:  # a new task each time: only the home is cached, as for a robot's next call
    n = next(counter)
    return f"{tasks[n % len(tasks)]} (request {n})"


def one(planner: Planner, task: str, mode: str):
    r = planner.plan(task, params, speculation=mode).result
    return r.timings.decode_tokens_per_s


def prefill(planner: Planner, task: str):
    r = planner.plan(task, SamplingParams(max_tokens=1, temperature=0.0), speculation="none").result
    return r.timings.ttft_s * 1000  # (the task's tokens after the cached home, and one step)


def batch(planner: Planner, task: str):
    gens = [planner.start(f"{task} ({i})", params, speculation="none") for i in range(a.batch)]
    iters = [iter(g) for g in gens]
    t0 = time.perf_counter()
    for i in iters:  # all admitted before any finishes (engine.max_batch_size permitting)
        next(i)
    for i in iters:
        for _ in i:
            pass
    return sum(g.result.timings.completion_tokens for g in gens) / (time.perf_counter() - t0)


cases = {"plain (tok/s)": lambda p, t: one(p, t, "none"), "lookup (tok/s)": lambda p, t: one(p, t, "lookup"),
         f"{a.batch} at once, plain (tok/s)": batch, "warm TTFT (ms)": prefill}
times = {c: {True: [], False: []} for c in cases}
for r in range(a.rounds + 1):  # round 0 warms both up, untimed
    for c, fn in cases.items():
        t = task()  # the same task for both copies
        for on in (True, False):
            v = fn(planners[on], t)
            if r:
                times[c][on].append(v)
    print(f"round {r}/{a.rounds}", file=sys.stderr, flush=True)
differ = sum(planners[True].plan(t, params, speculation="none").result.token_ids
             != planners[False].plan(t, params, speculation="none").result.token_ids for t in tasks[:10])

rows = {c: {"q8_dot": statistics.median(v[True]), "torch": statistics.median(v[False])} for c, v in times.items()}
print(f"medians of {a.rounds} rounds, home of {len(planners[True].prefix.ids)} tokens, {a.threads} thread(s)")
print(f"{'':30s} {'q8_dot':>9s} {'torch':>9s} {'speed-up':>9s}")
for c, row in rows.items():
    row["speedup"] = row["torch"] / row["q8_dot"] if c.endswith("(ms)") else row["q8_dot"] / row["torch"]
    print(f"{c:30s} {row['q8_dot']:9.1f} {row['torch']:9.1f} {row['speedup']:8.2f}×")
print(f"greedy plans of 10 held-out tasks that differ between the two: {differ}")
if a.out:
    with open(a.out, "w") as f:
        json.dump({"command": "python " + " ".join(sys.argv), "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                   "machine": machine(), "rounds": a.rounds, "home_tokens": len(planners[True].prefix.ids),
                   "cases": rows, "plans_differing_of_10": differ}, f, indent=1)
