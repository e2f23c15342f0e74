"""The console commands, run as a user would (subprocesses, real engine)."""

import json
import re

import pytest

from .conftest import orin_llm


@pytest.mark.full
def test_generate_prints_text_then_timings(engine_dir):
    proc = orin_llm("generate", "--engine", str(engine_dir), "--max-tokens", "12", "Name a fruit.")
    assert proc.stdout.strip() and "loading" not in proc.stdout
    assert "completion tokens" in proc.stderr and "TTFT" in proc.stderr
    assert proc.stderr.startswith(f"loading {engine_dir} ...\n") and said(proc.stderr, f"loading {engine_dir}")


def said(stderr: str, what: str) -> bool:
    """The in-process commands load for seconds: stderr says `what ...`, then how long it took."""
    lines = stderr.splitlines()
    return any(first == f"{what} ..." and re.fullmatch(rf"{re.escape(what)}: done in \d+\.\ds", then) is not None
               for first, then in zip(lines, lines[1:], strict=False))


@pytest.mark.full
def test_generate_json(engine_dir):
    proc = orin_llm("generate", "--engine", str(engine_dir), "--json", "--max-tokens", "9", "Hello!")
    out = json.loads(proc.stdout)  # stdout is the JSON alone: the loading lines are on stderr
    assert said(proc.stderr, f"loading {engine_dir}")
    assert out["engine"] == "smollm2-135m-demo" and out["text"]
    assert out["timings"]["completion_tokens"] <= 9 and out["timings"]["prompt_tokens"] > 5


@pytest.mark.full
def test_plan_json_on_the_example_home(engine_dir):
    task = "Bring the mug from the kitchen to the sofa."
    proc = orin_llm("plan", "--engine", str(engine_dir), "--json", task)
    out = json.loads(proc.stdout)
    # the plain request reads its goal in the task first (issue #43), and says so
    assert out["environment"] == "example_home" and out["plan"] and out["timings"]["goal_reading_ms"] > 0
    assert said(proc.stderr, f"loading {engine_dir}") and said(proc.stderr, "pinning the home 'example_home'")
    # the few-shot prefix makes even the 135M model answer in action calls
    assert out["steps"] and {s["action"] for s in out["steps"]} <= {
        "go_to", "pick", "place", "open", "close", "switch_on", "switch_off", "say"}


@pytest.mark.full
def test_plan_in_process_with_a_goal_says_whether_it_is_reached(engine_dir):
    proc = orin_llm("plan", "--engine", str(engine_dir), "--json", "--goal", "at(milk, coffee_table)",
                    "--deadline-ms", "120000", "Bring the milk from the kitchen to the coffee table.")
    out = json.loads(proc.stdout)
    assert out["goal_reached"] is True and out["final_state"]["object_at"]["milk"] == "coffee_table"
    assert out["feasibility"] == "enforce" and out["violations"] == []
    assert out["search"]["source"] in ("model", "search")


def test_plan_and_state_options_are_checked_before_anything_is_sent(tmp_path):
    nobody = str(tmp_path / "nobody.sock")  # a typo is one line, whether or not a daemon is there
    proc = orin_llm("plan", "--socket", nobody, "--feasibility", "strict", "Open the fridge.", check=False)
    assert proc.returncode == 2 and "--feasibility 'strict': choose enforce, report or off" in proc.stderr
    proc = orin_llm("plan", "--socket", nobody, "--state", "robot_at=kitchen", "Open the fridge.", check=False)
    assert proc.returncode == 2 and "--state: not JSON" in proc.stderr
    proc = orin_llm("state", "update", "--socket", nobody, '["kitchen"]', check=False)
    assert proc.returncode == 2 and "the state update: must be a JSON object" in proc.stderr
    proc = orin_llm("state", "show", "--socket", nobody, check=False)
    assert proc.returncode == 2 and "no planner daemon at" in proc.stderr


def test_build_needs_exactly_one_source(tmp_path):
    proc = orin_llm("build", "--out", str(tmp_path / "x"), check=False)
    assert proc.returncode == 2 and "exactly one of --profile FILE or --embedded" in proc.stderr


@pytest.mark.full
def test_build_refuses_to_overwrite(engine_dir):
    proc = orin_llm("build", "--embedded", "--out", str(engine_dir), check=False)
    assert proc.returncode == 2 and "--force" in proc.stderr


def test_missing_engine_says_how_to_build(tmp_path):
    proc = orin_llm("generate", "--engine", str(tmp_path / "none"), "hi", check=False)
    assert proc.returncode == 2 and "orin-llm build --embedded" in proc.stderr
    # the manifest is read before the load is announced: a missing engine is one line, no "loading ..."
    assert proc.stderr.startswith("error: engine dir ") and len(proc.stderr.strip().splitlines()) == 1


def all_commands():
    """(name, click command) for every command and subcommand of the real CLI."""
    import typer

    from orin_llm.cli import app

    todo = [("orin-llm", typer.main.get_command(app))]
    while todo:
        name, cmd = todo.pop()
        yield name, cmd
        todo.extend((f"{name} {sub}", c) for sub, c in getattr(cmd, "commands", {}).items())


def test_flags_read_as_flags_and_every_option_says_what_it_does():
    import click

    seen = set()
    for name, cmd in all_commands():
        seen.add(name)
        ctx = click.Context(cmd, info_name=name)
        text = cmd.get_help(ctx)
        assert "<bool>" not in text and "BOOLEAN" not in text, (name, text)
        for param in cmd.get_params(ctx):
            if isinstance(param, click.Option):
                assert param.help, f"{name} {param.opts[0]} has no help text"
                if param.is_flag:  # a flag shows no value placeholder in the help
                    record = param.get_help_record(ctx)[0]
                    assert record.split() == [o for o in record.split() if o.startswith("-") or o == "/"], record
    assert {"orin-llm plan", "orin-llm generate", "orin-llm environment push", "orin-llm environment show",
            "orin-llm state show", "orin-llm state update"} <= seen


def test_help_as_a_user_sees_it():
    proc = orin_llm("build", "--help")
    assert "--embedded " in proc.stdout and "<bool>" not in proc.stdout
    for command in ("plan", "generate"):
        assert "--speculation" in orin_llm(command, "--help").stdout


@pytest.mark.full
def test_generate_speculation(engine_dir):
    for mode in ("none", "lookup", "draft_model"):
        proc = orin_llm("generate", "--engine", str(engine_dir), "--json", "--max-tokens", "6", "--speculation", mode,
                        "Name a fruit.")
        assert json.loads(proc.stdout)["speculation"]["drafter"] == mode
    proc = orin_llm("generate", "--engine", str(engine_dir), "--speculation", "medusa", "hi", check=False)
    assert proc.returncode == 2 and "speculation 'medusa' is not available" in proc.stderr


@pytest.mark.full
def test_calibrate_shows_progress_prompt_by_prompt(engine_dir, tmp_path):
    import shutil

    copy = tmp_path / "engine"
    shutil.copytree(engine_dir, copy)
    proc = orin_llm("calibrate", "--engine", str(copy), "--limit", "3")
    lines = [line.strip() for line in proc.stderr.splitlines() if "calibrating" in line]
    # target and draft, 3 prompts each (one per home); the last line has the total time
    assert lines and lines[-1].startswith("calibrating (target and draft, 3 homes): 6/6 prompts, ")
    assert "target: target/kv_scales.safetensors" in proc.stdout
