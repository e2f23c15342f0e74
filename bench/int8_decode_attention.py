"""What the INT8 decode attention op (orin_llm/runtime/int8_attention.py) buys: greedy plans on the
daemon's default home, decoded with the op and with torch's ops over converted K/V (gather, convert,
SDPA), flipped in one process between requests (Llama.int8_decode), so both see the same machine.
Per request: plain decode and lookup speculation, one request at a time and `--batch` at once
(one forward per step for all of them). Alternating, median of `--rounds`; also counts the plans
whose tokens differ between the two (float32 both ways, summed in another order).

    python bench/int8_decode_attention.py --engine engines/smollm2-135m-demo [--threads 1] [--out FILE]
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
from orin_llm.runtime.engine import Engine  # noqa: E402
from orin_llm.runtime.planner import Planner  # noqa: E402
from orin_llm.runtime.sampling import SamplingParams  # noqa: E402

eng = Engine.load(a.engine, device="cpu", draft=False)
if not eng.model.int8_decode:
    sys.exit("the INT8 decode attention op is not in use here (an INT8 engine on a CPU where it builds)")
planner = Planner(eng, load_environment(EXAMPLE_HOME_PATH))  # the daemon's default home
params = SamplingParams(max_tokens=a.max_tokens, temperature=0.0)
tasks = [item.task for item in load_split("heldout")]
counter = iter(range(10**9))


def task(base: str) -> str:  # a new request each time: only the home is cached, as for a robot's next call
    return f"{base} (request {next(counter)})"


def one(mode: str, base: str):
    r = planner.plan(task(base), params, speculation=mode).result
    return r.timings.decode_tokens_per_s, r.token_ids


def batch(mode: str, base: str):
    gens = [planner.start(task(base), params, speculation=mode) for _ in range(a.batch)]
    iters = [iter(g) for g in gens]
    t0 = time.perf_counter()
    for i in iters:  # all admitted before any finishes (engine.max_batch_size permitting)
        next(i)
    for i in iters:
        for _ in i:
            pass
    tokens = sum(g.result.timings.completion_tokens for g in gens)
    return tokens / (time.perf_counter() - t0), None


cases = {"plain": lambda b: one("none", b), "lookup": lambda b: one("lookup", b),
         f"{a.batch} at once, plain": lambda b: batch("none", b)}
times = {c: {True: [], False: []} for c in cases}
for r in range(a.rounds + 1):  # round 0 warms both paths up, untimed
    for c, fn in cases.items():
        base = tasks[(r * len(cases) + list(cases).index(c)) % len(tasks)]  # the same task both ways
        for on in (True, False):
            eng.model.int8_decode = on
            tps, _ = fn(base)
            if r:
                times[c][on].append(tps)
    print(f"round {r}/{a.rounds}", file=sys.stderr, flush=True)
eng.model.int8_decode = True
# the same tasks through both paths: do the greedy plans agree?
differ = 0
for t in tasks[:10]:
    ids = {}
    for on in (True, False):
        eng.model.int8_decode = on
        ids[on] = planner.plan(t, params, speculation="none").result.token_ids
    differ += ids[True] != ids[False]
eng.model.int8_decode = True

rows = {c: {"op_tokens_per_s": statistics.median(v[True]), "torch_tokens_per_s": statistics.median(v[False])}
        for c, v in times.items()}
print(f"decode tokens/s (median of {a.rounds}), home of {len(planner.prefix.ids)} tokens, {a.threads} thread(s)")
print(f"{'':22s} {'INT8 op':>9s} {'torch ops':>10s} {'op/torch':>9s}")
for c, row in rows.items():
    row["ratio"] = row["op_tokens_per_s"] / row["torch_tokens_per_s"]
    print(f"{c:22s} {row['op_tokens_per_s']:9.1f} {row['torch_tokens_per_s']:10.1f} {row['ratio']:8.2f}×")
print(f"greedy plans of 10 held-out tasks that differ between the two: {differ}")
if a.out:
    with open(a.out, "w") as f:
        json.dump({"command": "python " + " ".join(sys.argv), "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                   "machine": machine(), "rounds": a.rounds, "home_tokens": len(planner.prefix.ids),
                   "cases": rows, "plans_differing_of_10": differ}, f, indent=1)
