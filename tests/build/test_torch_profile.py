"""The shipped Orin profile for our torch runtime (jetson/profiles/agx-orin-64gb-torch.toml, and any other
torch profile shipped there): its memory plan fits and combines what TensorRT-LLM 0.12 cannot on the Orin."""

from __future__ import annotations

from pathlib import Path

import pytest

from orin_llm.build.memory import check_feasible, plan_memory
from orin_llm.profile import load_profile
from tests.conftest import orin_llm

ROOT = Path(__file__).resolve().parents[2]
TORCH = [p for p in sorted(ROOT.glob("jetson/profiles/*.toml")) if load_profile(p).backend == "torch"]


def test_the_torch_profile_is_shipped():
    assert "agx-orin-64gb-torch" in {p.stem for p in TORCH}


@pytest.mark.parametrize("path", TORCH, ids=[p.stem for p in TORCH])
def test_a_torch_profile_plans_int8_kv_reuse_chunking_and_the_draft_together(path):
    """What TensorRT-LLM 0.12 refuses to combine on the Orin, planned together for our runtime (its CUDA
    path runs them: tests/runtime/test_cuda.py), through the real CLI's memory command too."""
    plan = check_feasible(plan_memory(load_profile(path), path.parent))
    dep = plan.deployment
    assert dep["refused"] is None and dep["backend"] == "torch" and dep["why_not"] == []
    assert dep["kv_cache"] == "int8" and dep["prefix_reuse"] and dep["chunked_context"]
    assert {"lookup", "draft_model", "combined"} <= set(dep["speculation"])
    assert all(e["kv_cache"] == "int8" and e["block_reuse"] for e in dep["engines"].values())
    assert set(dep["engines"]) == {"target", "draft"}
    out = orin_llm("memory", "--profile", str(path), timeout=120).stdout
    assert "status: fits" in out and "speculation none, lookup, draft_model, combined" in out
