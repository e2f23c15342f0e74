"""Issue #15's agent loop through the CLI: a real daemon, five turns with and without `conversation`.
The tokens the daemon reports per turn are asserted: with a conversation every earlier turn (its plan
included) comes from the KV cache, and what is computed stays flat while the prompt grows."""

from __future__ import annotations

import json

import pytest

from ..conftest import orin_llm

pytestmark = pytest.mark.full


def test_agent_loop_computes_only_each_new_turn(engine_dir, tmp_path):
    out = tmp_path / "bench"
    orin_llm("bench", "--engine", str(engine_dir), "--scenario", "agents", "--quick", "--out", str(out))
    d = json.loads((out / "agents.json").read_text())
    assert d["turns"] == 5 and d["repeats"] == 1
    for mode in ("conversation", "resent"):
        turns = d["loops"][mode][0]
        assert len(turns) == 5
        prompts = [t["prompt_tokens"] for t in turns]
        assert prompts == sorted(set(prompts))  # the prompt grows every turn
        assert all(t["cached_prompt_tokens"] + t["computed_prompt_tokens"] == t["prompt_tokens"] for t in turns)
        s = d["summary"][mode]
        assert s["computed_after_turn1_max"] < 100 < s["after_home_total"] - s["computed_total"]
    conv = d["loops"]["conversation"][0]
    for a, b in zip(conv, conv[1:], strict=False):  # the last turn, its plan included, served in whole blocks
        assert b["cached_prompt_tokens"] >= a["prompt_tokens"] + a["completion_tokens"] - d["block_size"]
    assert (out / "agents.png").stat().st_size > 1000
    assert "## A 5-turn agent loop through the daemon" in (out / "report.md").read_text()
