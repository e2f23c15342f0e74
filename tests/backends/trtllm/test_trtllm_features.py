"""`--trtllm-features` (orin_llm/backends/trtllm/features.py): a daemon turns on only the listed features of
those its engine was built for, through the fake executor module; 0.12's own load rules still refuse what
0.12 refuses. The feature ladder's rungs each add one feature and pass those rules on their engine's profile."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from orin_llm.backends.loader import load_engine
from orin_llm.backends.trtllm.engine import TrtllmEngine
from orin_llm.backends.trtllm.features import (
    BLOCK_REUSE,
    CHUNKED_CONTEXT,
    ENGINES,
    FEATURES,
    GRAMMAR,
    LADDER,
    LOOKUP,
    parse_features,
)
from orin_llm.backends.trtllm.rules import broken_rules, engine_setups
from orin_llm.errors import OrinError
from orin_llm.profile import load_profile
from tests.conftest import tiny_fixture

from .test_trtllm_engine import install_models, make_engine_dir

tiny_engine_dir = tiny_fixture("engine_dir")  # random weights do here (tests/conftest.py)

PROFILE = Path(__file__).resolve().parents[3] / "jetson" / "profiles" / "agx-orin-64gb.toml"


@pytest.fixture
def load(tmp_path, engine_dir, fake):
    engines = []

    def _load(features, **options) -> TrtllmEngine:
        path = make_engine_dir(engine_dir, tmp_path / f"trt{len(engines)}", chunked_context=True, **options)
        eng = TrtllmEngine.load(path, features=features)
        eng.reference = install_models(fake, eng)
        engines.append(eng)
        return eng

    yield _load
    for eng in engines:
        eng.close()


def test_parse_features():
    assert parse_features(None) is None
    assert parse_features("none") == frozenset() == parse_features("")
    assert parse_features("block_reuse, grammar") == {BLOCK_REUSE, GRAMMAR}
    with pytest.raises(OrinError, match="unknown paged_fmha .*known: block_reuse, chunked_context"):
        parse_features("block_reuse,paged_fmha")


def test_a_draft_tokens_target_without_block_reuse_is_still_refused(load):
    """The switch cannot make 0.12 load what it refuses: rules.py says why, before any Executor."""
    with pytest.raises(OrinError, match="draft-target-needs-block-reuse"):
        load(frozenset())


def test_block_reuse_alone_on_the_full_engine(load, fake):
    eng = load(frozenset({BLOCK_REUSE}))
    kv = fake.calls("KvCacheConfig")[-1]
    config = fake.calls("ExecutorConfig")[-1]
    assert kv["enable_block_reuse"] is True and config["enable_chunked_context"] is False
    assert "logits_post_processor_map" not in config  # no post-processor registered at all
    assert len(fake.calls("Executor")) == 1 and eng.draft_executor is None
    assert not eng.capabilities.grammars and eng.speculation_modes == ["auto", "none"]
    assert eng.resolve_speculation("auto", eng_params()) == "none"
    text = eng.run(eng.generate(eng.tokenizer.encode("robot cup"), eng_params(8))).text
    assert text  # it still plans, unconstrained


def test_each_feature_as_asked(load, fake):
    eng = load(frozenset({BLOCK_REUSE, CHUNKED_CONTEXT, GRAMMAR, LOOKUP}))
    assert fake.calls("ExecutorConfig")[-1]["enable_chunked_context"] is True
    assert "logits_post_processor_map" in fake.calls("ExecutorConfig")[-1]
    assert eng.capabilities.grammars and eng.draft_executor is None
    assert eng.speculation_modes == ["auto", "none", "lookup"]
    all_on = load(None)
    assert all_on.speculation_modes == ["auto", "none", "lookup", "draft_model", "combined"]
    assert len(fake.calls("Executor")) == 1 + 2  # the first engine's target, then target and draft


def test_a_torch_engine_refuses_the_switch(tiny_engine_dir):
    with pytest.raises(OrinError, match="--trtllm-features: .* is a torch engine"):
        load_engine(tiny_engine_dir, features=frozenset())


def eng_params(max_tokens: int = 4):
    from orin_llm.runtime.sampling import SamplingParams

    return SamplingParams(max_tokens=max_tokens, temperature=0.0)


def rung_setups(rung) -> list:
    """What the rung's engine is built with (its profile) and loaded with (its features), as rules.py sees it."""
    profile = load_profile(PROFILE.with_name(f"{PROFILE.stem}{ENGINES[rung.engine]}.toml"))
    return [replace(s, block_reuse=s.block_reuse and BLOCK_REUSE in rung.features,
                    chunked_context=s.chunked_context and CHUNKED_CONTEXT in rung.features)
            for s in engine_setups(profile)]


def test_the_ladder_adds_one_feature_per_rung_and_every_rung_loads():
    names = [r.name for r in LADDER]
    assert names == ["plain", "block reuse", "chunked context", "grammar post-processor", "lookup", "1B draft"]
    assert LADDER[0].features == () and set(LADDER[-1].features) == set(FEATURES)
    for before, after in zip(LADDER[:-1], LADDER[1:], strict=True):
        assert set(before.features) < set(after.features) and len(after.features) == len(before.features) + 1
    for rung in LADDER:
        assert [r for s in rung_setups(rung) for r in broken_rules(s)] == [], rung.name
    # the check can refuse: the lookup rung without block reuse is what 0.12 will not load
    bad = LADDER[4].__class__("bad", "full", (LOOKUP,), True, "lookup")
    assert any(r.id == "draft-target-needs-block-reuse" for s in rung_setups(bad) for r in broken_rules(s))


@pytest.mark.parametrize("suffix, differs", [
    ("-plain", {"name", "prefix_reuse", "chunked_context", "cached_prefix_tokens", "draft"}),
    ("-reuse", {"name", "draft"}),
])
def test_the_ladders_profiles_differ_from_the_profile_in_their_features_only(suffix, differs):
    main = load_profile(PROFILE).model_dump()
    sibling = load_profile(PROFILE.with_name(f"{PROFILE.stem}{suffix}.toml")).model_dump()
    assert {k for k in main if main[k] != sibling[k]} == differs


def test_multi_block_mode_from_the_profile(tmp_path, engine_dir, fake):
    """profile multi_block_mode = true: ExtendedRuntimePerfKnobConfig(multi_block_mode=True) on every executor
    (0.12's binding: R bindings.cpp L451-458, off by default); without the key, no knob config is passed."""
    import json

    path = make_engine_dir(engine_dir, tmp_path / "mb")
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["profile"]["multi_block_mode"] = True
    (path / "manifest.json").write_text(json.dumps(manifest))
    TrtllmEngine.load(path).close()
    configs = fake.calls("ExecutorConfig")
    assert len(configs) == 2 and all(c["extended_runtime_perf_knob_config"].multi_block_mode for c in configs)
    assert fake.calls("ExtendedRuntimePerfKnobConfig") == [{"multi_block_mode": True}] * 2
    TrtllmEngine.load(make_engine_dir(engine_dir, tmp_path / "plain")).close()
    assert "extended_runtime_perf_knob_config" not in fake.calls("ExecutorConfig")[-1]
