"""What the TensorRT-LLM runtime must do on any 0.12 executor, asserted only on what the runtime shows
(outputs compared with each other, errors, timings, its KV report), never on the fake's insides: so it
runs twice, against the fake (tests/backends/trtllm/fake_trtllm.py) and against the real bindings.

The real run needs `tensorrt_llm.bindings.executor` to import (TensorRT-LLM 0.12.0-jetson, jetson/setup.sh)
and ORIN_LLM_TEST_TRTLLM_ENGINE to name a trtllm engine directory that orin-llm build wrote (on the Orin:
the default profile's engine); it is skipped, with the reason, otherwise (the `eng` fixture,
tests/backends/trtllm/trtllm_both.py, which the other TensorRT-LLM tests share). On an Orin the first
`pytest tests/runtime/test_trtllm_*.py` executes the same assertions the fake passes here."""

from __future__ import annotations

import time

import pytest

from orin_llm.backends.trtllm.responses import POLL
from orin_llm.errors import OrinError
from orin_llm.planning.home import environment_from_dict
from orin_llm.planning.planner import Planner
from orin_llm.runtime.sampling import SamplingParams
from tests.conftest import tiny_fixture

tiny_engine_dir = tiny_fixture("engine_dir")  # random weights do here (tests/conftest.py)

HOME = environment_from_dict({
    "name": "small_home",
    "rooms": [{"name": "kitchen", "places": ["sink", "fridge"], "objects": ["mug"], "devices": ["fridge"]},
              {"name": "hall", "places": ["sofa"], "objects": ["book"]}],
    "actions": [{"name": "go_to", "args": ["place"]}, {"name": "pick", "args": ["object"]},
                {"name": "place", "args": ["object", "place"]}, {"name": "switch_off", "args": ["device"]}],
})


def ids_of(engine, text: str) -> list[int]:
    return engine.chat_ids([{"role": "user", "content": text}])


def test_streamed_deltas_are_the_result(eng):
    gen = eng.generate(ids_of(eng, "Put the cup in the sink."), SamplingParams(max_tokens=24), speculation="none")
    deltas = list(gen)
    assert "".join(deltas) == gen.result.text and gen.result.token_ids
    assert gen.result.finish_reason in ("stop", "length")


def test_greedy_speculation_is_plain_decoding(eng):
    ids = ids_of(eng, "Bring the mug to the sofa, then open the fridge.")
    plain = eng.generate(ids, SamplingParams(max_tokens=32), speculation="none").run()
    for mode in [m for m in eng.speculation_modes if m not in ("auto", "none")]:
        res = eng.generate(ids, SamplingParams(max_tokens=32), speculation=mode).run()
        assert res.token_ids == plain.token_ids, mode


def test_requests_in_flight_together_answer_as_alone(eng):
    tasks = ["Put the cup in the sink.", "Open the door and go to the hall."]
    alone = [eng.generate(ids_of(eng, t), SamplingParams(max_tokens=24), speculation="none").run() for t in tasks]
    gens = [eng.generate(ids_of(eng, t), SamplingParams(max_tokens=24), speculation="none") for t in tasks]
    for g in gens:
        eng.submit(g)
    while eng.busy:
        eng.step()
    assert eng.capabilities.max_batch >= 2
    assert [g.result.token_ids for g in gens] == [r.token_ids for r in alone]


def test_a_stop_cancels_without_waiting(eng):
    ids = ids_of(eng, "Describe the kitchen.")
    free = eng.generate(ids, SamplingParams(max_tokens=48), speculation="none").run()
    words = free.text.split()
    if len(words) < 4:
        pytest.skip("the model's answer is too short to cut")
    t0 = time.perf_counter()
    cut = eng.generate(ids, SamplingParams(max_tokens=48, stop=[words[2]]), speculation="none").run()
    elapsed = time.perf_counter() - t0
    assert cut.finish_reason == "stop" and cut.text == free.text[: free.text.index(words[2])]
    assert elapsed < free.timings.total_s + 2 * POLL.total_seconds()  # no wait for a final response
    again = eng.generate(ids, SamplingParams(max_tokens=8), speculation="none").run()
    assert again.token_ids == free.token_ids[:8] or again.finish_reason == "stop"


def test_constrained_plans_speculate_and_plan_as_plain_decoding(eng):
    planner = Planner(eng, HOME)
    task, params = "Bring the mug to the sofa.", SamplingParams(max_tokens=48)
    plain = planner.plan(task, params, speculation="none", goal="none")
    assert plain.constrained
    for mode in [m for m in eng.speculation_modes if m not in ("auto", "none")]:
        for _ in range(2):  # the second run can look the first up
            spec = planner.plan(task, params, speculation=mode, goal="none")
            assert spec.result.token_ids == plain.result.token_ids, mode


def test_a_grammar_step_it_cannot_place_is_an_error_in_the_answer(eng, monkeypatch):
    planner = Planner(eng, HOME)
    real_request = eng.request

    def without_client(*args, **kwargs):
        req = real_request(*args, **kwargs)
        req.client_id = None
        return req

    monkeypatch.setattr(eng, "request", without_client)
    monkeypatch.setattr(eng.grammar, "bind", lambda client, request_id: None)
    with pytest.raises(OrinError, match="grammar could not be applied"):
        planner.plan("Open the fridge.", SamplingParams(max_tokens=8), speculation="none", goal="none")


def test_kv_figures_come_from_the_executor(eng):
    eng.generate(ids_of(eng, "Go to the hall."), SamplingParams(max_tokens=4), speculation="none").run()
    usage = eng.kv_usage()
    assert usage["source"] == "executor" and usage["capacity_tokens"] > 0
    assert usage["pool"]["blocks"] * eng.tokens_per_block == usage["capacity_tokens"]
    assert usage["tokens"] == 0  # nothing running holds blocks
