"""`orin-llm memory` and `orin-llm build --dry-run` as the issues check them: the Orin profiles' numbers,
what each deployment gets under TensorRT-LLM 0.12's rules, and clear refusals."""

import json
from pathlib import Path

from .conftest import ROOT, orin_llm

ORIN = ROOT / "jetson" / "profiles" / "agx-orin-64gb.toml"
ORIN_INT8KV = ROOT / "jetson" / "profiles" / "agx-orin-64gb-int8kv.toml"


def variant(tmp_path: Path, old: str, new: str, base: Path = ORIN) -> Path:
    text = base.read_text()
    assert old in text
    text = text.replace(old, new).replace('config = "../models/', f'config = "{base.parent.parent}/models/')
    p = tmp_path / "variant.toml"
    p.write_text(text)
    return p


def test_orin_profile_plan_json():
    out = json.loads(orin_llm("memory", "--profile", str(ORIN), "--json").stdout)
    assert out["target"]["kv_bytes_per_token"] == 114688 and out["feasible"]
    assert out["draft"]["kv_bytes_per_token"] == 2 * 16 * 8 * 64 * 2
    assert out["target"]["max_kv_tokens"] == out["draft"]["max_kv_tokens"] == 2 * 4608 + 73728
    assert out["total_bytes"] + out["headroom_bytes"] == out["detail"]["device_bytes"]
    dep = out["deployment"]
    assert dep["kv_cache"] == "fp16" and dep["prefix_reuse"] is True and dep["chunked_context"] is True
    assert dep["speculation"] == ["none", "lookup", "draft_model", "combined"] and dep["refused"] is None
    assert out["warm_homes"] == 73728 // 4096  # homes are prompts: at most max_input_len = 4096 tokens


def test_int8kv_profile_plan_names_the_rules_that_take_reuse_and_speculation():
    out = json.loads(orin_llm("memory", "--profile", str(ORIN_INT8KV), "--json").stdout)
    assert out["feasible"] and out["draft"] is None and out["target"]["kv_bytes_per_token"] == 57344
    dep = out["deployment"]
    assert (dep["kv_cache"], dep["prefix_reuse"], dep["chunked_context"], dep["speculation"]) == \
        ("int8", False, False, ["none"])
    assert list(dep["engines"]) == ["target"] and dep["engines"]["target"]["draft_tokens_external"] is False
    table = orin_llm("memory", "--profile", str(ORIN_INT8KV)).stdout
    assert "target KV int8 · prefix reuse no · chunked context no · speculation none" in table
    for rule in ("int8-kv-paged-context-fmha", "block-reuse-needs-paged-context-fmha",
                 "chunked-context-needs-paged-context-fmha", "draft-target-needs-block-reuse"):
        assert f"rule {rule}" in table


def test_dry_runs_say_what_each_engine_gets(tmp_path):
    orin = orin_llm("build", "--profile", str(ORIN), "--dry-run", "--out", str(tmp_path / "a")).stdout
    assert orin.count("--use_paged_context_fmha enable") == 2  # the target and the draft
    assert "--speculative_decoding_mode draft_tokens_external" in orin
    assert "target KV fp16 · prefix reuse yes · chunked context yes · speculation none, lookup, draft_model, " \
           "combined" in orin
    assert "draft  KV fp16 · prefix reuse yes · chunked context yes · drafts for draft_model, combined" in orin
    int8 = orin_llm("build", "--profile", str(ORIN_INT8KV), "--dry-run", "--out", str(tmp_path / "b")).stdout
    assert "--speculative_decoding_mode" not in int8 and "draft-checkpoint" not in int8
    assert "--use_paged_context_fmha disable" in int8 and "--kv_cache_dtype int8" in int8
    assert "no prefix_reuse: rule int8-kv-paged-context-fmha" in int8


def test_int8_kv_with_prefix_reuse_is_refused_naming_the_rule(tmp_path):
    p = variant(tmp_path, 'kv_cache = "fp16"          # 114,688', 'kv_cache = "int8"          # 114,688')
    proc = orin_llm("memory", "--profile", str(p), "--json", check=False)
    assert proc.returncode == 2
    assert json.loads(proc.stdout)["target"]["kv_bytes_per_token"] == 57344  # the plan is still printed
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and "rule int8-kv-paged-context-fmha" in err[0]
    assert 'kv_cache = "fp16" under [target]' in err[0]
    build = orin_llm("build", "--profile", str(p), "--dry-run", "--out", str(tmp_path / "e"), check=False)
    assert build.returncode == 2 and "rule int8-kv-paged-context-fmha" in build.stderr
    assert "trtllm-build" not in build.stdout  # refused before a command is printed


def test_policy_that_eats_the_device_is_refused(tmp_path):
    p = variant(tmp_path, "reserve_gib = 6.0", "reserve_gib = 60.0")
    proc = orin_llm("memory", "--profile", str(p), check=False)
    assert proc.returncode == 2
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and "does not fit" in err[0] and "policy 60.00 GiB" in err[0]
