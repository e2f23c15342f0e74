"""TensorRT-LLM 0.12's rules (orin_llm/backends/trtllm/rules.py) against the independent fakes of 0.12.

Every rule is refused three times, by code written separately: by the build before anything runs
(check_trtllm_profile), by the fake trtllm-build or the fake Executor with 0.12's own message
(tests/build/fake_trtllm_tools.py, tests/backends/trtllm/fake_trtllm.py), and the rule's recorded text is the
text the fake raises. A rule added without a way to break it fails test_every_rule_can_be_broken.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orin_llm.backends.trtllm.rules import RULES, EngineSetup, broken_rules, check_install, main
from orin_llm.build.trtllm import check_trtllm_profile
from orin_llm.errors import OrinError
from orin_llm.profile import parse_profile
from tests.build import fake_trtllm_tools as tools

ROOT = Path(__file__).resolve().parents[1]
CONFIG_3B = ROOT / "jetson" / "models" / "llama-3.2-3b-instruct" / "config.json"


def profile(**top):
    data = {"name": "p", "backend": "trtllm", "calibration": "calib", "device": {"memory_gib": 61.4},
            "target": {"model": "/m/3b", "weights": "int4_awq", "kv_cache": "fp16"},
            "limits": {"max_input_len": 4096, "max_seq_len": 4608, "max_num_tokens": 4096}}
    for key, value in top.items():
        section, _, field = key.partition("__")
        if field:
            data.setdefault(section, {})[field] = value
        else:
            data[section] = value
    return parse_profile(data, "test")


DRAFT = {"draft__model": "/m/1b", "draft__weights": "int4_awq", "draft__kv_cache": "fp16"}

# For each rule: a profile that asks for what it forbids, and the engine a hand-made build would have
# (kv cache, trtllm-build flags) plus how it would be loaded (block reuse, chunked context).
BREAK = {
    "int8-kv-paged-context-fmha": dict(
        profile=dict(prefix_reuse=True, target__kv_cache="int8"),
        kv="int8", build=["--use_paged_context_fmha", "enable"], reuse=False, chunked=False),
    "block-reuse-needs-paged-context-fmha": dict(
        profile=dict(prefix_reuse=True, target__kv_cache="int8"),
        kv="fp16", build=["--use_paged_context_fmha", "disable"], reuse=True, chunked=False),
    "draft-target-needs-block-reuse": dict(
        profile=dict(prefix_reuse=False, **DRAFT),
        kv="fp16", build=["--use_paged_context_fmha", "disable", "--max_draft_len", "4",
                          "--speculative_decoding_mode", "draft_tokens_external"], reuse=False, chunked=False),
    "chunked-context-needs-paged-context-fmha": dict(
        profile=dict(prefix_reuse=False, chunked_context=True, target__kv_cache="int8"),
        kv="fp16", build=["--use_paged_context_fmha", "disable"], reuse=False, chunked=True),
}


def test_every_rule_can_be_broken():
    assert set(BREAK) == {r.id for r in RULES} and len(RULES) == len({r.id for r in RULES})


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.id)
def test_the_build_refuses_it_before_anything_runs(rule):
    with pytest.raises(OrinError) as e:
        check_trtllm_profile(profile(**BREAK[rule.id]["profile"]))
    assert f"rule {rule.id}" in str(e.value) and "\n" not in str(e.value)


def _engine(tmp_path: Path, kv: str, build: list[str]) -> Path:
    """Quantize then build with the fake tools, as the steps would; raises what trtllm-build raises."""
    model = tmp_path / "hf"
    model.mkdir()
    (model / "config.json").write_text(CONFIG_3B.read_text())
    (tmp_path / "calib").mkdir()
    rows = "".join(json.dumps({"text": f"home {i}"}) + "\n" for i in range(32))
    (tmp_path / "calib" / "train.jsonl").write_text(rows)
    argv = ["--model_dir", str(model), "--output_dir", str(tmp_path / "ckpt"), "--qformat", "int4_awq",
            "--calib_dataset", str(tmp_path / "calib"), "--calib_size", "32"]
    tools.quantize(argv + (["--kv_cache_dtype", "int8"] if kv == "int8" else []))
    tools.trtllm_build(["--checkpoint_dir", str(tmp_path / "ckpt"), "--output_dir", str(tmp_path / "target"),
                        "--max_input_len", "64", "--max_seq_len", "128", "--tokens_per_block", "32"] + build)
    return tmp_path / "target"


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.id)
def test_the_fakes_refuse_it_with_the_text_the_rule_records(rule, tmp_path, fake):
    b = BREAK[rule.id]
    if rule.stage == "build":
        with pytest.raises(RuntimeError) as e:
            _engine(tmp_path, b["kv"], b["build"])
        assert str(e.value) == rule.error
        return
    engine = _engine(tmp_path, b["kv"], b["build"])
    config = fake.ExecutorConfig(max_beam_width=1, enable_chunked_context=b["chunked"],
                                 kv_cache_config=fake.KvCacheConfig(enable_block_reuse=b["reuse"], max_tokens=4096))
    with pytest.raises(RuntimeError) as e:
        fake.Executor(model_path=str(engine), model_type=fake.ModelType.DECODER_ONLY, executor_config=config)
    first = str(e.value).splitlines()[0]
    assert first.startswith(f"[TensorRT-LLM][ERROR] Assertion failed: {rule.error} (")
    assert "trtGptModelInflightBatching.cpp" in first


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.id)
def test_broken_rules_names_exactly_the_rule_of_each_breaking_setup(rule):
    b = BREAK[rule.id]
    paged = "enable" in b["build"][:2]
    setup = EngineSetup(role="target", kv_cache=b["kv"], paged_context_fmha=paged,
                        draft_tokens_external="draft_tokens_external" in b["build"], block_reuse=b["reuse"],
                        chunked_context=b["chunked"])
    assert broken_rules(setup) == [rule]


def test_an_fp16_setup_with_everything_on_breaks_nothing():
    assert broken_rules(EngineSetup("target", "fp16", True, True, True, True)) == []
    assert broken_rules(EngineSetup("target", "int8", False, False, False, False)) == []


def test_check_install_finds_each_message_where_0_12_keeps_it(tmp_path, capsys):
    pkg = tmp_path / "tensorrt_llm"
    (pkg / "libs").mkdir(parents=True)
    load = [r for r in RULES if r.stage == "load"]
    (pkg / "builder.py").write_text(f'        raise RuntimeError(\n            "{RULES[0].error}")\n')
    # a shared library: C strings among other bytes; the last load rule is missing from this one
    blob = b"\x7fELF\x00" + b"\x00".join(r.error.encode() for r in load[:-1]) + b"\x00\x01"
    (pkg / "libs" / "libtensorrt_llm.so").write_bytes(blob)
    found = {rule.id: state for rule, state in check_install(pkg)}
    assert found == {RULES[0].id: True, **{r.id: True for r in load[:-1]}, load[-1].id: False}
    assert main(["--check-install", "--package-dir", str(pkg)]) == 0
    out = capsys.readouterr().out
    assert f"ABSENT  {load[-1].id}" in out and out.count("present") == len(RULES) - 1
    (pkg / "libs" / "libtensorrt_llm.so").unlink()
    assert {state for rule, state in check_install(pkg) if rule.stage == "load"} == {None}
