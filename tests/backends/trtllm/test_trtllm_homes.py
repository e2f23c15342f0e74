"""Homes on TensorRT-LLM 0.12, through the fake executor and the real bindings (`eng`,
tests/backends/trtllm/trtllm_both.py): replacing the default home and putting and
removing named ones go through pin/unpin as on the torch engine (a PUT used to answer 500 here)."""


from orin_llm.planning.planner import Planner
from orin_llm.runtime.sampling import SamplingParams
from tests.conftest import tiny_fixture

from .test_trtllm_engine import target_executor
from .test_trtllm_grammar import SMALL_HOME
from .trtllm_both import on_fake

tiny_engine_dir = tiny_fixture("engine_dir")  # random weights do here (tests/conftest.py)


def test_homes_are_replaced_added_and_removed(eng):
    planner = Planner(eng, SMALL_HOME)
    first = list(planner.prefix.ids)
    assert eng.pins == [tuple(first)]
    renamed = SMALL_HOME.model_copy(update={"name": "small_home_v2"})
    assert planner.set_environment(renamed) == 2  # the default home's second version
    second = list(planner.prefix.ids)
    assert second != first and eng.pins == [tuple(second)]  # the old version is forgotten
    other = SMALL_HOME.model_copy(update={"name": "cottage"})
    planner.set_environment(other, "cottage")
    cottage = list(planner.home("cottage").prefix.ids)
    assert eng.pins == [tuple(second), tuple(cottage)]
    block = eng.tokens_per_block
    served = len(cottage) // block * block if eng.block_reuse else 0  # without reuse a pin only records
    for ids in (second, cottage):  # each pinned home serves its own whole blocks
        assert eng.cached_prefix(ids + [5, 6]) == (len(ids) // block * block if eng.block_reuse else 0)
    plan = planner.plan("Open the fridge.", SamplingParams(max_tokens=6), home="cottage")
    assert plan.result.timings.prompt_tokens > len(cottage)  # the home's prompt, then the task
    assert plan.result.timings.cached_prompt_tokens == served  # measured
    fake = on_fake(eng)
    if fake is not None:
        assert served > 0 and target_executor(fake).requests[-1].input_token_ids[:len(cottage)] == cottage
    planner.remove("cottage")
    assert eng.pins == [tuple(second)] and eng.cached_prefix(cottage + [5, 6]) == 0
    usage = eng.kv_usage()  # the executor's figures: nothing running holds blocks; the pool stored the homes
    assert usage["source"] == "executor" and usage["tokens"] == 0 and usage["pinned_tokens"] == len(second)
    assert usage["pool"]["hit_tokens"] >= served
