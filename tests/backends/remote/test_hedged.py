"""The remote backend's race on the robot's real (tiny) engine against a real HTTP peer on loopback
(peer.py): who answers, what the answer says, how the daemon backs off, what never reaches the robot.
The peer and the planner are conftest.py's."""

from __future__ import annotations

import time

import pytest

from orin_llm.backends.remote.hedged import Breaker
from orin_llm.backends.remote.settings import RemoteSettings
from orin_llm.errors import OrinError
from orin_llm.planning.planner import Planner
from orin_llm.runtime.sampling import SamplingParams

from .peer import free_port

PARAMS = SamplingParams(max_tokens=12)
TASK = "Bring the milk from the fridge to the coffee table."


def run(planner: Planner, deadline_s=None, constrained=True):
    """One plan through the engine's thread's loop (what server/worker.py does), timed."""
    prefix = planner.home().prefix
    t0 = time.monotonic()
    run = planner.start(TASK, PARAMS, constrained=constrained, goal="none")  # one request: the race itself
    gen = run.request
    gen.deadline = t0 + deadline_s if deadline_s else None
    planner.engine.submit(gen)
    while not gen.done:
        planner.engine.step()
        assert time.monotonic() - t0 < 60, "the race never ended"
    if gen.error is not None:
        raise gen.error
    return planner.finish(run, prefix), gen, time.monotonic() - t0


def test_remote_answers_with_the_home_grammar_and_the_prompt_ids(peer, planners):
    peer.cached_tokens = 7
    planner = planners(peer.url, plans="whole")  # one request (test_stepwise.py: a request per step)
    plan, gen, _ = run(planner)
    assert gen.report["served_by"] == "remote" and "fallback" not in gen.report
    assert [s.action for s in plan.steps] == ["go_to", "open", "pick"] and plan.constrained
    body = peer.requests[-1]["body"]
    assert body["prompt"] == gen.prompt_ids and body["prompt"][:len(planner.prefix.ids)] == list(planner.prefix.ids)
    assert 'step: "go_to("' in body["structured_outputs"]["grammar"]  # the home's Lark grammar goes along
    assert body["model"] == "peer-model" and body["stream"] is True
    assert plan.result.timings.cached_prompt_tokens == 7 == gen.report["remote"]["cached_tokens"]
    split = gen.report["remote"]
    assert split["network_ms"] >= 0 and split["engine_ms"] >= 0
    assert not planner.engine.busy


@pytest.mark.parametrize("mode,reason,why", [
    ("offgrammar", "off_grammar", "off the home's grammar"), ("http500", "http_error", "HTTP 500"),
    ("malformed", "malformed", "malformed chunk"),
    ("infeasible", "infeasible", "a step the home's state does not allow")])
def test_a_bad_remote_answer_never_becomes_the_plan(peer, planners, mode, reason, why):
    if mode == "offgrammar":
        peer.text = "go_to(the moon)\nrm -rf /"
    elif mode == "infeasible":  # on the home's grammar, but the milk is in the closed fridge
        peer.text = "go_to(fridge)\npick(milk)"
    else:
        peer.mode = mode
    planner = planners(peer.url, backoff_s=300, plans="whole")  # the answer as the peer wrote it, checked here
    plan, gen, _ = run(planner)
    assert gen.report["served_by"] == "local" and why in gen.report["fallback"]
    assert gen.report["fallback_reason"] == reason
    # the local engine's plan, on the grammar (max_tokens may cut its last line)
    assert "moon" not in plan.text and "go_to(fridge)\npick(milk)" not in plan.text
    assert all(r.reason.startswith("unfinished") for r in plan.rejected)
    asked = len(peer.requests)
    _, gen2, _ = run(planner)
    if mode == "infeasible":
        # a plan the state does not allow is no failure of the server or the link: it is asked again
        assert len(peer.requests) == asked + 1 and gen2.report.get("fallback_reason") == "infeasible"
        assert planner.engine.breaker.failures == 0
    else:  # the remote now rests: the next plan is local without asking it
        assert len(peer.requests) == asked and gen2.report["fallback_reason"] == "resting"


def test_no_first_token_in_time_starts_the_local_engine_and_drops_the_late_remote(peer, planners):
    peer.mode, peer.stall_s = "stall", 30.0
    planner = planners(peer.url, first_token_share=0.1)
    plan, gen, took = run(planner, deadline_s=20)
    assert gen.report["served_by"] == "local" and "no first token" in gen.report["fallback"]
    assert took < 20  # hedged at 2 s: the local engine answered within the deadline, long before the remote
    assert gen.remote.cancelled and not planner.engine.racing and plan.steps


def test_an_unreachable_remote_falls_back_and_is_tried_again_after_resting(peer, planners):
    planner = planners(f"http://127.0.0.1:{free_port()}", backoff_s=1)
    _, gen, _ = run(planner)
    assert gen.report["served_by"] == "local" and "unreachable" in gen.report["fallback"]
    breaker = planner.engine.breaker
    assert breaker.failures == 1 and "unreachable" in breaker.last_error  # resting: the next test's subject
    planner.engine.settings = breaker.settings = RemoteSettings(peer.url, backoff_s=1)  # the link comes back
    time.sleep(max(0.0, breaker.resting_until - time.monotonic()))  # the rest, as it is
    _, gen, _ = run(planner)
    assert gen.report["served_by"] == "remote" and breaker.failures == 0


def test_the_rest_doubles_per_failure_in_a_row_up_to_the_cap():
    breaker = Breaker(RemoteSettings("http://127.0.0.1:1", backoff_s=0.2, backoff_max_s=0.5))
    rests = []
    for _ in range(3):
        before = time.monotonic()
        breaker.failed("down")
        rests.append(breaker.resting_until - before)
    assert [round(r, 1) for r in rests] == [0.2, 0.4, 0.5] and "down" in breaker.why_not()
    time.sleep(0.55)
    assert breaker.why_not() is None
    breaker.succeeded()
    assert breaker.failures == 0


def test_a_bearer_token_goes_with_each_request(peer, planners):
    peer.token = "s3cret"
    _, gen, _ = run(planners(peer.url, token="s3cret"))
    assert gen.report["served_by"] == "remote" and peer.requests[-1]["authorization"] == "Bearer s3cret"


@pytest.mark.parametrize("url,token,why", [
    ("http://site-server:8000", "t", "must be https"),
    ("https://site-server:8000", None, "needs a bearer token"),
    ("ftp://127.0.0.1", None, "http(s) URL"),
    ("https://user:pw@site:8000", "t", "base URL only"),
])
def test_unsafe_remotes_are_refused(url, token, why):
    with pytest.raises(OrinError, match=why.replace("(", r"\(").replace(")", r"\)")):
        RemoteSettings(url, token)
    RemoteSettings("http://127.0.0.1:8000")  # loopback: plain http, no token
    RemoteSettings("https://site-server:8000", "t")
