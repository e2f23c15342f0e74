"""Issue #15's interleaved traffic through the CLI: a real daemon on a scaled home, plans and chats with
another system prompt in turns. Timings are the benchmark's and not asserted; what the daemon reported
each request took from its KV cache is: the chats never cost the plans their home."""

from __future__ import annotations

import json

import pytest

from ..conftest import orin_llm

pytestmark = pytest.mark.full


def test_traffic_keeps_the_home_cached_between_chats_and_computes_it_cold(engine_dir, tmp_path):
    out = tmp_path / "bench"
    orin_llm("bench", "--engine", str(engine_dir), "--scenario", "traffic", "--quick", "--out", str(out))
    d = json.loads((out / "traffic.json").read_text())
    k, home = d["kinds"], d["prefix_tokens"]
    assert home > 500 and all(k[kind]["requests"] >= 2 for kind in k)
    whole_blocks = home // d["block_size"] * d["block_size"]
    for kind in ("warm_plan", "warm_plan_unconstrained"):  # every plan right after a chat with another prompt
        assert k[kind]["cached_prompt_tokens_min"] >= whole_blocks
        assert k[kind]["computed_prompt_tokens_median"] < 80
    assert d["home_recomputed"] == 0 and d["metrics"]["orin_llm_kv_pool_evictions"] == 0
    assert k["cold"]["computed_prompt_tokens_median"] > home - 100  # its own home: computed in the request
    assert k["task_alone"]["prompt_tokens_median"] < 100
    for s in d["samples"]["warm_plan"] + d["samples"]["cold"]:
        assert s["cached_prompt_tokens"] + s["computed_prompt_tokens"] == s["prompt_tokens"]
    r = d["ratios"]
    assert r["cold_over_warm"] == k["cold"]["client_ms_median"] / k["warm_plan"]["client_ms_median"] > 1
    assert (out / "traffic.png").stat().st_size > 1000
    report = (out / "report.md").read_text()
    assert "## Interleaved traffic through the daemon" in report and "Cold / warm" in report
