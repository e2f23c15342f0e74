"""The Edge-LLM backend (backends/edgellm) against the fake of its server (fake_server.py): a planning call with
the home's grammar, one step per request under the home's state, streaming, cancel, deadlines, homes stored
in its context cache; and what it cannot do, refused: lookup and draft speculation, a server that does not
serve what the engine was built for, a grammar without text, a prompt the server counted otherwise, a full
queue. The engine directory is the tiny engine's tokenizer and shape under an "edgellm" manifest (what
the export writes is checked for real in tests/build/test_edgellm_export.py)."""

from __future__ import annotations

import json
import time

import pytest

from orin_llm.backends.edgellm.engine import EdgellmEngine
from orin_llm.backends.loader import load_engine
from orin_llm.errors import OrinError
from orin_llm.planning.home import EXAMPLE_HOME_PATH, load_environment
from orin_llm.planning.planner import Planner
from orin_llm.runtime.backend import Backend
from orin_llm.runtime.block_manager import NoBlocks
from orin_llm.runtime.sampling import SamplingParams

from .conftest import drive
from .fake_server import fake

TASK = "Bring the milk from the fridge to the coffee table."


@pytest.fixture
def server(edge_dir):
    with fake(edge_dir) as s:
        yield s


@pytest.fixture
def edge(edge_dir, server):
    e = EdgellmEngine.load(edge_dir, url=server.url)
    yield e
    e.close()


def test_it_is_a_backend_and_says_what_it_can_and_cannot_do(edge, edge_dir, server):
    assert isinstance(edge, Backend)
    caps = edge.capabilities
    assert caps.backend == "edgellm" and caps.max_batch == 2 == edge.stats().max_running
    assert caps.grammars and caps.speculation == ("auto", "none") == caps.constrained_speculation
    assert not (caps.tunable_batch or caps.paced_prefill or caps.persistent_histories or caps.kernels
                or caps.pins_hold)
    assert isinstance(load_engine(edge_dir, url=server.url, threads=2, device="cpu"), EdgellmEngine)
    with pytest.raises(OrinError, match="batches and paces prompts inside its server"):
        edge.tune(max_running=1)
    with pytest.raises(OrinError, match="no lookup history"):
        edge.persist_histories(edge_dir / "lookup")
    assert edge.kv_usage()["dtype"] == "fp16" and edge.kv_usage()["reported_by_server"] is False


def test_a_plain_request_streams_its_text_and_is_timed(edge, server):
    ids = edge.chat_ids([{"role": "user", "content": "Where is the milk?"}])
    gen = edge.generate(ids, SamplingParams(max_tokens=64, temperature=0.0))
    deltas = drive(edge, gen)
    assert len(deltas) > 1 and "".join(deltas) == gen.result.text == server.script
    t = gen.result.timings
    assert t.prompt_tokens == len(ids) == server.seen[-1].prompt_tokens and t.completion_tokens > 1
    assert 0 < t.ttft_s < t.total_s and t.cached_prompt_tokens == 0  # the server reports no cached tokens
    body = server.seen[-1].body
    assert body["apply_chat_template"] is False and body["messages"][0]["content"] == edge.tokenizer.decode(
        ids, skip_special_tokens=False)


def test_other_speculation_is_refused_never_dropped(edge):
    ids = edge.encode("Go to the kitchen.")
    for mode in ("lookup", "draft_model", "combined"):
        with pytest.raises(OrinError, match="no external draft tokens"):
            edge.generate(ids, SamplingParams(max_tokens=2), speculation=mode)


@pytest.fixture(scope="module")
def planner(edge_dir, tmp_path_factory):
    with fake(edge_dir, script="go_to(fridge)\nopen(fridge)\npick(milk)\n") as s:
        engine = EdgellmEngine.load(edge_dir, url=s.url)
        yield Planner(engine, load_environment(EXAMPLE_HOME_PATH)), s


def plan(planner: Planner, **kw):
    prefix = planner.home().prefix
    run = planner.start(TASK, SamplingParams(max_tokens=64, temperature=0.0), **{"goal": "none", **kw})
    drive(planner.engine, run.request)
    if run.request.error is not None:
        raise run.request.error
    return planner.finish(run, prefix), run.request


def test_the_home_is_stored_in_its_context_cache_and_plans_reuse_it(planner):
    p, server = planner
    assert p.engine.pins and server.records  # the pin request committed the home's prefix
    pinned = server.records[0]
    plan(p)
    assert server.seen[-1].cached_tokens >= len(pinned) > 0


def test_a_plan_under_the_state_is_asked_one_step_per_request_with_the_steps_feasible_now(planner):
    p, server = planner
    before = len(server.seen)
    result, gen = plan(p)
    asked = server.seen[before:]
    assert [str(s) for s in result.steps] == ["go_to(fridge)", "open(fridge)", "pick(milk)"]
    assert not result.violations and len(asked) >= 3
    grammars = [a.body["guided_decoding"]["ebnf"] for a in asked]
    assert all(g.startswith("root ::=") for g in grammars)
    # the milk is in the closed fridge: not pickable before it is opened, which needs the robot there
    assert '"pick(milk)"' not in grammars[0] and '"open(fridge)"' not in grammars[0]
    assert '"open(fridge)"' in grammars[1] and '"pick(milk)"' in grammars[2]


def test_a_plan_with_the_whole_grammar_where_no_state_narrows_it(planner):
    p, server = planner
    result, _ = plan(p, feasibility="report")
    assert "guided_decoding" in server.seen[-1].body and result.steps


