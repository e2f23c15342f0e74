"""The memory plan after `orin-llm build` (trtllm): the engine files' real sizes, measured, replace the
estimates for each model's weights and for what loading holds; `orin-llm memory` says which figures are
measured and which estimated, and `--engine` plans with a built engine's files. The build runs the real
pipeline (build/pipeline.py) with TensorRT-LLM's tools replaced by the fake 0.12 tools
(tests/build/fake_trtllm_tools.py), which write engine files of the sizes a test chooses."""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import pytest

from orin_llm.build import trtllm
from orin_llm.build.memory import GIB, engine_file_sizes, format_plan, plan_memory
from orin_llm.build.pipeline import build_engine
from orin_llm.errors import OrinError
from orin_llm.profile import load_profile
from tests.build import fake_trtllm_tools as tools
from tests.build.test_shipped_profiles import local_models

ROOT = Path(__file__).resolve().parents[2]
ORIN = ROOT / "jetson" / "profiles" / "agx-orin-64gb.toml"
MIB = 1 << 20


@pytest.fixture
def fake_build(tmp_path, monkeypatch):
    """build_engine(profile) with the fake tools; returns (profile, the estimated plan, build)."""
    profile = local_models(load_profile(ORIN), ORIN, tmp_path).model_copy(update={"lookup_seed": "none"})
    root = tools.install(tmp_path, monkeypatch)
    monkeypatch.setattr(trtllm, "trtllm_steps", functools.partial(trtllm.trtllm_steps, trtllm_root=str(root),
                                                                  python=sys.executable))
    monkeypatch.setattr(trtllm, "run_steps", functools.partial(trtllm.run_steps, runner=tools.run))
    monkeypatch.setattr(tools, "ENGINE_BYTES", {})

    def build(sizes: dict[str, int]) -> Path:
        tools.ENGINE_BYTES.update(sizes)
        return build_engine(profile, tmp_path / "engine", ORIN.parent, quiet=True)

    return profile, plan_memory(profile, ORIN.parent), build


@pytest.mark.full  # (8 to 15 s: full tier, to keep the fast tier within its 8 minutes)
def test_the_build_writes_the_plan_with_the_engine_files_measured(fake_build):
    profile, estimated, build = fake_build
    assert estimated.measured == [] and {"target weights", "draft weights", "loading"} <= set(estimated.estimated)
    sizes = {"target": estimated.target.weights_bytes + 300 * MIB, "draft": estimated.draft.weights_bytes - 100 * MIB}
    out = build(sizes)
    assert engine_file_sizes(out) == sizes
    plan = json.loads((out / "manifest.json").read_text())["memory_plan"]
    assert plan["target"]["weights_bytes"] == sizes["target"] and plan["draft"]["weights_bytes"] == sizes["draft"]
    assert plan["target"]["weights_source"].startswith("measured: target/rank*.engine")
    assert plan["load_extra_bytes"] == sizes["target"] and "measured: the target engine file" in plan["load_source"]
    assert set(plan["measured"]) == {"target weights", "draft weights", "loading"}
    assert "target weights" not in plan["estimated"] and "workspace" in plan["estimated"]
    # the bigger target shrinks the KV budget by what the estimates missed, twice (kept, and read whole)
    grown = 2 * sizes["target"] + sizes["draft"] - 2 * estimated.target.weights_bytes - estimated.draft.weights_bytes
    assert plan["budget_bytes"] == estimated.budget_bytes - grown
    assert plan["max_kv_tokens"] <= estimated.max_kv_tokens


def test_an_engine_bigger_than_the_plan_holds_is_refused_with_the_numbers(fake_build):
    profile, estimated, build = fake_build
    too_big = estimated.budget_bytes  # the target's file alone takes the whole KV budget, twice
    with pytest.raises(OrinError, match=r"memory plan for .* does not fit: .*GiB"):
        build({"target": estimated.target.weights_bytes + too_big, "draft": estimated.draft.weights_bytes})


def test_memory_says_what_is_measured_and_reads_a_built_engine(fake_build):
    from typer.testing import CliRunner

    from orin_llm.cli import app

    profile, estimated, build = fake_build
    text = format_plan(estimated)
    assert "measured: nothing yet" in text and "estimated: target weights, draft weights, loading" in text
    out = build({"target": 2 * GIB, "draft": GIB})
    runner = CliRunner()
    result = runner.invoke(app, ["memory", "--profile", str(ORIN), "--engine", str(out), "--json"])
    assert result.exit_code == 0, result.output
    d = json.loads(result.output)
    assert d["measured"] == ["target weights", "draft weights", "loading"]
    assert d["target"]["weights_bytes"] == 2 * GIB and d["draft"]["weights_bytes"] == GIB
    shown = runner.invoke(app, ["memory", "--profile", str(ORIN), "--engine", str(out)])
    assert "measured: target/rank*.engine (2,147,483,648 B)" in shown.output
    assert "measured: target weights, draft weights, loading" in shown.output
    empty = runner.invoke(app, ["memory", "--profile", str(ORIN), "--engine", str(out.parent / "none")])
    assert empty.exit_code != 0 and "no TensorRT-LLM engine files" in str(empty.exception or empty.output)
