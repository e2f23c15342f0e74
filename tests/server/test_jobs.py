"""What a job answers with, without an engine: the timings and what the CLI prints of them."""

from __future__ import annotations

from orin_llm.runtime.generate import Result, SpecStats, Timings
from orin_llm.server.cli import summary
from orin_llm.server.jobs import stats


def result() -> Result:
    return Result("go_to(tv)", [1, 2], "stop", Timings(prompt_tokens=9, completion_tokens=2, ttft_s=0.1, total_s=0.3),
                  SpecStats())


def test_a_plans_goal_reading_is_its_own_figure_not_queueing():
    """An idle daemon reported `queued 3409 ms` for a goal "infer" plan: the goal's reading was counted
    as the wait. Now queue_ms is the wait, goal_reading_ms the reading, and what the client waited is
    all of them; a chat answer (no goal) has no goal_reading_ms."""
    t = stats(result(), queue_s=0.002, goal_s=3.409)["timings"]
    assert (t["queue_ms"], t["goal_reading_ms"], t["ttft_ms"], t["total_ms"]) == (2.0, 3409.0, 100.0, 300.0)
    assert (t["ttft_since_arrival_ms"], t["total_since_arrival_ms"]) == (3511.0, 3711.0)
    assert "goal_reading_ms" not in stats(result(), queue_s=0.002)["timings"]
    plain = stats(result(), queue_s=0.002, goal_s=0.0)["timings"]
    assert plain["goal_reading_ms"] == 0.0 and plain["ttft_since_arrival_ms"] == 102.0
    line = summary({"steps": [], "timings": t})
    assert "queued 2 ms, then goal read in 3409 ms, then TTFT 100 ms" in line
    assert "since arrival: TTFT 3511 ms, total 3711 ms" in line
    assert "goal read" not in summary({"steps": [], "timings": plain})
