"""The pinned environment prefix: token identity, suffix-only compute, versions (ARCHITECTURE.md
invariant 2), and what a request reports as cached."""

import pytest

from orin_llm.errors import EnvironmentTooLong, OrinError, PromptTooLong
from orin_llm.planning.home import EXAMPLE_HOME_PATH, environment_from_dict, load_environment
from orin_llm.planning.planner import Planner
from orin_llm.runtime.sampling import SamplingParams

pytestmark = pytest.mark.full

GREEDY = SamplingParams(max_tokens=24)


@pytest.fixture
def planner(engine):
    p = Planner(engine, load_environment(EXAMPLE_HOME_PATH))
    yield p
    engine.unpin(p.pin)


def other_home():
    env = load_environment(EXAMPLE_HOME_PATH).model_dump()
    env["rooms"][1]["objects"].append("teapot")
    env["name"] = "other_home"
    return environment_from_dict(env)


def test_request_ids_start_with_the_prefix_ids(planner, engine):
    ids = planner.prompt_ids(planner.messages("Bring the mug to the sofa.", ["the mug is on the counter"]))
    prefix = list(planner.prefix.ids)
    assert ids[: len(prefix)] == prefix and len(ids) > len(prefix)
    # the suffix is tokenized on its own, and the prefix text is what the template renders
    full = engine.chat_text(planner.messages("Bring the mug to the sofa.", ["the mug is on the counter"]))
    assert full.startswith(planner.prefix.text)
    assert ids[len(prefix):] == engine.encode(full[len(planner.prefix.text):])


def test_cached_tokens_are_not_computed_and_change_nothing(planner, engine):
    """A prompt served from the cache gives bit for bit the answer of the same prompt computed cold:
    every cached block holds exactly what the request would have computed (llama.Item)."""
    task = "Put the socks in the laundry basket and close the wardrobe."
    engine.clear_cache()  # the session's engine: earlier tests' plans on this home left the state block cached
    pinned = planner.plan(task, GREEDY, goal="none")  # the model's own plan: one request, its counts
    bs = engine.cache.block_size
    cached = pinned.result.timings.cached_prompt_tokens
    assert cached == len(planner.prefix.ids) // bs * bs and cached > 0  # whole blocks of the pinned prefix
    assert engine.cache.stats()["used"] == engine.cache.stats()["pinned"]  # the request's own blocks went back
    again = planner.plan(task, GREEDY, goal="none")  # its prompt is cached now, all but the last partial block
    prompt = again.result.timings.prompt_tokens
    assert again.result.timings.cached_prompt_tokens == (prompt - 1) // bs * bs
    engine.unpin(planner.pin)
    engine.clear_cache()
    try:
        cold = planner.plan(task, GREEDY, goal="none").result  # now computed cold: nothing of it is cached
    finally:
        planner.pin = engine.pin(list(planner.prefix.ids))
    assert cold.timings.cached_prompt_tokens == 0
    assert cold.token_ids == pinned.result.token_ids == again.result.token_ids


def test_foreign_traffic_never_evicts_the_pinned_prefix(engine_dir):
    """A small pool, filled by prompts that share nothing with the home: the cache evicts their
    blocks, never the pinned ones, and the next plan still starts from the prefix."""
    from orin_llm.manifest import load_manifest
    from orin_llm.runtime.engine import Engine

    # the smallest pool a pin is allowed in: one request of max_seq_len beside the prefix, and a little more
    eng = Engine.load(engine_dir, device="cpu", draft=False,
                      kv_tokens=load_manifest(engine_dir).limits["max_seq_len"] + 1024)
    planner = Planner(eng, load_environment(EXAMPLE_HOME_PATH))
    pinned = eng.cache.stats()["pinned"]
    blocks = eng.cache.stats()["blocks"]
    text = " ".join(f"item{i}" for i in range(500))  # ~2k tokens of words the home never uses
    for i in range(5):  # the fifth no longer fits beside the others: the cache evicts
        eng.run(eng.generate(eng.chat_ids([{"role": "user", "content": f"{i} {text}"}]), SamplingParams(max_tokens=2)))
    stats = eng.cache.stats()
    assert stats["evictions"] > 0 and stats["pinned"] == pinned and stats["blocks"] == blocks
    again = planner.plan("Open the fridge.", GREEDY, goal="none")  # one request: its counts are the prefix's
    assert again.result.timings.cached_prompt_tokens >= len(planner.prefix.ids) // 16 * 16


