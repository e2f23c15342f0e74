"""The co-run scenario through the CLI, as a user runs it from a fresh clone: the embedded engine, the
CPU stand-in generated on the fly, the real daemon and the real runner in their own processes. The
numbers are not asserted (they are the benchmark's); their presence, their consistency and their
labels are."""

from __future__ import annotations

import json

import pytest

from ..conftest import orin_llm

pytestmark = pytest.mark.full


def test_policy_scenario_writes_phases_planner_figures_memory_plot_and_report(engine_dir, tmp_path):
    out = tmp_path / "bench"
    proc = orin_llm("bench", "--engine", str(engine_dir), "--scenario", "policy", "--quick", "--out", str(out),
                    "--policy-rate-hz", "20", timeout=1200)
    assert proc.stdout.strip().endswith("report.md")
    d = json.loads((out / "policy.json").read_text())
    assert d["stand_in"] is True and "STAND-IN" in d["note"] and d["rate_hz"] == 20
    for phase in ("policy_alone", "together", "together_unprotected"):
        p = d["phases"][phase]
        assert p["ticks"] > 0 and p["missed_deadlines"] == p["late_ticks"] + p["skipped_releases"] >= 0
        assert 0 < p["tick_p50_ms"] <= p["tick_p99_ms"] <= p["tick_max_ms"]
        assert p["backend"] == "onnxruntime" and p["device"] == "cpu"
    # the policy keeps the CPU the daemon leaves it
    lowest = d["protective"]["policy_args"][1]
    assert d["phases"]["together"]["placement"]["cpus"] == lowest == d["phases"]["policy_alone"]["placement"]["cpus"]
    pl = d["planner"]
    for key in ("alone", "together", "alone_protected", "together_unprotected"):
        assert pl[key]["requests"] >= 2 and pl[key]["ttft_ms_median"] > 0 and pl[key]["decode_tokens_per_s_median"] > 0
    r = pl["together_over_alone"]
    assert r["ttft_over_alone"] == pl["together"]["ttft_ms_median"] / pl["alone"]["ttft_ms_median"]
    # every planning call of a co-run lies inside the policy's ticks (one clock for both processes)
    tl = d["timeline"]["protected"]
    assert tl["ticks"][0][1] < tl["calls"][0][0] < tl["calls"][-1][1] < tl["ticks"][-1][3]
    m = d["memory"]
    assert m["policy_planned_bytes"] == 0 and m["policy_measured"]["stand_in"] is True
    assert m["policy_measured"]["total_bytes"] > 10 * 2**20 and m["planner_measured_rss_peak_bytes"] > 100 * 2**20
    assert (out / "policy.png").stat().st_size > 5000
    report = (out / "report.md").read_text()
    assert "## The policy next door" in report and "STAND-IN policy" in report and "missed deadlines" in report
