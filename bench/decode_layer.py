"""What the fused decode layer (orin_llm/kernels/decode_layer.py) buys: greedy plans on the daemon's
default home, each decode step's layers run as one C++ call each, or as torch's ops around the same
kernels (q8_dot's linear layers, the INT8 attention op), flipped in one process between requests
(the model's kernel plan), so both see the same machine. Per request: plain decode and lookup speculation,
one request at a time and `--batch` at once (one forward per step for all of them); median of
`--rounds`. Also counts the greedy plans of 10 held-out tasks that differ between the two (they may:
the small ops round differently, and a last-bit difference can move an int8 activation code).

    python bench/decode_layer.py --engine engines/smollm2-135m-demo [--threads 1] [--out FILE]
"""
import dataclasses
import sys

from orin_llm.bench.flip import arguments, run

a = arguments()

from orin_llm.planning.home import EXAMPLE_HOME_PATH, load_environment  # noqa: E402
from orin_llm.planning.planner import Planner  # noqa: E402
from orin_llm.runtime.engine import Engine  # noqa: E402
from orin_llm.runtime.engine_config import EngineConfig  # noqa: E402

eng = Engine.load(a.engine, EngineConfig.at_edge(device="cpu", draft=False))
plan = eng.model.plan
if not plan.fused_decode:
    sys.exit("the fused decode layer is not in use here (a q4_1 engine with an INT8 cache, on an x86 CPU with "
             f"AVX2 where the C++ ops build: {dict(plan.why_not).get('fused_decode_layer')})")
planner = Planner(eng, load_environment(EXAMPLE_HOME_PATH))  # the daemon's default home


def path(on: bool) -> Planner:
    eng.model.plan = dataclasses.replace(plan, fused_decode=on)
    return planner


run(path, ("fused layer", "torch ops"), a)
