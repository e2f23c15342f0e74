"""The pinned environment prefix: token identity, suffix-only compute, versions (ARCHITECTURE.md
invariant 2), and what a request reports as cached."""

import pytest

from orin_llm.environment import EXAMPLE_HOME_PATH, environment_from_dict, load_environment
from orin_llm.errors import EnvironmentTooLong, PromptTooLong
from orin_llm.runtime.planner import Planner
from orin_llm.runtime.sampling import SamplingParams

GREEDY = SamplingParams(max_tokens=24)


@pytest.fixture
def planner(engine):
    return Planner(engine, load_environment(EXAMPLE_HOME_PATH))


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


def test_only_the_suffix_is_computed_and_the_output_is_unchanged(planner, engine):
    task = "Put the socks in the laundry basket."
    pinned = planner.plan(task, GREEDY)
    assert pinned.result.timings.cached_prompt_tokens == len(planner.prefix.ids)
    assert engine.cache.length == len(planner.prefix.ids)  # the prefix stays, the request is gone
    # the same prompt computed from scratch gives the same tokens
    engine.pinned = []
    cold = engine.generate(planner.prompt_ids(planner.messages(task)), GREEDY).run()
    assert cold.timings.cached_prompt_tokens == 0
    assert cold.token_ids == pinned.result.token_ids


def test_a_foreign_prompt_evicts_the_prefix_and_the_planner_restores_it(planner, engine):
    n = len(planner.prefix.ids)
    warm = planner.plan("Open the fridge.", GREEDY).result.timings
    assert (warm.cached_prompt_tokens, warm.repinned_prefix_tokens) == (n, 0)
    engine.generate(engine.chat_ids([{"role": "user", "content": "hi"}]), GREEDY).run()
    assert engine.pinned == []
    # the next plan prefills the prefix again inside its own request: prefill, not cached
    again = planner.plan("Open the fridge.", GREEDY)
    t = again.result.timings
    assert (t.cached_prompt_tokens, t.repinned_prefix_tokens, t.prompt_tokens) == (0, n, warm.prompt_tokens)
    assert t.as_dict()["cached_prompt_tokens"] == 0 and t.as_dict()["repinned_prefix_tokens"] == n
    # ... and the one after it finds the prefix pinned again
    after = planner.plan("Open the fridge.", GREEDY).result
    assert (after.timings.cached_prompt_tokens, after.timings.repinned_prefix_tokens) == (n, 0)
    assert after.token_ids == again.result.token_ids


def test_environment_switch_waits_for_the_running_request(planner, engine):
    task = "Bring the apple to the coffee table."
    expected = planner.plan(task, GREEDY)
    v1 = planner.prefix
    gen = planner.start(task, GREEDY)
    it = iter(gen)
    first = next(it)
    v2 = planner.set_environment(other_home())
    assert v2 == v1.version + 1 and planner.prefix is v1  # not yet switched
    text = first + "".join(it)
    result = planner.finish(gen, v1)
    assert result.environment_version == v1.version and text == gen.result.text
    assert result.result.token_ids == expected.result.token_ids  # ran entirely on version 1
    assert planner.version == v2 and "teapot" in planner.prefix.text
    assert engine.pinned == list(planner.prefix.ids)
    nxt = planner.plan(task, GREEDY)
    assert nxt.environment_version == v2
    assert nxt.result.timings.cached_prompt_tokens == len(planner.prefix.ids)


def test_one_request_at_a_time(planner):
    gen = iter(planner.start("Open the fridge.", GREEDY))
    next(gen)
    with pytest.raises(RuntimeError, match="one request at a time"):
        planner.start("Close the fridge.", GREEDY)
    gen.close()
    assert planner.plan("Close the fridge.", GREEDY).text


def test_oversized_environment_is_refused_and_the_old_one_kept(planner, engine):
    huge = load_environment(EXAMPLE_HOME_PATH).model_dump()
    huge["description"] = "a very large home " * 3000
    before = planner.prefix
    with pytest.raises(EnvironmentTooLong) as err:
        planner.set_environment(environment_from_dict(huge))
    # the message names the environment and the numbers: its tokens, the limit, the room left
    tokens = err.value.tokens
    assert tokens > 6144 and f"'example_home' renders to {tokens} prefix tokens" in str(err.value)
    assert "max_input_len is 6144, which leaves 0 tokens for a task" in str(err.value)
    assert planner.prefix is before and engine.pinned == list(before.ids)


def test_an_environment_must_leave_room_for_a_task(planner, engine):
    """One that fills max_input_len exactly would make every plan a 413: refused up front."""
    env = load_environment(EXAMPLE_HOME_PATH)
    n = len(planner.prefix.ids)
    limit = engine.manifest.limits["max_input_len"]
    try:
        engine.manifest.limits["max_input_len"] = n
        with pytest.raises(EnvironmentTooLong, match=f"renders to {n} prefix tokens; this engine's max_input_len "
                                                     f"is {n}, which leaves 0 tokens for a task"):
            planner.set_environment(env)
        engine.manifest.limits["max_input_len"] = n + 1
        assert planner.set_environment(env) == planner.version
    finally:
        engine.manifest.limits["max_input_len"] = limit


def test_a_prompt_over_the_limit_says_how_much_the_environment_takes(planner, engine):
    n = len(planner.prefix.ids)
    with pytest.raises(PromptTooLong, match=f"the environment takes {n} of them, which leaves {6144 - n} for "
                                            "the task and observations"):
        planner.plan("tidy up", GREEDY, ["x " * 3000] * 3)
