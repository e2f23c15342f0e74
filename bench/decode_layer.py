"""What the fused decode layer (orin_llm/runtime/decode_layer.py) buys: greedy plans on the daemon's
default home, each decode step's layers run as one C++ call each, or as torch's ops around the same
kernels (q8_dot's linear layers, the INT8 attention op), flipped in one process between requests
(Llama.fused_layers), so both see the same machine. Per request: plain decode and lookup speculation,
one request at a time and `--batch` at once (one forward per step for all of them); median of
`--rounds`. Also counts the greedy plans of 10 held-out tasks that differ between the two (they may:
the small ops round differently, and a last-bit difference can move an int8 activation code).

    python bench/decode_layer.py --engine engines/smollm2-135m-demo [--threads 1] [--out FILE]
"""
import argparse
import json
import os
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
from orin_llm.bench.flip import flip_ab, report  # noqa: E402
from orin_llm.environment import EXAMPLE_HOME_PATH, load_environment  # noqa: E402
from orin_llm.runtime import decode_layer  # noqa: E402
from orin_llm.runtime.engine import Engine  # noqa: E402
from orin_llm.runtime.planner import Planner  # noqa: E402

eng = Engine.load(a.engine, device="cpu", draft=False)
fused = eng.model.fused_layers
if fused is None:
    sys.exit("the fused decode layer is not in use here (a q4_1 engine with an INT8 cache, on an x86 CPU with "
             f"AVX2 where the C++ ops build: {decode_layer.unavailable() or 'a layer not on q8_dot kernels'})")
planner = Planner(eng, load_environment(EXAMPLE_HOME_PATH))  # the daemon's default home


def use(on: bool) -> None:
    eng.model.fused_layers = fused if on else None


def path(on: bool) -> Planner:
    use(on)
    return planner


result = flip_ab(path, a.rounds, a.batch, a.max_tokens)
report(result, ("fused layer", "torch ops"), len(planner.prefix.ids), a.rounds, a.threads)
if a.out:
    with open(a.out, "w") as f:
        json.dump({"command": "python " + " ".join(sys.argv), "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                   "machine": machine(), "rounds": a.rounds, "home_tokens": len(planner.prefix.ids),
                   "arms": {"a": "fused layer", "b": "torch ops"}, **result}, f, indent=1)
