"""Goal plans through an app whose engine races a remote (`serve --remote`), in-process: the app over
httpx's ASGI transport, a real Worker on the tiny engine behind HedgedBackend, the peer on loopback
(peer.py). A goal plan (given facts, and goal "infer") gets the answer a local app gives, whether the
remote refuses connections, stalls or answers.

Issue #42: with --remote, `goal: "infer"` and any goal whose first candidate missed were answered 500
(`'HedgedRequest' object has no attribute 'status'`): the planner ran the goal's reading and the later
candidates with `engine.run`, which HedgedBackend forwarded to the local engine with its own request."""

from __future__ import annotations

import pytest

from orin_llm.backends.remote.hedged import HedgedBackend
from orin_llm.backends.remote.settings import RemoteSettings
from tests.conftest import tiny_fixture
from tests.server.inproc import serve

from .peer import free_port

tiny_engine = tiny_fixture("engine")  # random weights do here (tests/conftest.py)
TASK = "Bring the milk from the fridge to the coffee table."
# 4 tokens write no whole step on the tiny engine: every model candidate misses a goal of several steps,
# so the answer is the classical search's, the same whoever wrote the candidates
MAX_TOKENS = 4
GOALS = {"facts": ["at(milk, coffee_table)"], "infer": "infer"}
# what the answer says of the plan and the goal (timings and who served it differ by design)
SAME = ("plan", "steps", "rejected_lines", "constrained", "feasibility", "violations", "final_state",
        "goal_reached", "goal_missing", "goal_inferred", "goal_dropped", "environment_version")


def plans() -> list[dict]:
    return [{"task": TASK, "max_tokens": MAX_TOKENS, "goal": goal, "speculation": "none"} for goal in GOALS.values()]


@pytest.fixture(scope="module")
def local(tiny_engine) -> list[dict]:
    answers = serve(tiny_engine, plans())
    assert [a.status_code for a in answers] == [200, 200], [a.text for a in answers]
    return [a.json() for a in answers]


def same(answer: dict) -> dict:
    return {k: answer.get(k) for k in SAME} | {"search": {k: v for k, v in (answer["search"] or {}).items()
                                                           if k in ("source", "candidates", "expanded")}}


@pytest.mark.parametrize("mode", ["refusing", "stalling", "answering"])
def test_a_goal_plan_through_the_remote_gets_the_local_answer(tiny_engine, local, mode, peer):
    if mode == "refusing":
        url = f"http://127.0.0.1:{free_port()}"  # nothing listens there: connections are refused
    else:
        url = peer.url
        peer.mode = "stall" if mode == "stalling" else "ok"
        peer.stall_s = 3.0
        # an answering remote reads the goal as the local engine did, and writes a plan that misses it
        goal_text = "\n".join(local[1]["goal_inferred"])
        peer.reply = lambda body: goal_text if 'step: "go_to("' not in str(body) else "go_to(fridge)"
    engine = HedgedBackend(tiny_engine, RemoteSettings(url, plans="whole", first_token_share=0.05, timeout_s=2.0,
                                                       backoff_s=0.2, backoff_max_s=0.2))
    answers = serve(engine, plans())
    assert [a.status_code for a in answers] == [200, 200], [a.text for a in answers]
    for got, want in zip((a.json() for a in answers), local, strict=True):
        assert got["search"]["source"] == "search" == want["search"]["source"]  # every candidate missed
        assert same(got) == same(want)
    report = [(a.json()["served_by"], a.json().get("fallback_reason")) for a in answers]
    if mode == "refusing":
        assert report == [("local", "unreachable")] * 2
    elif mode == "stalling":
        assert report[0] == ("local", "no_first_token")
    else:  # the goal's reading and the plans' candidates were asked there
        assert report == [("remote", None)] * 2 and len(peer.requests) >= 5
