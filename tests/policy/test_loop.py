"""The control loop's bookkeeping on a scripted clock: releases on a fixed grid, late ticks, skipped
releases, and the numbers summarize() reports."""

from __future__ import annotations

import pytest

from orin_llm.policy.loop import Tick, run_loop, summarize


class Clock:
    def __init__(self):
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.now += s


def scripted(durations_ms: list[float], rate_hz: float = 10.0) -> list[Tick]:
    clock = Clock()

    def step(k: int) -> None:
        clock.now += durations_ms.pop(0) / 1e3

    return run_loop(step, rate_hz, lambda: not durations_ms, clock=clock, sleep=clock.sleep)


def test_on_time_ticks_release_on_the_grid_and_sleep_between():
    ticks = scripted([20, 30, 10, 50])
    assert [t.index for t in ticks] == [0, 1, 2, 3]
    assert [round(t.release - ticks[0].release, 9) for t in ticks] == [0, 0.1, 0.2, 0.3]
    s = summarize(ticks, 10.0)
    assert s["missed_deadlines"] == 0 and s["tick_max_ms"] == pytest.approx(50)
    assert s["tick_p50_ms"] == pytest.approx(30) and s["cpu_share"] == pytest.approx(0.11 / 0.35)


def test_an_overrun_is_late_and_skips_the_releases_it_ran_over():
    # 100 ms period: tick 1 takes 250 ms, so releases 2 and 3 pass while it runs; tick 4 is next
    ticks = scripted([10, 250, 10, 10])
    assert [t.index for t in ticks] == [0, 1, 4, 5]
    s = summarize(ticks, 10.0)
    assert s["late_ticks"] == 1 and s["skipped_releases"] == 2 and s["missed_deadlines"] == 3
    assert s["tick_max_ms"] == pytest.approx(250)


def test_finishing_exactly_at_the_deadline_is_on_time():
    s = summarize(scripted([100, 10]), 10.0)
    assert s["late_ticks"] == 0 and s["skipped_releases"] == 0


def test_summary_of_a_window_and_of_nothing():
    ticks = scripted([10] * 10)
    t0 = ticks[0].release
    assert summarize(ticks, 10.0, since=t0 + 0.25, until=t0 + 0.65)["ticks"] == 4
    assert summarize([], 10.0) == {"ticks": 0, "missed_deadlines": 0, "late_ticks": 0, "skipped_releases": 0}
    with pytest.raises(ValueError):
        run_loop(lambda k: None, 0, lambda: True)
