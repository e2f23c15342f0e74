"""The Edge-LLM backend's cases that hold on the fake and on the real server alike (issue #46 item 2): each test
runs twice, `[fake]` against fake_server.py and `[real]` against a running `tensorrt-edgellm-serve`. They read
only what the backend shows (its results, streams, timings, errors), never the fake's records, so the real
case asserts what the fake one does.

The real case runs on a JetPack 7 Orin, where first contact's tests stage starts it (jetson/first-contact.sh
--jetpack 7, stage 6):
    ORIN_LLM_TEST_EDGELLM_ENGINE=<engine dir> ORIN_LLM_EDGELLM_URL=http://127.0.0.1:8000 \
        python -m pytest tests/backends/edgellm/test_edgellm_both.py -k real
Elsewhere it is skipped, saying so."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from orin_llm.backends.edgellm.engine import EdgellmEngine
from orin_llm.errors import OrinError
from orin_llm.planning.home import EXAMPLE_HOME_PATH, load_environment
from orin_llm.planning.home.steps import check_steps
from orin_llm.planning.home.world import simulate
from orin_llm.planning.planner import Planner
from orin_llm.runtime.sampling import SamplingParams

from .conftest import drive
from .fake_server import fake

ENGINE_VARIABLE = "ORIN_LLM_TEST_EDGELLM_ENGINE"
REAL_LIMIT_S = 120.0  # a 3B on an Orin, its server cold
TASK = "Bring the milk from the fridge to the coffee table."
SCRIPT = "go_to(fridge)\nopen(fridge)\npick(milk)\ngo_to(coffee_table)\nplace(milk, coffee_table)\n"


@pytest.fixture(params=["fake", "real"])
def edge(request, edge_dir):
    """A loaded EdgellmEngine: on the fake (tokens 20 ms apart, as a 3B decodes on an Orin at best), or on the
    server at $ORIN_LLM_EDGELLM_URL with the engine directory $ORIN_LLM_TEST_EDGELLM_ENGINE."""
    if request.param == "real":
        where = os.environ.get(ENGINE_VARIABLE)
        if not where:
            pytest.skip(f"no Edge-LLM server here: on a JetPack 7 Orin, {ENGINE_VARIABLE}=<engine dir> and "
                        "ORIN_LLM_EDGELLM_URL=<its server> (jetson/first-contact.sh --jetpack 7 sets both)")
        engine = EdgellmEngine.load(Path(where))
        yield engine
        engine.close()
        return
    with fake(edge_dir, decode_s_per_token=0.02, script=SCRIPT * 8) as server:
        engine = EdgellmEngine.load(edge_dir, url=server.url)
        yield engine
        engine.close()


def test_a_plain_request_streams_and_counts_only_what_the_server_says(edge):
    ids = edge.chat_ids([{"role": "user", "content": "Name three rooms of a house."}])
    gen = edge.generate(ids, SamplingParams(max_tokens=24, temperature=0.0))
    deltas = drive(edge, gen, REAL_LIMIT_S)
    assert gen.error is None, gen.error
    r = gen.result
    assert len(deltas) > 1 and "".join(deltas) == r.text and r.text.strip()
    assert r.finish_reason in ("stop", "length") and 1 <= r.timings.completion_tokens <= 24
    assert r.timings.prompt_tokens == len(ids)
    # its usage has no cached tokens: none are claimed
    assert r.timings.cached_prompt_tokens == 0 and r.timings.computed_prompt_tokens == len(ids)
    assert 0 < r.timings.ttft_s <= r.timings.total_s


def test_a_plan_under_the_state_runs_in_the_home(edge):
    """Each step asked under the grammar of the steps feasible now: whatever the model writes, the plan runs
    in the home from its state (the simulator says so, not the backend)."""
    planner = Planner(edge, load_environment(EXAMPLE_HOME_PATH))
    prefix = planner.home().prefix
    run = planner.start(TASK, SamplingParams(max_tokens=64, temperature=0.0), goal="none")
    drive(edge, run.request, REAL_LIMIT_S)
    assert run.request.error is None, run.request.error
    result = planner.finish(run, prefix)
    env = planner.home().prefix.environment
    steps, rejected = check_steps("\n".join(map(str, result.steps)), env)
    assert steps and not rejected and not result.violations
    assert not simulate(env, steps, env.state)[1]


def test_a_cancelled_request_ends_at_once_and_the_engine_is_free(edge):
    ids = edge.chat_ids([{"role": "user", "content": "Count slowly from one to two hundred."}])
    gen = edge.generate(ids, SamplingParams(max_tokens=400, temperature=0.0))
    edge.submit(gen)
    t0 = time.monotonic()
    while not gen.take():
        edge.step()
        assert time.monotonic() - t0 < 60, "no first token"
    edge.abort(gen)
    assert gen.done and gen.result is None and not edge.busy
    again = edge.generate(ids, SamplingParams(max_tokens=4, temperature=0.0))
    drive(edge, again, REAL_LIMIT_S)
    assert again.error is None and again.result.timings.completion_tokens >= 1


def test_what_it_cannot_do_is_refused_before_the_server_is_asked(edge):
    ids = edge.encode("Go to the kitchen.")
    with pytest.raises(OrinError, match="no external draft tokens"):
        edge.generate(ids, SamplingParams(max_tokens=2), speculation="draft_model")
    with pytest.raises(OrinError, match="prompt"):
        edge.generate(ids * (edge.max_input_len // len(ids) + 1), SamplingParams(max_tokens=2))
