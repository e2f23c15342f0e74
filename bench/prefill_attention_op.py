"""What the INT8 prompt attention op (orin_llm/kernels/prefill_attention.py) buys: the warm time to first
token of new tasks on a long home (every token of the task attends over the whole cached home), with
the op or with the bf16 GEMMs it replaced, flipped in one process between requests (the model's kernel plan),
so both see the same machine; plus plain decode, lookup and `--batch` at once (which the op does not
touch: a control), and how many greedy plans of 10 held-out tasks differ between the two.

    python bench/prefill_attention_op.py --engine engines/smollm2-135m-demo [--home-tokens 4000] \\
        [--threads 1] [--out FILE]
"""
import dataclasses
import sys

from orin_llm.bench.flip import arguments, run

a = arguments(home_tokens=4000)

from orin_llm.bench.common import scaled_environment  # noqa: E402
from orin_llm.planning.calibration_data import home_names, load_home  # noqa: E402
from orin_llm.planning.home import prefix_messages  # noqa: E402
from orin_llm.planning.planner import Planner  # noqa: E402
from orin_llm.runtime.engine import Engine  # noqa: E402
from orin_llm.runtime.engine_config import EngineConfig  # noqa: E402

eng = Engine.load(a.engine, EngineConfig.at_edge(device="cpu", draft=False))
plan = eng.model.plan
if not plan.int8_prompt:
    sys.exit("the INT8 prompt attention op is not in use here (an engine with an INT8 cache, on a CPU with "
             f"AVX-512 VNNI and BF16 where the op builds: {dict(plan.why_not).get('int8_prompt_attention')})")
home = scaled_environment([load_home(n) for n in home_names()], eng.encode,
                          lambda e: eng.chat_text(prefix_messages(e), add_generation_prompt=False), a.home_tokens)
planner = Planner(eng, home)


def path(on: bool) -> Planner:
    eng.model.plan = dataclasses.replace(plan, int8_prompt=on)
    return planner


run(path, ("INT8 op", "bf16 GEMMs"), a, ttft=True)
