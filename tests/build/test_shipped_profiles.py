"""Every shipped Orin profile (jetson/profiles/*.toml, a new one is covered by being there) plans, builds
and loads: the memory plan fits and its deployment passes TensorRT-LLM 0.12's rules; the build's commands
run through the fake 0.12 tools (convert_checkpoint.py, quantize.py, trtllm-build:
tests/build/fake_trtllm_tools.py; our lm-head step for real), whose
engine config.json files the fake 0.12 Executor (tests/backends/trtllm/fake_trtllm.py) then loads with what the
runtime asks for; and a planning call gets what the deployment promised: block reuse measured by the
executor, speculation with the modes it lists. The loaded engine's promises are checked on the real bindings
too, on the engine ORIN_LLM_TEST_TRTLLM_ENGINE names, for the profile it was built from (`bindings`,
tests/backends/trtllm/trtllm_both.py; skipped with the reason otherwise)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from orin_llm.backends.trtllm.engine import TrtllmEngine
from orin_llm.build.memory import check_feasible, plan_memory
from orin_llm.build.trtllm import format_steps, run_steps, trtllm_steps, write_calib_dataset
from orin_llm.manifest import load_manifest
from orin_llm.profile import Profile, load_profile
from orin_llm.runtime.sampling import SamplingParams
from tests.backends.trtllm.test_trtllm_engine import install_models
from tests.build import fake_trtllm_tools as tools
from tests.conftest import tiny_fixture

ROOT = Path(__file__).resolve().parents[2]
# the fake's engine: the tokenizer and manifest layout only (the executors are the fake's): the tiny engine does
engine_dir = tiny_fixture("engine_dir")
SHIPPED = sorted(ROOT.glob("jetson/profiles/*.toml"))
TRTLLM = [p for p in SHIPPED if load_profile(p).backend == "trtllm"]  # (torch's: test_torch_profile.py)


def test_there_are_shipped_profiles():
    assert {p.stem for p in SHIPPED} >= {"agx-orin-64gb", "agx-orin-64gb-int8kv", "agx-orin-64gb-torch"}


def local_models(profile: Profile, path: Path, tmp_path: Path) -> Profile:
    """The profile with its models in tmp_path: each an HF dir holding the config.json the profile plans from
    and, as Llama 3.2's tied checkpoints do, an embedding but no lm_head.weight (a tiny one: only names
    and headers are read)."""
    update = {}
    for role in ("target", "draft"):
        spec = getattr(profile, role)
        if spec is not None:
            model = tmp_path / "models" / role
            model.mkdir(parents=True)
            shutil.copy((path.parent / spec.config).resolve(), model / "config.json")
            assert json.loads((model / "config.json").read_text())["tie_word_embeddings"] is True
            save_file({"model.embed_tokens.weight": np.zeros((4, 2), np.float16)}, str(model / "model.safetensors"))
            update[role] = spec.model_copy(update={"model": str(model)})
    return profile.model_copy(update=update)


def write_manifest(out: Path, src: Path, profile: Profile, plan) -> None:
    """What build/pipeline.py _build_trtllm writes next to the engines, from the session's engine (its
    tokenizer and manifest layout): the profile, its limits and memory plan, the engines' KV dtypes."""
    shutil.copytree(src / "tokenizer", out / "tokenizer")
    data = json.loads((src / "manifest.json").read_text())
    data.update(backend="trtllm", name=profile.name, lookup_seed=None, profile=profile.model_dump(mode="json"),
                limits=profile.limits.model_dump(), memory_plan=plan.as_dict())
    for role in ("target", "draft"):
        spec = getattr(profile, role)
        if spec is None:
            data[role] = None
        else:
            data[role] = {**data["target"], "dir": role, "files": [], "kv_cache": {"dtype": spec.kv_cache},
                          "weights": spec.weights, "dtype": spec.dtype}
    (out / "manifest.json").write_text(json.dumps(data))


def build_with_fake_tools(path: Path, tmp_path: Path, monkeypatch) -> tuple[Profile, Path]:
    """The profile's build commands, as the pipeline makes them, run by the fake 0.12 tools into tmp_path."""
    profile = local_models(load_profile(path), path, tmp_path)
    out = tmp_path / profile.name
    root = tools.install(tmp_path, monkeypatch)
    steps = trtllm_steps(profile, out, trtllm_root=str(root), python=sys.executable)
    if "--calib_dataset" in format_steps(steps):
        write_calib_dataset(out)
    run_steps(steps, out, quiet=True, runner=tools.run)
    return profile, out


