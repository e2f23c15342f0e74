"""Progress lines: the estimate of the time left comes from the rate measured so far."""

from __future__ import annotations

import pytest

from orin_llm import progress
from orin_llm.progress import Counter, Steps, announced


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


def test_long_silent_work_is_announced_on_stderr_with_its_time(monkeypatch, capsys):
    """Loading an engine says nothing for seconds: a line before, one with its time after, on stderr
    (stdout may be parsed); a failure prints no "done" line, its error says why."""
    clock = Clock()
    monkeypatch.setattr(progress.time, "perf_counter", clock)
    with announced("loading engines/demo"):
        clock.now += 7.94
    with pytest.raises(RuntimeError), announced("loading engines/none"):
        raise RuntimeError("no manifest.json")
    with announced("loading quietly", quiet=True):
        pass
    steps = Steps(2)
    with steps.step("exporting"):  # a build's steps: numbered, the same two lines
        clock.now += 1.0
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == ["loading engines/demo ...", "loading engines/demo: done in 7.9s",
                                "loading engines/none ...", "[1/2] exporting ...", "[1/2] exporting: done in 1.0s"]
