"""What the integer dot-product kernels (orin_llm/kernels/q8_dot.py) buy: greedy plans on the daemon's
default home, from two copies of the engine in one process (so both see the same machine, and the same tasks), one on
q8_dot's kernels (int8 activations, llama.cpp's way) and one on torch's weight-only kernels (bf16
activations), requests alternating. Per request: plain decode and lookup speculation, one request at
a time and `--batch` at once; median of `--rounds`. Also the median time of one prompt prefill (a
new task after the cached home) and how many of 10 held-out greedy plans differ between the two
(they may: the activations are rounded differently, int8 per block of 32 against bf16). Both copies
run torch's ops between the kernels: the fused decode layer (bench/decode_layer.py) is off in the
q8_dot copy, so this measures the kernels alone.

    python bench/q8_dot.py --engine engines/smollm2-135m-demo [--threads 1] [--out FILE]
"""
import dataclasses
import os
import sys

from orin_llm.bench.flip import arguments, run

a = arguments()

from orin_llm.kernels import q8_dot  # noqa: E402
from orin_llm.kernels.quant import QuantLinear  # noqa: E402
from orin_llm.planning.home import EXAMPLE_HOME_PATH, load_environment  # noqa: E402
from orin_llm.planning.planner import Planner  # noqa: E402
from orin_llm.runtime.engine import Engine  # noqa: E402
from orin_llm.runtime.engine_config import EngineConfig  # noqa: E402
from orin_llm.runtime.kernel_plan import KernelSwitches  # noqa: E402


def load(on: bool) -> Planner:
    # the torch copy's layers pack onto torch's kernels (as with ORIN_LLM_Q8_DOT=0); both copies run torch's
    # ops between the kernels (bench/decode_layer.py measures the fused layer)
    switches = KernelSwitches.from_environment(os.environ)
    eng = Engine.load(a.engine, EngineConfig.at_edge(device="cpu", draft=False, switches=dataclasses.replace(
        switches, q8_dot=switches.q8_dot and on, fused_decode=False)))
    layers = [m for m in eng.model.modules() if isinstance(m, QuantLinear)]
    if on != all(m.q8 is not None for m in layers):
        sys.exit(f"the q8_dot kernels are {'not ' if on else ''}in use in the {'op' if on else 'torch'} copy "
                 f"({q8_dot.unavailable() or 'a layer shape they do not take'})")
    return Planner(eng, load_environment(EXAMPLE_HOME_PATH))  # the daemon's default home


planners = {True: load(True), False: load(False)}
run(planners.__getitem__, ("q8_dot", "torch's kernels"), a, ttft=True)
