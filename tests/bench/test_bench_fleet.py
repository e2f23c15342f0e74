"""The fleet scenario (issue #35) through the CLI: four real orin-llm daemons (the defaults: feasibility
enforce, remote plans stepwise) against two REAL vLLM CPU replicas behind the real vllm-router, per
router policy, then the link failing. Timings are the benchmark's and not asserted; what the engines,
the router and the daemons reported is: every routed plan is remote and feasible, made of at least a
request per step, the engine requests the daemons counted are the ones the engines served, prefix-aware
routing hits the engines' caches at least as often as round-robin on the same traffic, the daemons'
cached tokens are the engines' own, and a failed link ends in a local answer within the deadline.
Without vLLM the remote tier installs it (tests/backends/remote/vllm_replica.py) or fails saying why; the
scenario alone skips with the reason (the fast test below)."""

from __future__ import annotations

import json

import pytest

from ..conftest import orin_llm

# the fast test names conftest's tiny_engine_dir: a tiny_fixture("engine_dir") here would hand the full
# test below the random-weight engine too (it did: a plan of noise is one request, and nothing failed)


@pytest.mark.full
def test_fleet_routes_by_prefix_and_falls_back_locally(engine_dir, tmp_path, monkeypatch):
    from tests.backends.remote.vllm_replica import VENV, vllm_python

    vllm_python()  # installs .venv-vllm (vLLM and its router) or fails with pip's reason
    monkeypatch.setenv("ORIN_LLM_VLLM_VENV", str(VENV))
    out = tmp_path / "bench"
    proc = orin_llm("bench", "--engine", str(engine_dir), "--scenario", "fleet", "--quick", "--out", str(out),
                    timeout=1200)
    assert "fleet: skipped" not in proc.stderr
    d = json.loads((out / "fleet.json").read_text())
    assert (d["feasibility"], d["remote_plans"]) == ("enforce", "stepwise")
    p = d["policies"]
    ran = [name for name, v in p.items() if "error" not in v]
    assert {"round_robin", "cache_aware"} <= set(ran), p.get("round_robin", {}).get("error")
    for name in ran:
        v = p[name]
        assert v["plans"] == d["robots"] * d["plans_per_robot"] == len(v["samples"])
        assert all(s["served_by"] == "remote" for s in v["samples"]), (name, v["samples"])
        # stepwise: a request per step at least (one more where the plan ended on its own), no step that
        # cannot run; the engines served exactly the requests the daemons say they sent
        assert all(s["engine_requests"] >= max(1, s["steps"]) and s["violations"] == 0 for s in v["samples"]), \
            v["samples"]
        assert v["engine_requests"] == sum(s["engine_requests"] for s in v["samples"]) > v["plans"]
        assert sum(v["requests_per_replica"]) == v["engine_requests"], (v["requests_per_replica"], v["engine_requests"])
        assert all(s["ttft_ms"] <= s["client_ms"] for s in v["samples"])
        # the cached tokens each answer reported (the engine's usage) are what the engines counted
        assert v["usage_cached_tokens"] == v["engine_hit_tokens"] > 0
        assert v["usage_prompt_tokens"] == v["engine_query_tokens"]
    assert p["cache_aware"]["engine_hit_rate"] >= p["round_robin"]["engine_hit_rate"]
    if "kv_aware" in ran:  # the router really chose by its KV-event policy (its own decision counter)
        assert any(ln.startswith('vllm_router_prefix_routing_decisions_total{policy="kv_aware"')
                   for ln in p["kv_aware"]["router_metrics"]), p["kv_aware"]["router_metrics"]
    f, deadline = d["failures"], d["failure_deadline_ms"]
    assert all(s["served_by"] == "local" for s in f["local_alone"])
    stalled, stopped = f["replicas_stalled"][0], f["router_stopped"][0]
    assert stalled["served_by"] == "local" and "no first token" in stalled["fallback"]
    assert stopped["served_by"] == "local" and "remote failed" in stopped["fallback"]
    for s in (stalled, stopped, *f["replica_killed"]):  # a killed replica: the router may retry on the other
        assert s["client_ms"] < deadline, s
    assert f["replicas_stalled_recovered_after_s"] is not None  # the remote served again once resumed
    assert (out / "fleet.png").stat().st_size > 1000


def test_fleet_skips_with_the_reason_without_vllm(tiny_engine_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("ORIN_LLM_VLLM_VENV", str(tmp_path / "no-venv"))
    out = tmp_path / "bench"
    proc = orin_llm("bench", "--engine", str(tiny_engine_dir), "--scenario", "fleet", "--out", str(out))
    assert f"fleet: skipped: no {tmp_path / 'no-venv' / 'bin' / 'python'}" in proc.stderr
    assert "make vllm" in proc.stderr and not (out / "fleet.json").exists()


def test_a_plan_with_no_answer_is_a_row_that_says_why():
    """A missed deadline or a daemon gone is a measurement of the run, not the end of it: the row keeps
    the time it took and the client's error (here the real client against a socket nobody serves)."""
    from types import SimpleNamespace

    from orin_llm.bench.fleet import _plan

    from ..server.conftest import short_dir

    row = _plan(SimpleNamespace(socket=short_dir() / "nobody.sock"), "Put the mug on the table.", 4000)
    assert row["served_by"] == "none" and "no planner daemon at" in row["error"], row
    assert row["client_ms"] >= 0 and row["steps"] == 0 and row["fallback"] is None
