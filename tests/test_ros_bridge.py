"""The ROS 2 node's core (orin_llm.ros_bridge) against a real daemon process on a real socket:
streamed feedback, cancellation that reaches the daemon, deadlines, a daemon that is down and
comes back, and the set_environment service."""

from __future__ import annotations

import json
import re
import shutil
import socket
import time

import pytest
import yaml

from orin_llm.environment import EXAMPLE_HOME_PATH, format_call
from orin_llm.ros_bridge import PlanBridge, PlanGoal

from .server.conftest import short_dir, start_daemon  # noqa: F401 (start_daemon: a fixture used here)
from .server.test_cancel import LONG, counter, idle, wait_for

pytestmark = pytest.mark.full

TASK = "Bring the mug from the kitchen to the sofa."


@pytest.fixture(scope="module")
def daemon(start_daemon):  # noqa: F811
    return start_daemon("--queue-size", "8")


@pytest.fixture
def client(daemon):
    with daemon.client() as c:
        yield c


@pytest.fixture
def bridge(daemon):
    return PlanBridge.for_socket(daemon.socket, timeout_s=120, max_tokens=64)


def test_a_goal_streams_feedback_then_a_plan_with_steps(bridge, client):
    feedback: list[tuple[str, int]] = []
    steps: list[tuple[dict, int]] = []  # each typed step, with how much text had arrived by then
    goal = PlanGoal(TASK, observations=["the mug is on the counter"], max_tokens=48)
    outcome = bridge.run_goal(goal, lambda delta, n: feedback.append((delta, n)), lambda: False,
                              lambda step: steps.append((step, len(feedback))))
    assert outcome.success and not outcome.error and not outcome.cancelled, outcome.error
    # typed steps arrived as their lines completed: the first long before the plan was done
    assert [format_call(st["action"], st["args"]) for st, _ in steps] == outcome.steps
    assert [st["index"] for st, _ in steps] == list(range(len(steps)))
    assert len(steps) >= 2 and steps[0][1] < len(feedback)
    assert all(r.endswith("unfinished: max_tokens ended the plan inside this line") for r in outcome.rejected_lines)
    assert len(feedback) >= 2 and [n for _, n in feedback] == list(range(1, len(feedback) + 1))
    assert "".join(d for d, _ in feedback).strip() == outcome.plan
    assert outcome.steps and all(re.fullmatch(r"\w+\(.*\)", s) for s in outcome.steps)
    t = outcome.timings
    assert 0 < t["ttft_ms"] <= t["total_ms"] and t["completion_tokens"] <= 48 and "decode_tokens_per_s" in t
    assert outcome.environment_version == client.health()["environment"]["version"]
    # the same goal without streaming (greedy): the same plan
    same = client.plan(TASK, observations=["the mug is on the counter"], max_tokens=48)
    assert outcome.steps == [format_call(s["action"], s["args"]) for s in same["steps"]]


def test_cancel_mid_stream_stops_the_daemon_and_the_next_goal_is_served(bridge, client):
    cancelled = counter(client, "plan", "cancelled")
    seen: list[int] = []
    t0 = time.monotonic()
    outcome = bridge.run_goal(PlanGoal(LONG, max_tokens=1000, unconstrained=True), lambda d, n: seen.append(n),
                              lambda: len(seen) >= 3)
    assert outcome.cancelled and not outcome.success and "cancelled after" in outcome.error
    assert 3 <= outcome.tokens < 1000 and time.monotonic() - t0 < 60
    assert wait_for(lambda: counter(client, "plan", "cancelled") == cancelled + 1)  # the daemon stopped it
    assert wait_for(lambda: idle(client))  # and its KV cache is back to the pinned prefix
    after = bridge.run_goal(PlanGoal(TASK, max_tokens=16))
    assert after.success and after.plan, after.error


def test_a_failing_feedback_callback_fails_the_goal_and_frees_the_daemon(bridge, client):
    cancelled = counter(client, "plan", "cancelled")

    def publish(delta: str, n: int) -> None:
        raise RuntimeError("the feedback publisher is gone")

    outcome = bridge.run_goal(PlanGoal(LONG, max_tokens=1000, unconstrained=True), publish)
    assert not outcome.success and not outcome.cancelled
    assert "RuntimeError: the feedback publisher is gone" in outcome.error
    assert wait_for(lambda: counter(client, "plan", "cancelled") == cancelled + 1)
    assert wait_for(lambda: idle(client))