def test_a_pin_that_does_not_fit_is_refused_with_the_numbers(engine_dir):
    from orin_llm.runtime.engine import Engine

    probe = Engine.load(engine_dir, device="cpu", draft=False)
    eng = Engine.load(engine_dir, device="cpu", draft=False, kv_tokens=probe.max_seq_len + 256)
    n = len(Planner(probe, load_environment(EXAMPLE_HOME_PATH)).prefix.ids)
    with pytest.raises(OrinError, match=rf"pinning {n} tokens needs {-(-n // 16)} KV blocks of 16 tokens, but the "
                                        rf"pool has 528 blocks \(8448 tokens\): 0 are pinned already and 512 stay "
                                        "free for one request of max_seq_len = 8192"):
        Planner(eng, load_environment(EXAMPLE_HOME_PATH))
    assert eng.cache.stats()["pinned"] == 0


def test_environment_switch_while_a_request_runs(planner, engine):
    """The running request finishes on the version it began with (its own block references keep the
    old prefix); new requests use the new one, which is pinned before the old is unpinned."""
    task = "Bring the apple to the coffee table."
    expected = planner.plan(task, GREEDY)
    v1 = planner.prefix
    run = planner.start(task, GREEDY)
    it = engine.deltas(run.request)
    first = next(it)
    v2 = planner.set_environment(other_home())
    assert v2 == v1.version + 1 and planner.prefix is not v1 and "teapot" in planner.prefix.text
    text = first + "".join(it)
    result = planner.finish(run, v1)
    assert result.environment_version == v1.version and text == run.request.result.text
    assert result.result.token_ids == expected.result.token_ids  # ran entirely on version 1
    pins = engine.cache.pins
    assert [p.ids for p in pins if p is planner.pin] == [planner.prefix.ids]
    assert all(p.ids != v1.ids for p in pins)  # the old version is unpinned
    nxt = planner.plan(task, GREEDY)
    assert nxt.environment_version == v2
    assert nxt.result.timings.cached_prompt_tokens >= len(planner.prefix.ids) // 16 * 16


def test_concurrent_requests_each_get_their_solo_answer(planner, engine):
    """Requests decode together in one forward per step; what else is in the batch changes
    nothing (row-independent kernels, attention per sequence)."""
    tasks = ["Open the fridge.", "Switch off the bedside lamp.", "Bring the book to the sofa."]
    solo = [planner.plan(t, GREEDY).result.token_ids for t in tasks]
    modes = ("none", "lookup", "none")
    runs = [planner.start(t, GREEDY, speculation=mode) for t, mode in zip(tasks, modes, strict=True)]
    iters = [engine.deltas(r.request) for r in runs]
    for i in iters:  # all three are admitted and running before any finishes
        next(i)
    assert engine.scheduler.running and len(engine.scheduler.running) == 3
    for i in iters:
        for _ in i:
            pass
    # finished as planner.plan finishes the solo ones (a plan cut by max_tokens ends at its last whole step)
    assert [planner.finish(r, planner.prefix).result.token_ids for r in runs] == solo
    assert engine.last_batch >= 1 and max(engine.steps, 0) > 0


