"""A running daemon's smoke test, for first contact with a new machine (jetson/first-contact.sh):
health, a plan, a streamed plan, and a cancelled stream, in that order, stopping at the first failure
with the next thing to try.

    python -m orin_llm.doctor.smoke --socket PATH [--out smoke.json] [--wait-s 600]

Cancel: the client drops a streamed plan after its first event (what a robot does when it replans);
the daemon must count it as `orin_llm_requests_total{outcome="cancelled"}` within CANCEL_WAIT_S and then
answer another plan. On the TensorRT-LLM backend that is the executor's cancel_request, which is where
a cancel that never comes back would show as a stall.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

from ..client import PlannerClient, PlannerError

TASK = "Bring the mug from the kitchen to the sofa."
CANCEL_WAIT_S = 10.0
LONG = 256  # tokens the cancelled plan asks for: long enough to be running when the client leaves


@dataclass
class Check:
    name: str
    ok: bool
    seconds: float
    detail: str
    next: str = ""  # what to try when it failed


@dataclass
class Smoke:
    socket: str
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(c.ok for c in self.checks)

    def as_dict(self) -> dict:
        return {"socket": self.socket, "ok": self.ok, "checks": [asdict(c) for c in self.checks]}


def cancelled_count(metrics: str) -> float:
    """Sum of orin_llm_requests_total samples with outcome="cancelled" (Prometheus text format)."""
    total = 0.0
    for line in metrics.splitlines():
        if line.startswith("orin_llm_requests_total{") and 'outcome="cancelled"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def _health(c: PlannerClient, wait_s: float) -> str:
    h = c.wait_ready(wait_s)
    return "ready: " + ", ".join(f"{k} {h[k]}" for k in ("status", "backend") if k in h)


def _plan(c: PlannerClient, opts: dict) -> str:
    r = c.plan(TASK, max_tokens=64, **opts)
    if not r.get("plan", "").strip():
        raise PlannerError(None, f"an empty plan: {json.dumps(r)[:300]}")
    return f"{len(r.get('steps') or [])} steps, finish_reason {r.get('finish_reason')}: {r['plan'].strip()[:80]!r}"


def _stream(c: PlannerClient, opts: dict) -> str:
    deltas, final = 0, None
    for event in c.plan_stream(TASK, max_tokens=64, **opts):
        if "delta" in event:
            deltas += 1
        elif "plan" in event:
            final = event
    if not deltas or final is None:
        raise PlannerError(None, f"the stream sent {deltas} deltas and {'a' if final else 'no'} final response")
    return f"{deltas} delta events, then the response"


def _cancel(c: PlannerClient, opts: dict) -> str:
    before = cancelled_count(c.metrics())
    # goal "none": the model's plan streams as it decodes (a goal plan's text is sent once chosen, at its end)
    stream = c.plan_stream(TASK, max_tokens=LONG, temperature=0, **{**opts, "goal": "none"})
    first = next(stream)  # the request is running
    stream.close()  # the client goes away: the daemon must cancel it
    t0 = time.monotonic()
    while cancelled_count(c.metrics()) <= before:
        if time.monotonic() - t0 > CANCEL_WAIT_S:
            raise PlannerError(None, f"no cancelled request counted {CANCEL_WAIT_S:.0f} s after the client left "
                                     "a stream (orin_llm_requests_total{outcome=\"cancelled\"})")
        time.sleep(0.05)
    seen = time.monotonic() - t0
    c.plan(TASK, max_tokens=8, **opts)  # and it still serves
    return f"first event {sorted(first)}; cancelled {seen * 1000:.0f} ms after the client left; next plan served"


NEXT = {
    "health": "the daemon is not ready: read its log (first-contact's serve.log); orin-llm doctor --engine ENGINE",
    "plan": "the daemon is up but cannot plan: its log says why; orin-llm plan --engine ENGINE runs it in-process",
    "stream": "plans work but streaming does not: a proxy or client that buffers? rerun with orin-llm plan --stream",
    "cancel": "a cancelled request was not released: docs/trtllm-0.12-jetson.md (cancel) and the daemon's log",
}


def run_smoke(socket: str | Path, wait_s: float = 600.0, timeout_s: float = 300.0,
              say: Callable[[str], Any] = print, constrained: bool = True,
              speculation: Optional[str] = None) -> Smoke:
    """constrained=False: free-text plans (a daemon without the grammar post-processor, the feature ladder's
    lower rungs); speculation: the plans' mode (None: the daemon's default)."""
    smoke = Smoke(str(socket))
    opts: dict[str, Any] = {"constrained": constrained}
    if speculation is not None:
        opts["speculation"] = speculation
    steps: list[tuple[str, Callable[[PlannerClient], str]]] = [
        ("health", lambda c: _health(c, wait_s)), ("plan", lambda c: _plan(c, opts)),
        ("stream", lambda c: _stream(c, opts)), ("cancel", lambda c: _cancel(c, opts))]
    for name, fn in steps:
        t0 = time.monotonic()
        try:
            with PlannerClient(socket, timeout_s=timeout_s) as c:
                detail, ok = fn(c), True
        except (PlannerError, StopIteration, OSError, ValueError) as e:
            detail, ok = f"{type(e).__name__}: {e}", False
        check = Check(name, ok, round(time.monotonic() - t0, 3), detail, "" if ok else NEXT[name])
        smoke.checks.append(check)
        say(f"{'ok  ' if ok else 'FAIL'} {name}: {detail}" + ("" if ok else f"\n     next: {check.next}"))
        if not ok:
            break
    return smoke


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m orin_llm.doctor.smoke", description=__doc__.split("\n")[0])
    ap.add_argument("--socket", required=True)
    ap.add_argument("--out", help="write the checks as JSON here")
    ap.add_argument("--wait-s", type=float, default=600.0, help="how long to wait for /health to say ready")
    ap.add_argument("--unconstrained", action="store_true", help="free-text plans (no grammar post-processor)")
    ap.add_argument("--speculation", help="the plans' speculation mode (default: the daemon's)")
    a = ap.parse_args(argv)
    smoke = run_smoke(a.socket, a.wait_s, constrained=not a.unconstrained, speculation=a.speculation)
    if a.out:
        Path(a.out).write_text(json.dumps(smoke.as_dict(), indent=2) + "\n")
    return 0 if smoke.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