def test_an_answer_off_the_grammar_fails_the_request(edge_dir, planner):
    """A server that ignored the grammar (the fake told to answer unconstrained text): refused here."""
    p, server = planner
    with fake(edge_dir, script="hello there\n") as wild:
        wild._grammar = lambda ebnf: None  # noqa: SLF001  (a server that does not constrain)
        engine = EdgellmEngine.load(edge_dir, url=wild.url)
        gen = Planner(engine, load_environment(EXAMPLE_HOME_PATH)).start(
            TASK, SamplingParams(max_tokens=16, temperature=0.0), feasibility="report", goal="none").request
        drive(engine, gen)
        assert isinstance(gen.error, OrinError) and "off_grammar" in str(gen.error)


def test_abort_closes_the_connection_and_the_server_cancels(edge_dir):
    with fake(edge_dir, decode_s_per_token=0.05, script="go_to(kitchen)\n" * 20) as slow:
        engine = EdgellmEngine.load(edge_dir, url=slow.url)
        gen = engine.generate(engine.encode("Talk."), SamplingParams(max_tokens=200, temperature=0.0))
        engine.submit(gen)
        while not gen.take():
            engine.step()
        engine.abort(gen)
        assert gen.done and gen.result is None and not engine.busy
        t0 = time.monotonic()
        while not slow.seen[-1].cancelled:
            assert time.monotonic() - t0 < 5, "the server never saw the client go"
            time.sleep(0.02)
        assert not slow.seen[-1].finished


def test_a_full_queue_is_a_retry_later(edge_dir):
    with fake(edge_dir, max_batch_size=1, max_queued_requests=0, decode_s_per_token=0.05,
              script="go_to(kitchen)\n" * 10) as busy:
        engine = EdgellmEngine.load(edge_dir, url=busy.url)
        engine.max_running = 2  # the daemon sends more than the server admits (it did not start batched)
        first, second = (engine.generate(engine.encode(t), SamplingParams(max_tokens=40, temperature=0.0))
                         for t in ("One.", "Two."))
        engine.submit(first)
        engine.step()
        time.sleep(0.3)
        drive(engine, second)
        assert isinstance(second.error, NoBlocks) and "queue is full" in str(second.error)
        engine.abort(first)


def test_a_prompt_the_server_counts_otherwise_is_refused(edge_dir):
    with fake(edge_dir) as other:
        other.tokenizer.encode = lambda text, add_special_tokens=False: [1] * 7  # another tokenizer's count
        engine = EdgellmEngine.load(edge_dir, url=other.url)
        gen = engine.generate(engine.encode("Go to the kitchen now."), SamplingParams(max_tokens=8, temperature=0.0))
        drive(engine, gen)
        assert isinstance(gen.error, OrinError) and "counted 7 prompt tokens" in str(gen.error)


def test_the_prompt_is_counted_as_the_server_tokenizes_its_text(planner):
    """The planner tokenizes the home's prefix, its state and the task apart; the server tokenizes the text
    whole, so at the joins the tokens can differ: the request counts the server's."""
    p, server = planner
    result, gen = plan(p, feasibility="report")
    whole = p.engine.encode(p.engine.tokenizer.decode(gen.prompt_ids, skip_special_tokens=False))
    assert result.result.timings.prompt_tokens == len(whole) == server.seen[-1].prompt_tokens
    pinned = p.engine.pins[-1]
    assert tuple(whole[:len(pinned)]) == pinned  # the pinned prefix is the same tokens either way


@pytest.mark.parametrize("kw, words", [
    ({"context_reuse": False}, "without its context cache"),
    ({"max_input_len": 16}, "takes prompts of 16 tokens"),
])
def test_a_server_that_does_not_serve_what_was_built_is_refused_at_load(edge_dir, kw, words):
    with fake(edge_dir, **kw) as other, pytest.raises(OrinError, match=words):
        EdgellmEngine.load(edge_dir, url=other.url)


def test_the_fake_is_no_kinder_than_the_server_at_launch(edge_dir):
    with pytest.raises(ValueError, match="FP16"):
        fake(edge_dir, kv_cache_dtype="fp8")
    with pytest.raises(ValueError, match="in-flight"):
        fake(edge_dir, speculative="eagle3")


def test_no_server_and_a_server_elsewhere_are_refused(edge_dir):
    with pytest.raises(OrinError, match="no Edge-LLM server"):
        EdgellmEngine.load(edge_dir, url="http://127.0.0.1:1")
    with pytest.raises(OrinError, match="loopback"):
        EdgellmEngine.load(edge_dir, url="http://10.0.0.5:8000")


def test_the_fake_refuses_what_the_server_refuses(edge_dir, server, edge):
    import urllib.error
    import urllib.request

    def post(body: dict) -> int:
        req = urllib.request.Request(server.url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=10):
                return 200
        except urllib.error.HTTPError as e:
            return e.code

    ok = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    assert post(ok) == 200
    assert post({**ok, "prompt": "hi"}) == 400  # an unknown field: its request model forbids extras
    assert post({**ok, "n": 2}) == 400 and post({**ok, "frequency_penalty": 0.5}) == 400
    assert post({**ok, "guided_decoding": {"lark": "start: x"}}) == 400
    assert post({**ok, "guided_decoding": {"ebnf": "root ::= "}, "response_format": {"type": "json_object"}}) == 400
    assert post({**ok, "model": "another"}) == 404
