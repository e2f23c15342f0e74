"""The console commands, run as a user would (subprocesses, real engine)."""

import json

from .conftest import orin_llm


def test_generate_prints_text_then_timings(engine_dir):
    proc = orin_llm("generate", "--engine", str(engine_dir), "--max-tokens", "12", "Name a fruit.")
    assert proc.stdout.strip()
    assert "completion tokens" in proc.stderr and "TTFT" in proc.stderr


def test_generate_json(engine_dir):
    proc = orin_llm("generate", "--engine", str(engine_dir), "--json", "--max-tokens", "9", "Hello!")
    out = json.loads(proc.stdout)
    assert out["engine"] == "smollm2-135m-demo" and out["text"]
    assert out["timings"]["completion_tokens"] <= 9 and out["timings"]["prompt_tokens"] > 5


def test_plan_json_on_the_example_home(engine_dir):
    task = "Bring the mug from the kitchen to the sofa."
    proc = orin_llm("plan", "--engine", str(engine_dir), "--json", task)
    out = json.loads(proc.stdout)
    assert out["environment"] == "example_home" and out["plan"]
    # the few-shot prefix makes even the 135M model answer in action calls
    assert out["steps"] and {s["action"] for s in out["steps"]} <= {
        "go_to", "pick", "place", "open", "close", "switch_on", "switch_off", "say"}


def test_build_needs_exactly_one_source(tmp_path):
    proc = orin_llm("build", "--out", str(tmp_path / "x"), check=False)
    assert proc.returncode == 2 and "exactly one of --profile FILE or --embedded" in proc.stderr


def test_build_refuses_to_overwrite(engine_dir):
    proc = orin_llm("build", "--embedded", "--out", str(engine_dir), check=False)
    assert proc.returncode == 2 and "--force" in proc.stderr


def test_missing_engine_says_how_to_build(tmp_path):
    proc = orin_llm("generate", "--engine", str(tmp_path / "none"), "hi", check=False)
    assert proc.returncode == 2 and "orin-llm build --embedded" in proc.stderr
