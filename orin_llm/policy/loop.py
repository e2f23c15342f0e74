"""The control loop: one policy step per period, on a fixed grid of release times, as on a robot.

Tick k is released at t0 + k·period and must have its action by its deadline, the next release.
Its latency is release → action (`end - release`): the wake-up delay the scheduler adds
(`start - release`) plus the step itself (`end - start`). A tick that ends after its deadline is
late; a tick that overruns past later releases makes those releases pass with no step at all
(the robot holds its last action): both are missed deadlines, counted separately too. The loop
never spins: between ticks it sleeps, so it costs the CPU exactly what the policy computes.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Tick:
    index: int  # release number on the grid (skipped releases leave gaps)
    release: float  # time.monotonic() seconds: CLOCK_MONOTONIC, the same clock in every process
    start: float
    end: float

    def as_list(self) -> list:
        return [self.index, round(self.release, 6), round(self.start, 6), round(self.end, 6)]


def run_loop(step: Callable[[int], None], rate_hz: float, should_stop: Callable[[], bool],
             max_ticks: Optional[int] = None, clock: Callable[[], float] = time.monotonic,
             sleep: Callable[[float], None] = time.sleep) -> list[Tick]:
    """Run `step(k)` at `rate_hz` until `should_stop()` (checked before each release) or `max_ticks`."""
    if not rate_hz > 0:
        raise ValueError("rate_hz must be > 0")
    period = 1.0 / rate_hz
    ticks: list[Tick] = []
    t0 = clock()
    k = 0
    while not should_stop() and (max_ticks is None or len(ticks) < max_ticks):
        release = t0 + k * period
        wait = release - clock()
        if wait > 0:
            sleep(wait)
        start = clock()
        step(k)
        end = clock()
        ticks.append(Tick(k, release, start, end))
        # The next release is the first grid point not yet passed; those passed while stepping are skipped.
        k = max(k + 1, math.floor((end - t0) / period) + 1)
    return ticks


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def summarize(ticks: list[Tick], rate_hz: float, since: Optional[float] = None,
              until: Optional[float] = None) -> dict:
    """Latency percentiles (ms) and missed deadlines of the ticks released in [since, until)."""
    period = 1.0 / rate_hz
    sel = [t for t in ticks if (since is None or t.release >= since) and (until is None or t.release < until)]
    if not sel:
        return {"ticks": 0, "missed_deadlines": 0, "late_ticks": 0, "skipped_releases": 0}
    latency = [(t.end - t.release) * 1e3 for t in sel]
    compute = [(t.end - t.start) * 1e3 for t in sel]
    wake = [(t.start - t.release) * 1e3 for t in sel]
    late = sum(t.end > t.release + period for t in sel)
    skipped = sum(b.index - a.index - 1 for a, b in zip(sel, sel[1:], strict=False))
    return {"ticks": len(sel), "period_ms": period * 1e3,
            "tick_p50_ms": _pct(latency, 0.5), "tick_p99_ms": _pct(latency, 0.99), "tick_max_ms": max(latency),
            "compute_p50_ms": _pct(compute, 0.5), "compute_p99_ms": _pct(compute, 0.99),
            "wake_p99_ms": _pct(wake, 0.99), "wake_max_ms": max(wake),
            "missed_deadlines": late + skipped, "late_ticks": late, "skipped_releases": skipped,
            "cpu_share": sum(compute) / 1e3 / max(period, sel[-1].end - sel[0].release)}
