"""The ROS-free core of the ROS 2 planner node: one Plan goal in, one outcome out.

`jetson/ros2/orin_llm_ros/orin_llm_ros/planner_node.py` is a thin rclpy shell around this module,
so everything that can go wrong between a goal and the daemon is plain Python, tested here against
a real daemon on a real socket (tests/test_ros_bridge.py), without ROS.

    bridge = PlanBridge.for_socket("/run/orin-llm/planner.sock", timeout_s=120, max_tokens=256)
    outcome = bridge.run_goal(PlanGoal("Bring the mug to the sofa."),
                              on_feedback=lambda delta, n: print(delta, end=""),
                              is_cancelled=lambda: False)
    outcome.success, outcome.steps, outcome.timings["ttft_ms"]

What a goal does:

* It streams (`POST /v1/plan`, `stream: true`): every text delta is handed to `on_feedback(delta,
  tokens_so_far)`, where tokens_so_far counts the deltas so far (the daemon sends one per decoded
  token that completes some text, so it can trail the token count by a token or two), and every
  line that completes as a step of the home to `on_step({"index", "action", "args"})`, before the
  rest of the plan is written: the robot can start walking while the planner still plans.
* A goal is constrained to the home's grammar unless it says `unconstrained`; the outcome lists
  the plan's steps and, separately, the lines that are not steps with why.
* `is_cancelled()` is polled every `poll_s` (50 ms). When it turns true the goal returns at once
  with `cancelled=True`, and the stream is closed: the daemon sees its client go and stops
  generating (counted as `outcome="cancelled"` in its /metrics). The close happens on the stream's
  reader thread at the next event, i.e. within one token while decoding; a goal cancelled while it
  still waits in the daemon's queue is closed when its first token comes.
* A deadline (the goal's `deadline_s`, else the bridge's; 0 = none) is sent as `deadline_ms`, so
  the daemon gives up in time (its 504 names the deadline), and is enforced here too: if nothing
  final arrived `DEADLINE_GRACE_S` after it (a hung daemon), the goal fails anyway.
* Every failure is an outcome with `success=False` and an `error` that says what to do, never an
  exception: the daemon not running ("the planner daemon at <socket> is not reachable ..."),
  refusing the goal (4xx/503 with its message), timing out, or a bug in a callback.
* A new client (connection) per goal: a daemon restarted between goals is simply found again.
"""

from __future__ import annotations

import json
import logging
import math
import queue
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

import yaml

from .client import PlannerClient, PlannerError, PlannerUnavailable
from .environment import environment_from_dict, format_call
from .errors import OrinError

log = logging.getLogger("orin_llm.ros_bridge")

# How long after the deadline a goal still waits for the daemon's own answer (its 504 is more exact:
# it counts from the request's arrival and also covers the queue) before failing it here.
DEADLINE_GRACE_S = 0.25
# How long a cancelled goal waits for its reader thread to close the stream before returning.
CLOSE_WAIT_S = 0.5
# A bridge's client must outlive a deadline by this much, so the local deadline, not the HTTP
# timeout, reports a late answer.
TIMEOUT_MARGIN_S = 5.0
UNKNOWN_VERSION = -1

ClientFactory = Callable[[float], PlannerClient]  # timeout_s -> a new client


@dataclass
class PlanGoal:
    """A Plan action goal. max_tokens ≤ 0 and deadline_s ≤ 0 mean "the bridge's default"."""

    task: str
    observations: list[str] = field(default_factory=list)
    max_tokens: int = 0
    deadline_s: float = 0.0
    unconstrained: bool = False


@dataclass
class PlanOutcome:
    """A Plan action result. timings: the daemon's (ttft_ms, total_ms, decode_tokens_per_s,
    prompt_tokens, cached_prompt_tokens, completion_tokens); empty unless success."""

    success: bool
    error: str = ""
    plan: str = ""
    steps: list[str] = field(default_factory=list)
    rejected_lines: list[str] = field(default_factory=list)  # "line -- why"
    timings: dict[str, Any] = field(default_factory=dict)
    environment_version: int = UNKNOWN_VERSION
    cancelled: bool = False
    tokens: int = 0  # deltas received (see the module docstring)
    finish_reason: str = ""  # "stop", or "length" when max_tokens cut the plan off


def _never() -> bool:
    return False


def _ignore(*args: Any) -> None:
    pass


