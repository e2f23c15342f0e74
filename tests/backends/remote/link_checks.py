"""What the link tests check, the same against the fake peer (test_link.py) and a real vLLM (test_vllm.py):
with the link through the test's proxy (proxy.py) broken in one way, a plan is answered locally within its
deadline and says why; the daemon then rests the remote (the next plan opens no connection), and once the
link heals, plans are served remotely again."""

from __future__ import annotations

import re
import time

from .proxy import Proxy

TASK = "Bring the milk from the fridge to the coffee table."
# what each way of breaking the link ends in: {fallback_reason: words in the fallback}; a reset may reach the
# daemon before its request is written (while it sets up the socket: unreachable) or after (cut off)
EXPECTED = {"stall": {"no_first_token": "no first token"},
            "drop": {"cut_off": "cut off", "unreachable": "unreachable"},
            "refuse": {"unreachable": "unreachable"}}


def until_remote(client, timeout_s: float, **plan) -> tuple[dict, float]:
    """Plans until one is served remotely (the link works and no rest is left): (that answer, the wait).
    Each is one request (goal "none"): these checks are of the link, not of the goal's reading."""
    t0 = time.monotonic()
    while True:
        out = client.plan(TASK, goal="none", **plan)
        if out["served_by"] == "remote":
            return out, time.monotonic() - t0
        assert time.monotonic() - t0 < timeout_s, f"never served remotely again: {out.get('fallback')}"
        time.sleep(0.2)


def answers(metrics: str, served_by: str, reason: str) -> float:
    """orin_llm_answers_total for /v1/plan by who served and why."""
    pattern = (rf'^orin_llm_answers_total\{{endpoint="plan",fallback_reason="{reason}",served_by="{served_by}"\}} '
               r"(\S+)$")
    found = re.search(pattern, metrics, re.M)
    return float(found.group(1)) if found else 0.0


def check_a_broken_link(daemon, proxy: Proxy, mode: str, deadline_ms: int, heal_within_s: float, **plan) -> dict:
    expected = EXPECTED[mode]
    with daemon.client(timeout_s=deadline_ms / 1e3 + 60) as c:
        until_remote(c, heal_within_s, deadline_ms=deadline_ms, **plan)
        before = c.metrics()
        proxy.set(mode)
        try:
            t0 = time.monotonic()
            out = c.plan(TASK, deadline_ms=deadline_ms, goal="none", **plan)
            took = time.monotonic() - t0
            opened = proxy.accepted
            resting = c.plan(TASK, deadline_ms=deadline_ms, goal="none", **plan)
            assert proxy.accepted == opened, "a resting remote was asked"
        finally:
            proxy.heal()
        back, waited = until_remote(c, heal_within_s, deadline_ms=deadline_ms, **plan)
        after = c.metrics()
    reason = out.get("fallback_reason")
    assert out["served_by"] == "local" and reason in expected and expected[reason] in out["fallback"], out
    assert out["steps"] and took < deadline_ms / 1e3, (took, out)
    assert resting["served_by"] == "local" and resting["fallback_reason"] == "resting", resting
    assert back["served_by"] == "remote" and back["remote"]["engine_ms"] >= 0
    assert answers(after, "local", reason) == answers(before, "local", reason) + 1
    assert answers(after, "local", "resting") >= answers(before, "local", "resting") + 1
    assert answers(after, "remote", "none") >= answers(before, "remote", "none") + 1
    return {"mode": mode, "local_s": round(took, 3), "back_after_s": round(waited, 3)}
