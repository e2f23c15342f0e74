"""Per-token decode time of the target against its weight-only INT8 draft, each on the kernels the
engine runs (q8_dot's on x86 CPUs: Q4_1 target layers, int8 draft layers and heads), side by side in
one process: best of 3 rounds of 32 greedy tokens, one thread unless ORIN_LLM_THREADS says.

    python bench/draft_speed.py --engine engines/smollm2-135m-demo
"""
import argparse
import os
import time

import torch

from orin_llm.runtime.engine import Engine
from orin_llm.runtime.engine_config import EngineConfig

ap = argparse.ArgumentParser()
ap.add_argument("--engine", default="engines/smollm2-135m-demo")
ap.add_argument("--tokens", type=int, default=32)
a = ap.parse_args()
torch.set_num_threads(int(os.environ.get("ORIN_LLM_THREADS", "1")))
e = Engine.load(a.engine, EngineConfig.at_edge(device="cpu"))
draft = e.load_draft()
if draft is None:
    raise SystemExit(f"{a.engine} has no draft model")
models = {"target": (e.model, False), "draft": (draft, True)}
ids = torch.tensor(e.chat_ids([{"role": "user", "content": "List the rooms of a house."}]))
res: dict[str, list[float]] = {}
for _round in range(3):
    for name, (m, is_draft) in models.items():
        c = e.contiguous_cache(len(ids) + a.tokens + 1, draft=is_draft)
        tok = m(ids, c).argmax(-1)
        t0 = time.perf_counter()
        for _ in range(a.tokens):
            tok = m(tok, c).argmax(-1)
        res.setdefault(name, []).append((time.perf_counter() - t0) / a.tokens * 1e3)
for name, v in res.items():
    print(f"{name:8s} best {min(v):6.2f} ms/token")
print(f"draft / target: {min(res['draft']) / min(res['target']):.2f}")
