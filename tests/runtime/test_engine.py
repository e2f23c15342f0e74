"""The engine's step loop under a pool too small for its batch: the newest requests are preempted
(their blocks given back, recomputed later, vLLM's recompute) and every request still gets the
greedy answer it gets alone."""

import os
import subprocess
import sys

from orin_llm.runtime.engine import BLOCK_SIZE, Engine
from orin_llm.runtime.sampling import SamplingParams
from tests.conftest import tiny_fixture

tiny_engine_dir = tiny_fixture("engine_dir")  # random weights do here (tests/conftest.py)

TASKS = ["Put the mug in the sink.", "Open the fridge and take out the milk.", "Switch off the lamp.",
         "Bring the book to the sofa."]
PARAMS = SamplingParams(max_tokens=40, temperature=0.0)


def test_preempted_requests_get_their_solo_answers(engine_dir):
    solo_engine = Engine.load(engine_dir, device="cpu")
    prompts = [solo_engine.chat_ids([{"role": "user", "content": t}]) for t in TASKS]
    solo = [solo_engine.run(solo_engine.generate(p, PARAMS, "none")).token_ids for p in prompts]
    # room for about two of the four at their longest: the others must wait or be preempted
    longest = max(len(p) for p in prompts) + PARAMS.max_tokens
    small = Engine.load(engine_dir, device="cpu", kv_tokens=2 * longest + BLOCK_SIZE)
    gens = [small.generate(p, PARAMS, "none") for p in prompts]
    for g in gens:
        small.submit(g)
    while not all(g.done for g in gens):
        small.step()
    assert all(g.error is None for g in gens), [g.error for g in gens]
    assert [g.result.token_ids for g in gens] == solo
    assert small.preemptions > 0  # the pool really was too small for the batch
    stats = small.cache.stats()
    assert stats["used"] == 0 and stats["pinned"] == 0  # every block given back


def test_draft_model_loads_on_first_use_and_catches_up_on_a_pinned_prefix(engine_dir):
    """The draft model is loaded by the first request that asks for it, never by auto, lookup or a
    pin: an engine that serves only those never holds the draft's weights. A draft_model request
    after a pin made without the draft computes the draft's K/V over the pinned blocks itself, and
    its greedy answer is the plain one."""
    eng = Engine.load(engine_dir, device="cpu")
    assert eng.draft_available and eng.draft_model is None
    assert "draft_model" in eng.speculation_modes
    prompt = eng.chat_ids([{"role": "system", "content": "You plan for a robot in a flat with a kitchen, "
                                                         "a hall and a bedroom. " * 4},
                           {"role": "user", "content": TASKS[0]}])
    home = prompt[:(len(prompt) // BLOCK_SIZE - 1) * BLOCK_SIZE]  # whole blocks, as a home prefix is
    eng.pin(home)
    plain = eng.run(eng.generate(prompt, PARAMS, "none"))
    lookup = eng.run(eng.generate(prompt, PARAMS, "auto"))
    assert eng.draft_model is None and eng.kv_usage()["draft_loaded"] is False
    assert plain.timings.cached_prompt_tokens >= len(home) - BLOCK_SIZE  # the pin is what it reuses
    drafted = eng.run(eng.generate(prompt, PARAMS, "draft_model"))
    assert eng.draft_model is not None and eng.kv_usage()["draft_loaded"] is True
    assert drafted.token_ids == plain.token_ids == lookup.token_ids
    assert drafted.speculation.drafted > 0  # it really drafted
    again = eng.run(eng.generate(prompt, PARAMS, "combined"))  # the same loaded model, not a second one
    assert again.token_ids == plain.token_ids
    assert Engine.load(engine_dir, device="cpu", draft=False).speculation_modes == ["auto", "none", "lookup"]


def test_serving_imports_no_compiler_stack(engine_dir):
    """Loading an engine and constraining a request must not import torch._dynamo or triton: they
    cost the daemon ~180 MB and 1.6 s (docs/notes/benchmarks-lab-notes.md, "Lazy draft…"). llguidance.torch and
    modules built on the meta device did. Nor transformers (~30 MB with its tokenizer: runtime/tokenizer.py), which the
    tokenizer and llguidance.hf did. A fresh interpreter: other tests may import them."""
    code = (
        "import sys, os\n"
        "from orin_llm.runtime.engine import Engine\n"
        "from orin_llm.runtime.constraint import Grammar\n"
        "from orin_llm.runtime.sampling import SamplingParams\n"
        f"eng = Engine.load({str(engine_dir)!r}, device='cpu')\n"
        "c = Grammar.lark(eng.vocabulary(), 'start: \"yes\" | \"no\"').constraint()\n"
        "ids = eng.chat_ids([{'role': 'user', 'content': 'Yes or no?'}])\n"
        "out = eng.run(eng.generate(ids, SamplingParams(max_tokens=4, temperature=0.0), 'none', constraint=c))\n"
        "assert out.text.strip() in ('yes', 'no'), out.text\n"
        "print(sorted(m for m in ('torch._dynamo', 'triton', 'torch._inductor', 'transformers') if m in sys.modules))\n"
        "print(os.environ['ONEDNN_PRIMITIVE_CACHE_CAPACITY'], os.environ['LRU_CACHE_CAPACITY'])\n")
    env = {k: v for k, v in os.environ.items() if k not in ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split("\n")[:2] == ["[]", "64 64"], run.stdout
