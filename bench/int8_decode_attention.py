"""What the INT8 decode attention op (orin_llm/kernels/int8_attention.py) buys: greedy plans on the
daemon's default home, decoded with the op and with torch's ops over converted K/V (gather, convert,
SDPA), flipped in one process between requests (the model's kernel plan), so both see the same machine.
Per request: plain decode and lookup speculation, one request at a time and `--batch` at once
(one forward per step for all of them). Alternating, median of `--rounds`; also counts the plans
whose tokens differ between the two (float32 both ways, summed in another order). The fused decode
layer (which runs the op inside its own call) is off in both arms: bench/decode_layer.py measures it.

    python bench/int8_decode_attention.py --engine engines/smollm2-135m-demo [--threads 1] [--out FILE]
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
if not plan.int8_decode:
    sys.exit("the INT8 decode attention op is not in use here (an INT8 engine on a CPU where it builds)")
planner = Planner(eng, load_environment(EXAMPLE_HOME_PATH))  # the daemon's default home


def path(on: bool) -> Planner:
    # the op inside torch's per-layer ops: the fused decode layer (which runs it too) off in both arms
    eng.model.plan = dataclasses.replace(plan, int8_decode=on, fused_decode=False)
    return planner


run(path, ("INT8 op", "torch ops"), a)
