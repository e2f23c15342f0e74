"""
One Plan goal against the daemon, without ROS: the request it sends, and its run to an outcome.

planner_node.py maps messages onto these plain values and back; this module holds what can go
wrong between a goal and the daemon, and is tested off ROS (tests/ros/test_goal_runner.py) as well
as through the node (tests/ros/test_node.py).

* The request sends only the goal fields that are set (a field at its default is left to the
  daemon's default), so a daemon that lacks a newer field is never sent it unasked.
* The plan streams: each completed step is handed to on_step, each text delta to on_delta.
* is_cancelled() is polled every poll_s; when it turns true the stream is closed at once, which
  the daemon sees as its client going (it stops decoding, or drops the request from its queue
  before its prefill), and the outcome is cancelled.
* A deadline is sent as deadline_ms (the daemon's 504 names it) and kept here too, DEADLINE_GRACE_S
  later, in case the daemon hangs.
* Every failure is an outcome whose error says what to do; nothing raises out of run_goal.
"""

import math
import queue
import threading
import time

from .daemon_client import DaemonError, DaemonUnavailable

DEADLINE_GRACE_S = 0.25
CLOSE_WAIT_S = 0.5
TIMEOUT_MARGIN_S = 5.0


class Outcome:
    """The end of a goal: success and the daemon's answer, or why not."""

    def __init__(self, success, error='', answer=None, cancelled=False, tokens=0):
        self.success, self.error, self.cancelled, self.tokens = success, error, cancelled, tokens
        self.answer = answer or {}


def request_body(goal, max_tokens, deadline_s):
    """
    Return the POST /v1/plan body for a goal given as a dict of the action's goal fields.

    max_tokens and deadline_s are the node's defaults for goals that leave theirs at 0.
    """
    body = {'task': goal['task']}
    optional = {
        'observations': list(goal.get('observations') or []),
        'environment': goal.get('environment') or '',
        'conversation': goal.get('conversation') or '',
        'goal': _goal(list(goal.get('goal') or [])),
        'feasibility': goal.get('feasibility') or '',
    }
    body.update({k: v for k, v in optional.items() if v})
    if not goal.get('constrained', True):
        body['constrained'] = False
    body['max_tokens'] = int(goal.get('max_tokens') or 0) or int(max_tokens)
    temperature = float(goal.get('temperature') or 0.0)
    if temperature:
        body['temperature'] = temperature
    seed = int(goal.get('seed', -1))
    if seed != -1:
        body['seed'] = seed
    deadline = float(goal.get('deadline_s') or 0.0) or float(deadline_s)
    if deadline:
        body['deadline_ms'] = max(1, math.ceil(deadline * 1000)) if deadline > 0 else -1
    return body


def _goal(facts):
    """
    Return the goal field as the daemon takes it.

    The facts as they are; ["none"] or ["infer"] as the daemon's word. An empty list is not sent,
    so the daemon reads the goal in the task, its default.
    """
    return facts[0] if facts in (['none'], ['infer']) else facts


def run_goal(client, body, on_step=None, on_delta=None, is_cancelled=None, poll_s=0.05):
    """Run one plan request to its Outcome; never raise."""
    try:
        return _run(client, body, on_step or _ignore, on_delta or _ignore,
                    is_cancelled or _never, poll_s)
    except Exception as e:  # noqa: B902 (a bug here or in a callback: still an outcome)
        return Outcome(False, error=f'the planner node failed: {type(e).__name__}: {e}')


def _run(client, body, on_step, on_delta, is_cancelled, poll_s):
    deadline_s = body.get('deadline_ms', 0) / 1000.0
    local_deadline = None
    if deadline_s > 0:
        local_deadline = time.monotonic() + deadline_s + DEADLINE_GRACE_S
        client.timeout_s = min(client.timeout_s, deadline_s + TIMEOUT_MARGIN_S)
    if is_cancelled():
        return Outcome(False, error='cancelled before it started', cancelled=True)
    stream = client.plan_stream(body)
    events = queue.Queue()
    reader = threading.Thread(target=_read, args=(stream, events), daemon=True,
                              name='orin-llm-plan-stream')
    reader.start()
    tokens = 0
    try:
        while True:
            if is_cancelled():
                stream.close()
                reader.join(CLOSE_WAIT_S)
                return Outcome(False, error=f'cancelled after {tokens} tokens', cancelled=True,
                               tokens=tokens)
            wait = poll_s
            if local_deadline is not None:
                left = local_deadline - time.monotonic()
                if left <= 0:
                    return Outcome(False, tokens=tokens, error=(
                        f'deadline of {deadline_s:g} s exceeded after {tokens} tokens (the daemon '
                        f'at {client.socket_path} did not answer in time); raise deadline_s or '
                        'lower max_tokens'))
                wait = min(wait, left)
            try:
                kind, value = events.get(timeout=wait)
            except queue.Empty:
                continue
            if kind == 'delta':
                tokens += 1
                on_delta(value, tokens)
            elif kind == 'step':
                on_step(value)
            elif kind == 'done':
                return Outcome(True, answer=value, tokens=tokens)
            else:
                return Outcome(False, tokens=tokens,
                               error=describe(value, client, deadline_s, tokens))
    finally:
        stream.close()


def _read(stream, events):
    try:
        for event in stream:
            kind = 'delta' if 'delta' in event else 'step' if 'step' in event else 'done'
            events.put((kind, event.get(kind, event)))
        events.put(('error', DaemonError(None, 'the plan stream ended without an answer')))
    except Exception as e:  # noqa: B902 (handed to the goal's loop, which words it)
        events.put(('error', e))


def describe(e, client, deadline_s, tokens):
    """Word a failure: what happened, and what to do."""
    if isinstance(e, DaemonUnavailable):
        return unreachable(e)
    if isinstance(e, DaemonError):
        if e.status == 504:
            return (f'deadline of {deadline_s:g} s exceeded after {tokens} tokens ({e.message}); '
                    'raise deadline_s or lower max_tokens')
        if e.status is None and 'timed out' in e.message:
            return (f'the planner daemon at {client.socket_path} did not answer within '
                    f'timeout_s = {client.timeout_s:g} s; is it overloaded? raise timeout_s')
        if e.status is None:
            return (f'the connection to the planner daemon at {client.socket_path} failed after '
                    f'{tokens} tokens: {e.message}')
        if e.status == 503:
            return f'the planner daemon is busy or stopping (HTTP 503): {e.message}; retry later'
        return f'the planner daemon refused the goal (HTTP {e.status}): {e.message}'
    return f'{type(e).__name__}: {e}'


def unreachable(e):
    """Word an unreachable daemon: where, why, and what to do."""
    return (f'{e.message}; start it (sudo systemctl start orin-llm, or orin-llm serve) or point '
            "the node's socket_path parameter at its socket")


def _never():
    return False


def _ignore(*args):
    pass
