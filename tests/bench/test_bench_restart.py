"""Issue #15's restart scenario: the warm-up tasks it writes, and a quick run through the CLI with
three real daemons (warm-up, restarted on its state directory, fresh)."""

from __future__ import annotations

import json

import pytest

from orin_llm.bench.restart import warmup_tasks
from orin_llm.planning.calibration_data import load_home

from ..conftest import orin_llm

pytestmark = pytest.mark.full


def test_warmup_tasks_are_distinct_and_leave_the_measured_ones_out():
    env = load_home("villa")
    first = warmup_tasks(env, 10, set())
    tasks = warmup_tasks(env, 40, {first[0], first[3]})
    assert len(set(tasks)) == 40 and first[0] not in tasks and first[3] not in tasks
    names = {n.replace("_", " ") for r in env.rooms for n in r.objects + r.places}
    assert all(any(n in t for n in names) for t in tasks)  # written from the home's own names
    with pytest.raises(ValueError, match="gives only"):
        warmup_tasks(env, 10_000, set())


def test_restart_reloads_the_persisted_history(engine_dir, tmp_path):
    out = tmp_path / "bench"
    orin_llm("bench", "--engine", str(engine_dir), "--scenario", "restart", "--quick", "--out", str(out))
    d = json.loads((out / "restart.json").read_text())
    seed = len(json.loads((engine_dir / "lookup_seed.json").read_text())["outputs"])
    (saved,) = d["history_saved"]
    assert saved["key"] == f"env:{d['home']}" and saved["outputs"] == seed + d["warmup_requests"]
    assert d["identical_plans"] is True  # lossless: the history changes the drafts, never the plan
    for name in ("restarted", "fresh"):
        assert len(d["requests"][name]) == d["measured_requests"] and d["summary"][name]["drafted"] > 0
    assert (out / "restart.png").stat().st_size > 1000
    assert "after a restart" in (out / "report.md").read_text()
