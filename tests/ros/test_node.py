"""The project's planner node under real rclpy (the ROS venv) against a real daemon on the embedded
engine: typed step feedback and results, cancel (running and queued), goal policies, parameters,
homes, conversations, bad goals, the latched last plan. The daemon down and going away:
test_daemon_state.py."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
import yaml

from orin_llm.planning.home import EXAMPLE_HOME_PATH

from ..server.conftest import start_daemon  # noqa: F401 (a fixture used here)
from ..server.test_cancel import LONG, idle
from .conftest import metric, wait_until

pytestmark = pytest.mark.full

TASK = "Bring the mug from the kitchen to the sofa."
NS = "robot1"
STEP, TOKENS = 0, 1


@pytest.fixture(scope="module")
def daemon(start_daemon):  # noqa: F811
    # one request decodes at a time, so that a second goal waits in the daemon's queue
    return start_daemon("--queue-size", "8", "--max-batch", "1")


@pytest.fixture(scope="module")
def node(ros, daemon):
    return ros.node(NS, daemon.socket, health_period_s=0.5)


@pytest.fixture(scope="module")
def rc(ros, node):
    c = ros.client(NS)
    c.ask("diag", contains="ready:", timeout=60)
    return c


@pytest.fixture
def client(daemon):
    with daemon.client() as c:
        yield c


def quiet(client) -> bool:
    """Nothing running or queued (the KV cache may hold more than the default home by now: the named
    home and the conversation of the tests above stay pinned or cached)."""
    queue = client.health()["queue"]
    return not queue["running"] and queue["depth"] == 0


def steps_of(result: dict) -> list[tuple[str, list[str], int]]:
    return [(s["action"], s["args"], s["index"]) for s in result["steps"]]


def settle(rc, client, policy: str = "parallel", max_goals: int = 0) -> None:
    assert wait_until(lambda: quiet(client), 30)
    answer = rc.ask("params", node=f"/{NS}/orin_llm_planner", set={"goal_policy": policy, "max_goals": max_goals})
    assert all(r["successful"] for r in answer["results"]), answer


def test_a_goal_streams_typed_steps_then_a_result_and_latches_them(rc, client):
    assert rc.ask("send", id="g1", goal={"task": TASK, "observations": ["the mug is on the counter"],
                                         "max_tokens": 48})["accepted"]
    end = rc.ask("wait", id="g1")
    assert end["status"] == "SUCCEEDED", end
    result, feedback = end["result"], end["feedback"]
    assert result["success"] and not result["error"]
    # each completed step came as one typed feedback, in order, before the result
    steps = [f["step"] for f in feedback if f["kind"] == STEP]
    assert [(s["action"], s["args"], s["index"]) for s in steps] == steps_of(result)
    assert len(steps) >= 2 and all(f["kind"] == STEP for f in feedback)  # no token feedback unasked
    assert feedback[0]["t"] < end["waited_s"]
    # the same plan as the daemon gives a direct (greedy) call, as typed steps
    direct = client.plan(TASK, observations=["the mug is on the counter"], max_tokens=48)
    assert [(s["action"], s["args"]) for s in direct["steps"]] == [(a, g) for a, g, _ in steps_of(result)]
    assert result["plan"] == direct["plan"] and result["finish_reason"] == direct["finish_reason"]
    assert result["environment"] == "" and result["environment_version"] == client.health()["environment"]["version"]
    assert 0 < result["ttft_ms"] <= result["total_ms"] and result["queue_ms"] >= 0
    assert 0 < result["cached_prompt_tokens"] < result["prompt_tokens"]
    assert 0 < result["completion_tokens"] <= 48 and result["decode_tokens_per_s"] > 0
    # the latched topic: a subscriber that comes later still gets the last plan
    last = rc.ask("topic", name=f"/{NS}/last_plan", type="orin_llm_interfaces/msg/PlanSteps")["message"]
    assert last["task"] == TASK and [(s["action"], s["args"], s["index"]) for s in last["steps"]] == steps_of(result)


def test_token_feedback_on_request(rc):
    # goal ["none"]: the model's own plan, decoded token by token (a goal read first may be planned by the
    # search, which decodes nothing)
    assert rc.ask("send", id="t1", goal={"task": "Open the fridge.", "max_tokens": 16, "goal": ["none"],
                                         "token_feedback": True})["accepted"]
    end = rc.ask("wait", id="t1")
    assert end["status"] == "SUCCEEDED", end
    deltas = [f for f in end["feedback"] if f["kind"] == TOKENS]
    # the text as it was decoded (a plan cut by max_tokens may end its answer at the last whole step)
    assert end["result"]["plan"] and "".join(f["delta"] for f in deltas).strip().startswith(end["result"]["plan"])
    assert [f["tokens_so_far"] for f in deltas] == list(range(1, len(deltas) + 1))
    # or for every goal, by the node's parameter
    node = f"/{NS}/orin_llm_planner"
    assert rc.ask("params", node=node, set={"token_feedback": True})["results"][0]["successful"]
    try:
        assert rc.ask("send", id="t2", goal={"task": "Open the fridge.", "max_tokens": 16,
                                             "goal": ["none"]})["accepted"]
        end = rc.ask("wait", id="t2")
        assert end["status"] == "SUCCEEDED" and any(f["kind"] == TOKENS for f in end["feedback"]), end
    finally:
        rc.ask("params", node=node, set={"token_feedback": False})


def test_cancel_of_a_running_goal_stops_the_daemon(rc, client):
    settle(rc, client)
    cancelled = metric(client.metrics(), "orin_llm_requests_total", 'endpoint="plan",outcome="cancelled"')
    assert rc.ask("send", id="c1", goal={"task": LONG, "max_tokens": 1000, "constrained": False,
                                         "token_feedback": True})["accepted"]
    rc.ask("until", id="c1", kind=TOKENS, count=3)
    end = rc.ask("cancel", id="c1")
    assert end["return_code"] == 0 and end["status"] == "CANCELED", end
    assert end["cancel_s"] < 5
    assert not end["result"]["success"] and "cancelled after" in end["result"]["error"]
    # the daemon stopped decoding: counted as cancelled, and its batch and KV cache are free again
    assert wait_until(lambda: metric(client.metrics(), "orin_llm_requests_total",
                                     'endpoint="plan",outcome="cancelled"') == cancelled + 1)
    assert wait_until(lambda: idle(client))


def test_cancel_of_a_queued_goal_never_runs_its_prefill(rc, client):
    settle(rc, client, max_goals=2)  # two goals at once on a daemon that decodes one
    assert rc.ask("send", id="q1", goal={"task": LONG, "max_tokens": 1000, "constrained": False,
                                         "token_feedback": True})["accepted"]
    rc.ask("until", id="q1", kind=TOKENS, count=2)
    before = client.metrics()
    assert rc.ask("send", id="q2", goal={"task": TASK, "max_tokens": 48})["accepted"]
    assert wait_until(lambda: client.health()["queue"]["depth"] == 1)  # q2 waits in the daemon's queue
    end = rc.ask("cancel", id="q2")
    assert end["status"] == "CANCELED" and end["cancel_s"] < 2, end  # at once, not at its first token
    assert rc.ask("cancel", id="q1")["status"] == "CANCELED"
    assert wait_until(lambda: idle(client))
    after = client.metrics()
    label = 'endpoint="plan",outcome="cancelled"'
    assert metric(after, "orin_llm_requests_total", label) == metric(before, "orin_llm_requests_total", label) + 2
    # q1's prefill was done before `before`; nothing computed or served a prompt since: q2 never started
    assert metric(after, "orin_llm_prefix_hit_tokens") == metric(before, "orin_llm_prefix_hit_tokens")
    assert metric(after, "orin_llm_prompt_tokens_total", 'endpoint="plan"') == \
        metric(before, "orin_llm_prompt_tokens_total", 'endpoint="plan"')


def test_goal_policies(rc, client):
    long_goal = {"task": LONG, "max_tokens": 1000, "constrained": False, "token_feedback": True}
    # parallel, max_goals 0: as many as the daemon decodes at once (here 1)
    settle(rc, client)
    assert rc.ask("send", id="p1", goal=long_goal)["accepted"]
    second = rc.ask("send", id="p2", goal={"task": TASK})
    assert not second["accepted"] and second["accepted_s"] < 2
    rc.ask("cancel", id="p1")
    # reject_if_busy
    settle(rc, client, "reject_if_busy")
    assert rc.ask("send", id="r1", goal=long_goal)["accepted"]
    assert not rc.ask("send", id="r2", goal={"task": TASK})["accepted"]
    rc.ask("cancel", id="r1")
    # preempt: the new goal runs, the running one ends aborted, saying why
    settle(rc, client, "preempt")
    assert rc.ask("send", id="e1", goal=long_goal)["accepted"]
    rc.ask("until", id="e1", kind=TOKENS, count=2)
    assert rc.ask("send", id="e2", goal={"task": TASK, "max_tokens": 32})["accepted"]
    first = rc.ask("wait", id="e1")
    assert first["status"] == "ABORTED" and "preempted" in first["result"]["error"], first
    assert rc.ask("wait", id="e2")["status"] == "SUCCEEDED"
    settle(rc, client)


def test_parameters_are_checked_when_set(rc):
    node = f"/{NS}/orin_llm_planner"
    results = rc.ask("params", node=node, set={"max_tokens": 0})["results"]
    assert not results[0]["successful"]
    results = rc.ask("params", node=node, set={"goal_policy": "sometimes"})["results"]
    assert not results[0]["successful"] and "parallel, preempt or reject_if_busy" in results[0]["reason"]
    assert not rc.ask("params", node=node, set={"feedback_depth": 5})["results"][0]["successful"]  # read-only
    assert not rc.ask("params", node=node, set={"timeout_s": 0.0})["results"][0]["successful"]
    assert rc.ask("params", node=node, set={"timeout_s": 60.0})["results"][0]["successful"]


@pytest.mark.parametrize("goal, says", [
    ({"task": ""}, "task"),
    ({"task": TASK, "temperature": 5.0}, "temperature"),
    ({"task": TASK, "max_tokens": -3}, "max_tokens"),
    ({"task": TASK, "seed": -5}, "seed"),
    ({"task": TASK, "deadline_s": -1.0}, "deadline_ms"),
    ({"task": TASK, "environment": "no_such_home"}, "no_such_home"),
    ({"task": TASK, "conversation": "bad id!"}, "conversation"),
    ({"task": TASK, "goal": ["holding(mug)", "at(mug, sofa)"]},
     "goal facts holding(mug) and at(mug, sofa) contradict each other"),
], ids=["empty-task", "temperature", "max-tokens", "seed", "deadline", "unknown-home", "conversation-id",
        "contradictory-goal"])
def test_bad_goals_are_aborted_with_the_daemons_reason(rc, goal, says):
    assert rc.ask("send", id="bad", goal=goal)["accepted"]
    end = rc.ask("wait", id="bad")
    assert end["status"] == "ABORTED" and not end["result"]["success"], end
    error = end["result"]["error"]
    assert "refused the goal (HTTP 4" in error and says in error, error


def home_text(name: str) -> str:
    home = yaml.safe_load(EXAMPLE_HOME_PATH.read_text())
    home["name"] = name
    return yaml.safe_dump(home)


def test_a_named_home_through_the_environment_services(rc, client):
    set_env = "orin_llm_interfaces/srv/SetEnvironment"
    answer = rc.ask("call", service=f"/{NS}/set_environment", type=set_env, timeout=120,
                    request={"name": "lab", "environment": home_text("lab_home")})["response"]
    assert answer["success"] and answer["version"] >= 1, answer
    version = answer["version"]
    got = rc.ask("call", service=f"/{NS}/get_environment", type="orin_llm_interfaces/srv/GetEnvironment",
                 request={"name": "lab"})["response"]
    assert got["success"] and got["version"] == version and json.loads(got["environment"])["name"] == "lab_home"
    homes = rc.ask("call", service=f"/{NS}/list_environments",
                   type="orin_llm_interfaces/srv/ListEnvironments")["response"]
    names = {h["name"]: h for h in homes["environments"]}
    assert homes["success"] and {"", "lab"} <= set(names) and names["lab"]["version"] == version
    assert names["lab"]["home"] == "lab_home" and names["lab"]["prefix_tokens"] > 0
    # like If-Match: a stale version is refused and the home stays as it was
    stale = rc.ask("call", service=f"/{NS}/set_environment", type=set_env, timeout=120,
                   request={"name": "lab", "environment": home_text("other"), "if_version": version + 7})
    assert not stale["response"]["success"] and "HTTP 412" in stale["response"]["message"], stale
    bad = rc.ask("call", service=f"/{NS}/set_environment", type=set_env,
                 request={"name": "lab", "environment": "rooms: [unclosed"})["response"]
    assert not bad["success"] and "HTTP 422" in bad["message"], bad
    # a goal in the named home
    assert rc.ask("send", id="h1", goal={"task": TASK, "environment": "lab", "max_tokens": 32})["accepted"]
    end = rc.ask("wait", id="h1")
    assert end["status"] == "SUCCEEDED", end
    assert end["result"]["environment"] == "lab" and end["result"]["environment_version"] == version
    missing = rc.ask("call", service=f"/{NS}/get_environment", type="orin_llm_interfaces/srv/GetEnvironment",
                     request={"name": "nowhere"})["response"]
    assert not missing["success"] and "HTTP 404" in missing["message"]


def test_a_conversation_over_two_goals(rc):
    turns = []
    for i, task in enumerate(("Go to the kitchen.", "Now bring the mug to the sofa.")):
        assert rc.ask("send", id=f"v{i}", goal={"task": task, "conversation": "robot1-chat",
                                                "max_tokens": 32})["accepted"]
        end = rc.ask("wait", id=f"v{i}")
        assert end["status"] == "SUCCEEDED", end
        turns.append(end["result"])
    assert [t["conversation_turn"] for t in turns] == [1, 2]
    # the second turn reuses the first from the KV cache: more cached than the first's whole prompt
    assert turns[1]["cached_prompt_tokens"] >= turns[0]["prompt_tokens"]


def test_goal_facts_reach_the_daemon_and_come_back(rc):
    assert rc.ask("send", id="f1", goal={"task": TASK, "goal": ["at(mug, sofa)"], "feasibility": "enforce",
                                         "max_tokens": 96})["accepted"]
    end = rc.ask("wait", id="f1")
    assert end["status"] == "SUCCEEDED", end
    result = end["result"]
    assert result["goal_reached"] == (not result["goal_missing"])
    assert result["goal_reached"] or result["goal_missing"] == ["at(mug, sofa)"]


def test_a_node_stopped_mid_goal_exits_and_the_daemon_stops_decoding(ros, daemon, client):
    node = ros.node("robot3", daemon.socket, health_period_s=0.5)
    rc3 = ros.client("robot3")
    rc3.ask("diag", contains="ready:", timeout=60)
    assert wait_until(lambda: quiet(client), 30)
    cancelled = metric(client.metrics(), "orin_llm_requests_total", 'endpoint="plan",outcome="cancelled"')
    assert rc3.ask("send", id="s1", goal={"task": LONG, "max_tokens": 1000, "constrained": False,
                                          "token_feedback": True})["accepted"]
    rc3.ask("until", id="s1", kind=TOKENS, count=2)
    t0 = time.monotonic()
    os.killpg(node.proc.pid, signal.SIGINT)  # Ctrl-C
    node.proc.wait(8)  # it does not hang on the running goal's thread
    assert time.monotonic() - t0 < 8
    assert wait_until(lambda: metric(client.metrics(), "orin_llm_requests_total",
                                     'endpoint="plan",outcome="cancelled"') == cancelled + 1)
    assert wait_until(lambda: quiet(client))
