"""The node's ROS-free half (jetson/ros2/orin_llm_ros: goal_runner.py and its standard-library socket
client) against a real daemon process, without ROS: what the rclpy tests (test_node.py) cannot reach
easily, such as deadlines, a daemon that never answers, a failing feedback publisher, and which goal
fields a request carries."""

from __future__ import annotations

import shutil
import socket
import sys
import time

import pytest

from ..server.conftest import short_dir, start_daemon  # noqa: F401 (start_daemon: a fixture used here)
from ..server.test_cancel import LONG, counter, idle, wait_for
from .conftest import NODE_SOURCE

sys.path.insert(0, str(NODE_SOURCE))  # the ROS package's pure-Python modules import without ROS
from orin_llm_ros.daemon_client import DaemonClient  # noqa: E402
from orin_llm_ros.goal_runner import request_body, run_goal  # noqa: E402

TASK = "Bring the mug from the kitchen to the sofa."
DEFAULTS = {"task": TASK, "observations": [], "environment": "", "conversation": "", "constrained": True,
            "max_tokens": 0, "deadline_s": 0.0, "temperature": 0.0, "seed": -1, "goal": [], "feasibility": ""}


def test_a_request_carries_only_the_fields_a_goal_sets():
    assert request_body(DEFAULTS, 256, 0.0) == {"task": TASK, "max_tokens": 256}
    assert request_body(DEFAULTS, 64, 2.5) == {"task": TASK, "max_tokens": 64, "deadline_ms": 2500}
    goal = {**DEFAULTS, "observations": ["mug on counter"], "environment": "lab", "conversation": "c1",
            "constrained": False, "max_tokens": 32, "deadline_s": 1.0, "temperature": 0.7, "seed": 0,
            "goal": ["at(mug, sofa)"], "feasibility": "report"}
    assert request_body(goal, 256, 9.0) == {
        "task": TASK, "observations": ["mug on counter"], "environment": "lab", "conversation": "c1",
        "goal": ["at(mug, sofa)"], "feasibility": "report", "constrained": False, "max_tokens": 32,
        "temperature": pytest.approx(0.7), "seed": 0, "deadline_ms": 1000}
    # no goal facts: none sent (the daemon reads the goal in the task); the daemon's two words go as words
    assert "goal" not in request_body({**DEFAULTS, "goal": []}, 256, 0.0)
    assert request_body({**DEFAULTS, "goal": ["none"]}, 256, 0.0)["goal"] == "none"
    assert request_body({**DEFAULTS, "goal": ["infer"]}, 256, 0.0)["goal"] == "infer"
    # out-of-range values go to the daemon as they are: its 422 is the reason the goal reports
    assert request_body({**DEFAULTS, "max_tokens": -3, "seed": -5, "deadline_s": -1.0}, 256, 0.0) == {
        "task": TASK, "max_tokens": -3, "seed": -5, "deadline_ms": -1}


@pytest.fixture(scope="module")
def daemon(start_daemon):  # noqa: F811
    return start_daemon("--queue-size", "8")


@pytest.fixture
def client(daemon):
    with daemon.client() as c:
        yield c


@pytest.mark.full
def test_a_failing_feedback_publisher_fails_the_goal_and_frees_the_daemon(daemon, client):
    cancelled = counter(client, "plan", "cancelled")

    def publish(delta: str, n: int) -> None:
        raise RuntimeError("the feedback publisher is gone")

    body = request_body({**DEFAULTS, "task": LONG, "constrained": False, "max_tokens": 1000}, 256, 0.0)
    outcome = run_goal(DaemonClient(str(daemon.socket)), body, on_delta=publish)
    assert not outcome.success and not outcome.cancelled
    assert "RuntimeError: the feedback publisher is gone" in outcome.error
    assert wait_for(lambda: counter(client, "plan", "cancelled") == cancelled + 1)
    assert wait_for(lambda: idle(client))


@pytest.mark.full
def test_a_deadline_fails_the_goal_with_the_reason(daemon, client):
    t0 = time.monotonic()
    body = request_body({**DEFAULTS, "task": LONG, "constrained": False, "max_tokens": 1000}, 256, 0.5)
    outcome = run_goal(DaemonClient(str(daemon.socket)), body)
    assert not outcome.success and not outcome.cancelled
    assert "deadline of 0.5 s exceeded" in outcome.error and "raise deadline_s" in outcome.error
    assert time.monotonic() - t0 < 10
    assert wait_for(lambda: idle(client))


def test_a_daemon_that_never_answers_fails_by_the_local_deadline_and_timeout():
    where = short_dir()
    path = where / "planner.sock"
    mute = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        mute.bind(str(path))
        mute.listen(4)  # connections complete in the backlog; nobody ever answers
        t0 = time.monotonic()
        outcome = run_goal(DaemonClient(str(path), 60), request_body({**DEFAULTS, "deadline_s": 0.3}, 64, 0))
        assert time.monotonic() - t0 < 3
        assert not outcome.success and "deadline of 0.3 s exceeded" in outcome.error
        assert f"the daemon at {path} did not answer in time" in outcome.error
        outcome = run_goal(DaemonClient(str(path), 0.5), request_body(DEFAULTS, 64, 0))
        assert not outcome.success
        assert f"the planner daemon at {path} did not answer within timeout_s = 0.5 s" in outcome.error
        # a cancel does not wait for an answer that never comes (a goal queued in the daemon is the same)
        t0 = time.monotonic()
        outcome = run_goal(DaemonClient(str(path), 60), request_body(DEFAULTS, 64, 0),
                           is_cancelled=lambda: time.monotonic() - t0 > 0.2)
        assert outcome.cancelled and time.monotonic() - t0 < 1.5
    finally:
        mute.close()
        shutil.rmtree(where, ignore_errors=True)


def test_no_daemon_fails_at_once_naming_the_socket_and_the_fix():
    where = short_dir()
    try:
        outcome = run_goal(DaemonClient(str(where / "planner.sock")), request_body(DEFAULTS, 64, 0))
        assert not outcome.success and not outcome.cancelled
        assert f"the planner daemon at {where / 'planner.sock'} is not reachable (no such socket)" in outcome.error
        assert "systemctl start orin-llm" in outcome.error and "socket_path parameter" in outcome.error
    finally:
        shutil.rmtree(where, ignore_errors=True)
