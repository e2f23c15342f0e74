"""The engine's step loop under a pool too small for its batch: the newest requests are preempted
(their blocks given back, recomputed later, vLLM's recompute) and every request still gets the
greedy answer it gets alone."""

from orin_llm.runtime.engine import BLOCK_SIZE, Engine
from orin_llm.runtime.sampling import SamplingParams

TASKS = ["Put the mug in the sink.", "Open the fridge and take out the milk.", "Switch off the lamp.",
         "Bring the book to the sofa."]
PARAMS = SamplingParams(max_tokens=40, temperature=0.0)


def test_preempted_requests_get_their_solo_answers(engine_dir):
    solo_engine = Engine.load(engine_dir, device="cpu")
    prompts = [solo_engine.chat_ids([{"role": "user", "content": t}]) for t in TASKS]
    solo = [solo_engine.generate(p, PARAMS, "none").run().token_ids for p in prompts]
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
