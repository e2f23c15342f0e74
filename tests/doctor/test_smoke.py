"""The first-contact smoke test (orin_llm/doctor/smoke.py) against a real daemon on a real socket (the tiny
engine), and against no daemon at all: it stops at the first failure and says what to try."""

from __future__ import annotations

import json

import pytest

from orin_llm.doctor.smoke import cancelled_count, main, run_smoke
from tests.conftest import tiny_fixture
from tests.server.conftest import short_dir, start_daemon  # noqa: F401 (fixture)

engine_dir = tiny_fixture("engine_dir")


@pytest.mark.full  # a daemon process (the fast tier runs the routes in-process)
def test_a_daemon_passes_health_plan_stream_and_cancel(start_daemon, tmp_path):  # noqa: F811
    d = start_daemon()
    out = tmp_path / "smoke.json"
    assert main(["--socket", str(d.socket), "--out", str(out), "--wait-s", "60"]) == 0
    data = json.loads(out.read_text())
    assert data["ok"] and [c["name"] for c in data["checks"]] == ["health", "plan", "stream", "cancel"]
    cancel = data["checks"][-1]
    assert "cancelled" in cancel["detail"] and "next plan served" in cancel["detail"]
    with d.client() as c:
        assert cancelled_count(c.metrics()) >= 1


def test_no_daemon_stops_at_health_with_the_next_step():
    said: list[str] = []
    smoke = run_smoke(short_dir() / "none.sock", wait_s=0.5, say=said.append)
    assert not smoke.ok and [c.name for c in smoke.checks] == ["health"]
    assert "next: the daemon is not ready" in said[0]


def test_cancelled_count_reads_the_prometheus_text():
    text = ('# HELP orin_llm_requests_total Requests\n'
            'orin_llm_requests_total{endpoint="plan",outcome="cancelled"} 2.0\n'
            'orin_llm_requests_total{endpoint="chat",outcome="cancelled"} 1.0\n'
            'orin_llm_requests_total{endpoint="plan",outcome="ok"} 7.0\n')
    assert cancelled_count(text) == 3.0