class PlanBridge:
    def __init__(self, client_factory: ClientFactory, timeout_s: float = 120.0, max_tokens: int = 256,
                 deadline_s: float = 0.0, poll_s: float = 0.05):
        if timeout_s <= 0 or max_tokens < 1 or deadline_s < 0 or poll_s <= 0:
            raise OrinError(f"PlanBridge needs timeout_s > 0, max_tokens ≥ 1, deadline_s ≥ 0 (0: none), got "
                            f"timeout_s={timeout_s}, max_tokens={max_tokens}, deadline_s={deadline_s}")
        self.client_factory = client_factory
        self.timeout_s, self.max_tokens, self.deadline_s, self.poll_s = timeout_s, max_tokens, deadline_s, poll_s

    @classmethod
    def for_socket(cls, socket_path: Union[str, Path, None] = None, timeout_s: float = 120.0,
                   max_tokens: int = 256, deadline_s: float = 0.0) -> PlanBridge:
        """A bridge to the daemon at `socket_path` (None or "": the client's default path)."""
        path = str(socket_path) if socket_path else None

        def factory(timeout: float) -> PlannerClient:
            return PlannerClient(path, timeout_s=timeout)

        return cls(factory, timeout_s=timeout_s, max_tokens=max_tokens, deadline_s=deadline_s)

    # -- goals -----------------------------------------------------------------------------

    def run_goal(self, goal: PlanGoal, on_feedback: Optional[Callable[[str, int], None]] = None,
                 is_cancelled: Optional[Callable[[], bool]] = None,
                 on_step: Optional[Callable[[dict], None]] = None) -> PlanOutcome:
        """Run one goal to its outcome; never raises (see the module docstring)."""
        try:
            return self._run(goal, on_feedback or _ignore, is_cancelled or _never, on_step or _ignore)
        except Exception as e:  # a bug here or in a callback: still an outcome, with its message
            log.exception("plan goal failed")
            return PlanOutcome(False, error=f"the planner bridge failed: {type(e).__name__}: {e}")

    def _run(self, goal: PlanGoal, on_feedback: Callable[[str, int], None],
             is_cancelled: Callable[[], bool], on_step: Callable[[dict], None]) -> PlanOutcome:
        start = time.monotonic()
        max_tokens = goal.max_tokens if goal.max_tokens and goal.max_tokens > 0 else self.max_tokens
        deadline_s = goal.deadline_s if goal.deadline_s and goal.deadline_s > 0 else self.deadline_s
        opts: dict[str, Any] = {"max_tokens": int(max_tokens)}
        if goal.unconstrained:
            opts["constrained"] = False
        timeout = self.timeout_s
        local_deadline = None
        if deadline_s > 0:
            opts["deadline_ms"] = max(1, math.ceil(deadline_s * 1000))
            local_deadline = start + deadline_s + DEADLINE_GRACE_S
            timeout = min(timeout, deadline_s + TIMEOUT_MARGIN_S)
        if is_cancelled():
            return PlanOutcome(False, error="cancelled before it started", cancelled=True)

        client = self.client_factory(timeout)
        socket_path = str(getattr(client, "socket_path", "?"))
        events: queue.Queue = queue.Queue()
        stop = threading.Event()
        reader = threading.Thread(target=_read_stream, args=(client, goal, opts, events, stop), daemon=True,
                                  name="orin-llm-plan-stream")
        reader.start()
        tokens = 0
        try:
            while True:
                if is_cancelled():
                    stop.set()
                    reader.join(CLOSE_WAIT_S)
                    return PlanOutcome(False, error=f"cancelled after {tokens} tokens", cancelled=True,
                                       tokens=tokens)
                wait = self.poll_s
                if local_deadline is not None:
                    left = local_deadline - time.monotonic()
                    if left <= 0:
                        return PlanOutcome(False, tokens=tokens, error=(
                            f"deadline of {deadline_s:g} s exceeded after {tokens} tokens (the daemon at "
                            f"{socket_path} did not answer in time); raise deadline_s or lower max_tokens"))
                    wait = min(wait, left)
                try:
                    kind, value = events.get(timeout=wait)
                except queue.Empty:
                    continue
                if kind == "delta":
                    tokens += 1
                    on_feedback(value, tokens)
                elif kind == "step":
                    on_step(value)
                elif kind == "done":
                    return _success(value, tokens)
                else:
                    return PlanOutcome(False, tokens=tokens,
                                       error=self._describe(value, socket_path, deadline_s, timeout, tokens))
        finally:
            stop.set()  # the reader closes the stream at its next event, if it has not ended

    def _describe(self, e: BaseException, socket_path: str, deadline_s: float, timeout: float, tokens: int) -> str:
        if isinstance(e, PlannerUnavailable):
            return unreachable(e)
        if isinstance(e, PlannerError):
            if e.status == 504:
                return (f"deadline of {deadline_s:g} s exceeded after {tokens} tokens ({e.message}); raise "
                        "deadline_s or lower max_tokens")
            if e.status is None and "timed out" in e.message:
                return (f"the planner daemon at {socket_path} did not answer within timeout_s = {timeout:g} s "
                        f"({e.message}); is it overloaded? raise timeout_s")
            if e.status is None:
                return f"the connection to the planner daemon at {socket_path} failed: {e.message}"
            if e.status == 503:
                return f"the planner daemon is busy or stopping (HTTP 503): {e.message}; retry later"
            return f"the planner daemon refused the goal (HTTP {e.status}): {e.message}"
        return f"{type(e).__name__}: {e}"

    # -- the environment -------------------------------------------------------------------

    def set_environment(self, text: str) -> tuple[bool, str, int]:
        """Replace the daemon's environment with a YAML or JSON mapping (the shape of
        orin_llm/data/homes/example_home.yaml). Returns (success, message, version); version is
        the new one on success, else -1. Never raises."""
        try:
            body = parse_environment_text(text)
        except OrinError as e:
            return False, str(e), UNKNOWN_VERSION
        try:
            with self.client_factory(self.timeout_s) as client:
                r = client.put_environment(body)
        except PlannerUnavailable as e:
            return False, unreachable(e), UNKNOWN_VERSION
        except PlannerError as e:
            status = f" (HTTP {e.status})" if e.status else ""
            return False, f"the planner daemon refused the environment{status}: {e.message}", UNKNOWN_VERSION
        except Exception as e:
            log.exception("set_environment failed")
            return False, f"the planner bridge failed: {type(e).__name__}: {e}", UNKNOWN_VERSION
        version = int(r.get("version", UNKNOWN_VERSION))
        return True, (f"environment {r.get('name', body['name'])!r} is now version {version} "
                      f"({r.get('prefix_tokens', '?')} prefix tokens pinned)"), version


