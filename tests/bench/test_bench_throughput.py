"""Issue #15's throughput scenario through the CLI: concurrent clients on a real daemon. Rates and
latencies are the benchmark's; that every request was answered, and counted, is asserted."""

from __future__ import annotations

import json

import pytest

from ..conftest import orin_llm

pytestmark = pytest.mark.full


def test_throughput_answers_every_request_at_each_level(engine_dir, tmp_path):
    out = tmp_path / "bench"
    orin_llm("bench", "--engine", str(engine_dir), "--scenario", "throughput", "--quick", "--out", str(out))
    d = json.loads((out / "throughput.json").read_text())
    assert list(d["configs"]) == ["default"] and d["configs"]["default"]["scheduler"]["max_running"] >= 2
    for shape, rows in d["results"]["default"].items():
        assert [r["clients"] for r in rows] == [1, 2]
        for r in rows:
            assert r["requests"] == d["requests_per_level"][shape] * d["passes"] and r["errors"] == 0
            assert r["requests_per_s"] > 0 and 0 < r["latency_ms_p50"] <= r["latency_ms_p99"]
    assert d["speedup_clients"] == 2 and d["speedup_over_one_client"]["default"]["plan"] > 0
    assert (out / "throughput.png").stat().st_size > 1000
    assert "## Throughput by concurrent clients" in (out / "report.md").read_text()