@pytest.mark.parametrize("path", TRTLLM, ids=[p.stem for p in TRTLLM])
def test_shipped_profile_plans_and_builds(path, tmp_path, monkeypatch):
    """No executor here: the plan and the commands the fake 0.12 tools run, and what they build."""
    dep = check_feasible(plan_memory(load_profile(path), path.parent)).deployment
    assert dep["refused"] is None and dep["backend"] == "trtllm"
    _, out = build_with_fake_tools(path, tmp_path, monkeypatch)
    built = {role: json.loads((out / role / "config.json").read_text())["build_config"] for role in dep["engines"]}
    for role, engine in dep["engines"].items():
        assert built[role]["plugin_config"]["use_paged_context_fmha"] == engine["paged_context_fmha"]
        assert (built[role]["speculative_decoding_mode"] == 2) == engine["draft_tokens_external"]


@pytest.mark.parametrize("path", TRTLLM, ids=[p.stem for p in TRTLLM])
def test_an_engine_of_a_shipped_profile_serves_what_its_deployment_promises(path, bindings, request, tmp_path,
                                                                          monkeypatch):
    shipped = load_profile(path)
    plan = check_feasible(plan_memory(shipped, path.parent))
    dep = plan.deployment
    if bindings.real_dir is not None:
        built_from = load_manifest(bindings.real_dir).name
        if built_from != shipped.name:
            pytest.skip(f"the real engine was built from profile {built_from!r}, not {shipped.name!r}")
        out = bindings.real_dir
    else:  # the fake tools' engines, with what build/pipeline.py writes next to them
        profile, out = build_with_fake_tools(path, tmp_path, monkeypatch)
        write_manifest(out, request.getfixturevalue("engine_dir"), profile, plan)

    # load: the runtime's executors, through the 0.12 Executor and (on the fake) its load-time checks
    with TrtllmEngine.load(out) as eng:
        loaded = ["target"] + (["draft"] if eng.draft_executor is not None else [])
        assert loaded == sorted(dep["engines"], key=["target", "draft"].index)
        assert eng.block_reuse == dep["prefix_reuse"] and eng.chunked_context == dep["chunked_context"]
        assert [m for m in eng.speculation_modes if m != "auto"] == dep["speculation"]
        fake = bindings.fake
        if fake is not None:  # what the runtime asked each Executor for, which only the fake records
            assert sorted(ex.path.name for ex in fake.EXECUTORS) == sorted(dep["engines"])
            assert [c["max_tokens"] for c in fake.calls("KvCacheConfig")] == [plan.max_kv_tokens] * len(dep["engines"])
            assert {c["enable_block_reuse"] for c in fake.calls("KvCacheConfig")} == {dep["prefix_reuse"]}
            assert {c["enable_chunked_context"] for c in fake.calls("ExecutorConfig")} == {dep["chunked_context"]}
            install_models(fake, eng)

        # a planning call: the pinned prefix is reused (or not) as the deployment says, measured
        prefix = eng.chat_ids([{"role": "system", "content": "You plan for a home robot. " * 40}])
        eng.pin(prefix)
        ids = prefix + eng.encode("Bring the mug to the sofa.")
        expected = eng.cached_prefix(ids) if dep["prefix_reuse"] else 0
        for mode in dep["speculation"]:
            res = eng.generate(ids, SamplingParams(max_tokens=12), speculation=mode).run()
            assert res.speculation.drafter == mode and res.token_ids
            assert res.timings.cached_prompt_tokens >= expected
            if fake is not None:
                assert res.token_ids == fake.MODELS["target"].greedy_run(ids, 12)
        assert (expected > 0) == dep["prefix_reuse"]
        # the KV pool the executor reports after them: whole blocks, within the engine's memory plan
        usage, block = eng.kv_usage(), eng.tokens_per_block
        planned = eng.manifest.memory_plan["target"]["max_kv_tokens"]
        assert usage["source"] == "executor" and 0 < usage["capacity_tokens"] <= -(-planned // block) * block