def test_a_deadline_fails_the_goal_with_the_reason(bridge, client):
    t0 = time.monotonic()
    outcome = bridge.run_goal(PlanGoal(LONG, max_tokens=1000, deadline_s=0.5, unconstrained=True))
    assert not outcome.success and not outcome.cancelled
    assert "deadline of 0.5 s exceeded" in outcome.error and "raise deadline_s" in outcome.error
    assert time.monotonic() - t0 < 10
    assert wait_for(lambda: idle(client))
    # the bridge's own default deadline applies to goals that give none
    strict = PlanBridge.for_socket(bridge_socket(bridge), timeout_s=60, max_tokens=1000, deadline_s=0.5)
    assert "deadline of 0.5 s exceeded" in strict.run_goal(PlanGoal(LONG, unconstrained=True)).error
    assert wait_for(lambda: idle(client))


def bridge_socket(bridge: PlanBridge) -> str:
    with bridge.client_factory(1.0) as c:
        return c.socket_path


def test_a_daemon_that_never_answers_fails_by_the_local_deadline_and_timeout():
    where = short_dir()
    path = where / "planner.sock"
    mute = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        mute.bind(str(path))
        mute.listen(4)  # connections complete in the backlog; nobody ever answers
        t0 = time.monotonic()
        outcome = PlanBridge.for_socket(path, timeout_s=60).run_goal(PlanGoal(TASK, deadline_s=0.3))
        assert time.monotonic() - t0 < 3
        assert not outcome.success and "deadline of 0.3 s exceeded" in outcome.error
        assert f"the daemon at {path} did not answer in time" in outcome.error
        outcome = PlanBridge.for_socket(path, timeout_s=0.5).run_goal(PlanGoal(TASK))
        assert not outcome.success and f"the planner daemon at {path} did not answer within timeout_s = 0.5 s" \
            in outcome.error
    finally:
        mute.close()
        shutil.rmtree(where, ignore_errors=True)


def test_a_goal_the_daemon_refuses_fails_with_its_message(bridge):
    outcome = bridge.run_goal(PlanGoal("   "))
    assert not outcome.success and "refused the goal (HTTP 422)" in outcome.error and "blank" in outcome.error
    outcome = bridge.run_goal(PlanGoal(TASK, max_tokens=10**6))
    assert not outcome.success and "max_tokens must be at most" in outcome.error


def test_daemon_down_fails_every_goal_then_recovers_when_it_is_back(start_daemon):  # noqa: F811
    where = short_dir()
    path = where / "planner.sock"
    bridge = PlanBridge.for_socket(path, timeout_s=60, max_tokens=16)
    try:
        for _ in range(2):
            outcome = bridge.run_goal(PlanGoal(TASK))
            assert not outcome.success and not outcome.cancelled
            assert f"the planner daemon at {path} is not reachable (no such socket)" in outcome.error
        ok, message, version = bridge.set_environment(EXAMPLE_HOME_PATH.read_text())
        assert not ok and version == -1 and f"the planner daemon at {path} is not reachable" in message

        back = start_daemon(socket=path)
        outcome = bridge.run_goal(PlanGoal(TASK))  # the same bridge: a new connection per goal
        assert outcome.success and outcome.plan, outcome.error

        back.stop()
        outcome = bridge.run_goal(PlanGoal(TASK))
        assert not outcome.success and f"the planner daemon at {path} is not reachable" in outcome.error
    finally:
        shutil.rmtree(where, ignore_errors=True)


def test_set_environment_takes_yaml_or_json_and_refuses_bad_text(bridge, client):
    home = yaml.safe_load(EXAMPLE_HOME_PATH.read_text())
    v0 = client.health()["environment"]["version"]
    try:
        garage = {**home, "name": "home_with_garage",
                  "rooms": home["rooms"] + [{"name": "garage", "places": ["workbench"], "objects": ["drill"]}]}
        ok, message, version = bridge.set_environment(yaml.safe_dump(garage))
        assert ok and version == v0 + 1 and "'home_with_garage' is now version" in message, message
        assert client.health()["environment"] == {"name": "home_with_garage", "version": version}
        ok, message, version = bridge.set_environment(json.dumps({**home, "name": "json_home"}))
        assert ok and version == v0 + 2 and client.health()["environment"]["name"] == "json_home"
        outcome = bridge.run_goal(PlanGoal(TASK, max_tokens=8))
        assert outcome.success and outcome.environment_version == v0 + 2

        for text, why in [("", "the environment is empty"),
                          ("rooms: [kitchen", "neither JSON nor valid YAML at line"),
                          ("- go_to\n- pick\n", "must be a mapping"),
                          ("name: flat\nrooms: []\n", "give rooms and actions")]:
            ok, message, version = bridge.set_environment(text)
            assert not ok and version == -1 and why in message, (text, message)
        assert client.health()["environment"]["version"] == v0 + 2  # nothing bad reached the daemon
    finally:
        ok, message, _ = bridge.set_environment(EXAMPLE_HOME_PATH.read_text())
        assert ok, message

