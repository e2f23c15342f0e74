"""What the oneDNN-packed linears (orin_llm/kernels/packed.py) buy: the target's decode-step time
with and without them, for one-token steps and for k+1-token verify steps, in the exact
(batch-invariant) and the fast mode, and whether the kernels were found row-independent.
Each configuration runs in its own process (ORIN_LLM_PACK is read at load), interleaved, best of 3.

    python bench/decode_step.py --engine engines/smollm2-135m-demo [--out docs/bench/decode_step.json]
"""
import argparse
import json
import os
import subprocess
import sys
import time

CHILD = r"""
import json, sys, time, torch
from orin_llm.runtime.engine import Engine
from orin_llm.runtime.engine_config import EngineConfig
eng = Engine.load(sys.argv[1], EngineConfig.at_edge(device="cpu", draft=False, exact=sys.argv[2] == "exact"))
m, c = eng.model, eng.contiguous_cache(1024)
ids = torch.tensor(eng.chat_ids([{"role": "user", "content": "Plan: bring the mug to the sofa. " * 12}]))
m(ids, c); n = c.length
out = {"context_tokens": n, "rows_independent": m.plan.rows_independent, "ms": {}}
for width in (1, 3, 5, 9):
    x = torch.arange(100, 100 + width)
    best = 1e9
    for _ in range(10):
        c.crop(n); t0 = time.perf_counter(); m(x, c, num_logits=width); best = min(best, time.perf_counter() - t0)
    out["ms"][width] = best * 1e3
print(json.dumps(out))
"""

ap = argparse.ArgumentParser()
ap.add_argument("--engine", default="engines/smollm2-135m-demo")
ap.add_argument("--out")
a = ap.parse_args()
runs: dict = {}
for _round in range(3):
    for pack in ("1", "0"):
        for mode in ("exact", "fast"):
            env = {**os.environ, "ORIN_LLM_PACK": pack}
            r = json.loads(subprocess.run([sys.executable, "-c", CHILD, a.engine, mode], env=env, check=True,
                                          capture_output=True, text=True).stdout.strip().splitlines()[-1])
            key = f"{'packed' if pack == '1' else 'torch default'} / {mode}"
            prev = runs.get(key)
            if prev:
                r["ms"] = {w: min(v, prev["ms"][w]) for w, v in r["ms"].items()}
            runs[key] = r
            print(f"round {_round + 1}: {key}", file=sys.stderr)
print(f"context {next(iter(runs.values()))['context_tokens']} tokens; forward time in ms by step width (best of 3)")
print(f"{'linears / mode':28s} {'rows indep.':>11s} " + " ".join(f"{w:>7s}" for w in ("1", "3", "5", "9")))
for key, r in runs.items():
    print(f"{key:28s} {str(r['rows_independent']):>11s} " + " ".join(f"{v:7.1f}" for v in r["ms"].values()))
if a.out:
    with open(a.out, "w") as f:
        json.dump({"command": " ".join(sys.argv), "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                   "runs": runs}, f, indent=1)