# ---------------------------------------------------------------------------
# Helpers


def _read_stream(client: PlannerClient, goal: PlanGoal, opts: dict, events: queue.Queue,
                 stop: threading.Event) -> None:
    """The reader thread: the stream's events onto `events`; closes the stream once `stop` is set
    (closing the generator closes the HTTP response, and the daemon sees its client go)."""
    stream = None
    try:
        stream = client.plan_stream(goal.task, list(goal.observations or []) or None, **opts)
        for event in stream:
            if stop.is_set():
                break
            kind = "delta" if "delta" in event else "step" if "step" in event else "done"
            events.put((kind, event.get(kind, event)))
    except Exception as e:
        events.put(("error", e))
    finally:
        try:
            if stream is not None:
                stream.close()
        finally:
            client.close()


def _success(resp: dict, tokens: int) -> PlanOutcome:
    steps = [format_call(s["action"], list(s.get("args", []))) for s in resp.get("steps", [])]
    version = resp.get("environment_version")
    rejected = [f"{r['line']} -- {r['reason']}" for r in resp.get("rejected_lines", [])]
    return PlanOutcome(True, plan=resp.get("plan", ""), steps=steps, rejected_lines=rejected,
                       timings=dict(resp.get("timings", {})),
                       environment_version=int(version) if version is not None else UNKNOWN_VERSION,
                       tokens=tokens, finish_reason=str(resp.get("finish_reason", "")))


def unreachable(e: PlannerUnavailable) -> str:
    """'the planner daemon at <socket> is not reachable (<why>); <what to do>'."""
    m = re.search(r"\(([^()]*)\)", e.message)
    why = f" ({m.group(1)})" if m else ""
    return (f"the planner daemon at {e.socket_path} is not reachable{why}; start it (sudo systemctl start "
            "orin-llm, or orin-llm serve) or point the socket_path parameter at its socket")


def parse_environment_text(text: str) -> dict:
    """A YAML or JSON environment as the mapping PUT /v1/environment takes; OrinError says what is
    wrong (checked with the daemon's own validation, so a bad one never reaches it)."""
    if not isinstance(text, str) or not text.strip():
        raise OrinError("the environment is empty; send YAML or JSON with name, rooms and actions "
                        "(or name and text for a plain-text home)")
    try:
        data = json.loads(text)
    except ValueError:
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
            raise OrinError(f"the environment is neither JSON nor valid YAML{where}: "
                            f"{getattr(e, 'problem', None) or e}") from None
    if not isinstance(data, dict):
        raise OrinError(f"the environment must be a mapping (name, rooms, actions; or name and text), "
                        f"got {type(data).__name__}")
    data = {"name": "ros_environment", **data}
    environment_from_dict(data, source="environment")  # OrinError naming the bad key
    return data
