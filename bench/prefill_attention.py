"""What the bf16 prefill attention over the INT8 cache (orin_llm/kernels/attention.py) buys: TTFT
of a planning request on a pinned ~1k/2k/4k-token environment (warm), of the task alone, and of the
whole 4k prompt (cold), with the attention as bf16 GEMMs and with torch's float32 SDPA. The switch
is flipped in one process between calls (the model's kernel plan), so both see the same machine:
alternating, median of `--rounds`. The task alone has fewer than MIN_KEYS keys, so it runs SDPA
either way: its ratio shows the noise.

    python bench/prefill_attention.py --engine engines/smollm2-135m-demo [--out docs/bench/prefill_attention.json]
"""
import argparse
import dataclasses
import itertools
import json
import statistics
import sys
import time

from orin_llm.bench.common import machine, scaled_environment
from orin_llm.bench.prefix import ONE, TASK, _ttft
from orin_llm.planning.calibration_data import home_names, load_home
from orin_llm.planning.home import prefix_messages, task_message
from orin_llm.planning.planner import Planner
from orin_llm.runtime.engine import Engine
from orin_llm.runtime.engine_config import EngineConfig

ap = argparse.ArgumentParser()
ap.add_argument("--engine", default="engines/smollm2-135m-demo")
ap.add_argument("--rounds", type=int, default=7)
ap.add_argument("--out")
a = ap.parse_args()

eng = Engine.load(a.engine, EngineConfig.at_edge(device="cpu", draft=False))
if not eng.cache.target_pool.int8:
    sys.exit(f"{a.engine}: the KV cache is not INT8; nothing to compare")
model = eng.model
plan = model.plan
homes = [load_home(n) for n in home_names()]
render = lambda env: eng.chat_text(prefix_messages(env), add_generation_prompt=False)  # noqa: E731


def side_by_side(fn, rounds: int) -> dict:
    """fn() timed with the bf16 attention and with SDPA, alternating; one untimed call of each first."""
    times = {True: [], False: []}
    for i in range(rounds + 1):
        for on in (True, False):
            model.plan = dataclasses.replace(plan, bf16_prompt=on)
            t = fn()
            if i:
                times[on].append(t * 1e3)
    model.plan = plan
    med = {on: statistics.median(v) for on, v in times.items()}
    return {"bf16_ms": med[True], "sdpa_ms": med[False], "sdpa_over_bf16": med[False] / med[True]}


alone_ids = eng.chat_ids([task_message(TASK)])


def alone() -> float:
    return _ttft(eng, eng.generate(eng.chat_ids([task_message(task())]), ONE, "none"))


numbers = itertools.count()


def task() -> str:  # a new task each time: the engine caches every prompt it ran (bench/prefix.py)
    return f"Request {next(numbers)}: {TASK}"


rows = []
for size in (1024, 2048, 4096):
    planner = Planner(eng, scaled_environment(homes, eng.encode, render, size))
    row = {"prefix_tokens": len(planner.prefix.ids),
           "warm": side_by_side(lambda p=planner: _ttft(p.engine, p.start(task(), ONE, speculation="none").request),
                                a.rounds)}
    print(f"prefix {row['prefix_tokens']}: warm {row['warm']}", file=sys.stderr)
    rows.append(row)
full = planner.prompt_ids(planner.messages(TASK))
env = planner.prefix.environment


def cold() -> float:  # a home of its own name: nothing past the system prompt is cached
    own = env.model_copy(update={"name": f"cold{next(numbers)}_{env.name}"})
    return _ttft(eng, eng.generate(eng.chat_ids(prefix_messages(own) + [task_message(TASK)]), ONE, "none"))


task_alone = side_by_side(alone, a.rounds)  # under MIN_KEYS keys: SDPA either way (a check of the noise)
print(f"task alone ({len(alone_ids)} tokens): {task_alone}", file=sys.stderr)
whole = side_by_side(cold, 2)
print(f"cold, the whole {len(full)}-token prompt: {whole}", file=sys.stderr)
# warm / task alone is the prefix scenario's figure: there the two are measured side by side
print(f"{'':24s} {'bf16 GEMMs':>11s} {'fp32 SDPA':>10s} {'SDPA/bf16':>9s}")
for r in rows:
    w = r["warm"]
    print(f"warm, {r['prefix_tokens']:5d}-token prefix  {w['bf16_ms']:8.1f} ms {w['sdpa_ms']:7.1f} ms "
          f"{w['sdpa_over_bf16']:8.2f}×")
print(f"task alone ({len(alone_ids)} tokens)     {task_alone['bf16_ms']:8.1f} ms {task_alone['sdpa_ms']:7.1f} ms "
      f"{task_alone['sdpa_over_bf16']:8.2f}×")
print(f"cold ({len(full)} tokens)          {whole['bf16_ms']:8.0f} ms {whole['sdpa_ms']:7.0f} ms "
      f"{whole['sdpa_over_bf16']:8.2f}×")
if a.out:
    with open(a.out, "w") as f:
        utc = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        json.dump({"command": " ".join(["python"] + sys.argv), "utc": utc, "machine": machine(),
                   "rounds": a.rounds, "warm": rows, "task_alone": task_alone, "task_alone_tokens": len(alone_ids),
                   "cold": {"prompt_tokens": len(full), **whole}}, f, indent=1)
