"""Progress lines: the estimate of the time left comes from the rate measured so far."""

from __future__ import annotations

from orin_llm import progress
from orin_llm.progress import Counter


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_estimate_is_the_measured_rate_times_what_is_left(monkeypatch, capsys):
    clock = Clock()
    monkeypatch.setattr(progress.time, "perf_counter", clock)
    c = Counter("calibrating", 10, unit="prompts", every_s=5.0)
    clock.now += 4.0
    c.advance(2)  # 2 prompts in 4 s: 2 s each, 8 left
    assert c.line().strip() == "calibrating: 2/10 prompts, 4.0s, about 16s left"
    clock.now += 0.5
    c.advance()  # within 5 s of the last line: not printed in a log
    clock.now += 5.5
    c.advance()  # 4 in 10 s
    clock.now += 1.0
    c.advance(6)  # done: always printed, without an estimate
    lines = [line.strip() for line in capsys.readouterr().err.splitlines()]
    assert lines == ["calibrating: 2/10 prompts, 4.0s, about 16s left",
                     "calibrating: 4/10 prompts, 10.0s, about 15s left",
                     "calibrating: 10/10 prompts, 11.0s"]


def test_quiet_prints_nothing(capsys):
    c = Counter("x", 2, quiet=True)
    c.advance(2)
    assert capsys.readouterr().err == ""