def test_oversized_environment_is_refused_and_the_old_one_kept(planner, engine):
    huge = load_environment(EXAMPLE_HOME_PATH).model_dump()
    huge["description"] = "a very large home " * 3000
    before, pin = planner.prefix, planner.pin
    with pytest.raises(EnvironmentTooLong) as err:
        planner.set_environment(environment_from_dict(huge))
    # the message names the environment and the numbers: its tokens, the limit, the room left
    tokens = err.value.tokens
    assert tokens > 6144 and f"'example_home' renders to {tokens} prefix tokens" in str(err.value)
    assert "max_input_len is 6144, which leaves 0 tokens for a task" in str(err.value)
    assert planner.prefix is before and planner.pin is pin and pin in engine.cache.pins


def test_an_environment_must_leave_room_for_a_task(planner, engine):
    """One that fills max_input_len exactly would make every plan a 413: refused up front."""
    env = load_environment(EXAMPLE_HOME_PATH)
    n = len(planner.prefix.ids)
    limit = engine.max_input_len
    try:
        engine.max_input_len = n
        with pytest.raises(EnvironmentTooLong, match=f"renders to {n} prefix tokens; this engine's max_input_len "
                                                     f"is {n}, which leaves 0 tokens for a task"):
            planner.set_environment(env)
        engine.max_input_len = n + 1
        assert planner.set_environment(env) == planner.version
    finally:
        engine.max_input_len = limit


def test_a_prompt_over_the_limit_says_how_much_the_environment_takes(planner, engine):
    n = len(planner.prefix.ids)
    with pytest.raises(PromptTooLong, match=f"the environment takes {n} of them, which leaves {6144 - n} for "
                                            "the task and observations"):
        planner.plan("tidy up", GREEDY, ["x " * 3000] * 3)


def test_a_conversation_prefills_only_each_new_turn(planner, engine):
    """An agent loop: task → plan → observation → plan ... Each turn's ids are the last turn's ids
    (prompt and the plan's own tokens) then the new text's, so every earlier turn is served from the
    cache and the tokens computed per turn stay flat while the prompt grows."""
    conv = planner.conversation("robot-1")
    seen, computed = [], []
    for turn, obs in enumerate(["the fridge is closed", "the mug is on the counter", "the counter is wet"]):
        run = planner.start("Bring the mug to the coffee table.", GREEDY, [obs], "none", conversation=conv)
        before = list(conv.ids)
        plan = planner.finish(run, planner.prefix)
        t = plan.result.timings
        if seen:
            assert before[:len(seen)] == seen  # token identity: the last turn, then the new text
        seen = before + plan.result.token_ids
        computed.append(t.prompt_tokens - t.cached_prompt_tokens)
        assert conv.turns == turn + 1 and conv.messages[-1] == {"role": "assistant", "content": plan.result.text}
    assert len(seen) > len(planner.prefix.ids) + 100  # the prompt grew with the turns ...
    # ... what was computed did not: the new turn (headed by the home's state) and at most one partial block
    assert max(computed) <= 100, computed
    planner.set_environment(other_home())
    assert planner.conversation("robot-1").turns == 0  # a new home: its earlier turns do not apply


def test_several_homes_pinned_at_once(planner, engine):
    """A second home is pinned next to the default one; plans in either start from their own prefix,
    and unpinning the second leaves the first pinned."""
    before = engine.cache.stats()["pinned"]
    v = planner.set_environment(other_home(), name="flat-2")
    assert v == 1 and engine.cache.stats()["pinned"] > before
    there = planner.plan("Put the teapot on the counter.", GREEDY, home="flat-2")
    here = planner.plan("Put the mug on the counter.", GREEDY)
    bs = engine.cache.block_size
    assert there.result.timings.cached_prompt_tokens >= len(planner.home("flat-2").prefix.ids) // bs * bs
    assert here.result.timings.cached_prompt_tokens >= len(planner.prefix.ids) // bs * bs
    assert "teapot" in planner.home("flat-2").prefix.text and "teapot" not in planner.prefix.text
    planner.remove("flat-2")
    assert engine.cache.stats()["pinned"] == before
    with pytest.raises(OrinError, match="no home named 'flat-2' on this planner"):
        planner.plan("Open the fridge.", GREEDY, home="flat-2")
