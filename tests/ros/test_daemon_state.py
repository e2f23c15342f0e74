"""The planner node when its daemon is not there: down at the node's start, coming up, and going away
in the middle of a goal (real rclpy, a real daemon killed with SIGKILL)."""

from __future__ import annotations

import signal
import time

import pytest

from ..server.conftest import short_dir, start_daemon  # noqa: F401 (a fixture used here)
from ..server.test_cancel import LONG

pytestmark = pytest.mark.full
NS = "robot2"
TOKENS = 1


def test_daemon_down_at_start_then_up_then_gone_mid_goal(ros, start_daemon):  # noqa: F811
    socket = short_dir() / "planner.sock"
    ros.node(NS, socket, health_period_s=0.5)
    rc = ros.client(NS)
    # down at start: /diagnostics says so, and a goal is rejected at once
    down = rc.ask("diag", contains="not reachable")["status"]
    assert down["level"] == [2] and str(socket) in down["message"] and "no such socket" in down["message"]
    assert {v["key"]: v["value"] for v in down["values"]}["status"] == "unreachable"
    answer = rc.ask("send", id="d1", goal={"task": "Open the fridge."})
    assert not answer["accepted"] and answer["accepted_s"] < 2

    # it comes up: the node finds it on its next health check, and serves goals
    daemon = start_daemon("--queue-size", "4", socket=socket)
    up = rc.ask("diag", contains="ready:", timeout=30)["status"]
    assert up["level"] == [0], up
    assert rc.ask("send", id="d2", goal={"task": "Open the fridge.", "max_tokens": 16})["accepted"]
    assert rc.ask("wait", id="d2")["status"] == "SUCCEEDED"

    # it goes away mid-goal: the goal ends aborted at once, saying what happened
    assert rc.ask("send", id="d3", goal={"task": LONG, "max_tokens": 1000, "constrained": False,
                                         "token_feedback": True})["accepted"]
    rc.ask("until", id="d3", kind=TOKENS, count=2)
    killed = time.monotonic()
    daemon.stop(signal.SIGKILL)
    end = rc.ask("wait", id="d3")
    assert end["status"] == "ABORTED" and time.monotonic() - killed < 5, end
    assert "the connection to the planner daemon at" in end["result"]["error"], end["result"]["error"]
    # and the node knows: /diagnostics, and the next goal rejected at once
    rc.ask("diag", contains="not reachable", timeout=10)
    answer = rc.ask("send", id="d4", goal={"task": "Open the fridge."})
    assert not answer["accepted"] and answer["accepted_s"] < 2
