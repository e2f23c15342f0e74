"""`orin-llm plan --socket` (server/cli.plan_command) against the shared daemon."""

from __future__ import annotations

import json

import pytest

from orin_llm.errors import OrinError
from orin_llm.server.cli import plan_command

from ..conftest import orin_llm
from .conftest import short_dir

pytestmark = pytest.mark.full

TASK = "Open the fridge."


def plan(daemon, **kw):
    # goal "none": the model's own plan, decoded and streamed as it comes (these tests are about the CLI's output;
    # a plain request would read a goal first and may answer from the search)
    opts = dict(observations=None, as_json=False, stream=False, max_tokens=4, temperature=None, seed=None,
                timeout_s=60, plan_opts={"goal": "none"})
    plan_command(TASK, daemon.socket, **{**opts, **kw})


def run_cli(*args: str, check: bool = True):
    return orin_llm(*args, check=check, timeout=300)


def test_plan_prints_the_plan_and_a_summary(daemon, client, capsys):
    expected = client.plan(TASK, max_tokens=16, goal="none")
    assert expected["plan"]  # at least one whole step
    plan(daemon, max_tokens=16)
    out, err = capsys.readouterr()
    assert out.strip() == expected["plan"] and "prompt tokens" in err
    assert "queued " in err and "since arrival: TTFT" in err  # the wait for the engine is printed
    plan(daemon, stream=True, max_tokens=16)
    out, err = capsys.readouterr()  # the text as decoded: a cut plan's answer ends at its last whole step
    assert out.strip().startswith(expected["plan"]) and f"environment v{expected['environment_version']}" in err


def test_plan_speculation(daemon, capsys):
    plan(daemon, as_json=True, speculation="none")
    assert json.loads(capsys.readouterr().out)["speculation"]["drafter"] == "none"
    plan(daemon, as_json=True, speculation="lookup")
    assert json.loads(capsys.readouterr().out)["speculation"]["drafter"] == "lookup"
    with pytest.raises(OrinError, match="speculation 'medusa' is not available"):
        plan(daemon, speculation="medusa")
    proc = run_cli("plan", "--socket", str(daemon.socket), "--speculation", "none", "--json", "--max-tokens", "3",
                   TASK)
    assert json.loads(proc.stdout)["speculation"]["drafter"] == "none"


def test_plan_json(daemon, client, capsys):
    plan(daemon, as_json=True, observations=["the fridge is closed"], max_tokens=16)
    result = json.loads(capsys.readouterr().out)
    assert result["steps"] and result["timings"]["completion_tokens"] <= 16
    plan(daemon, as_json=True, stream=True)
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert all("delta" in e for e in lines[:-1]) and "steps" in lines[-1]


def test_plan_errors_are_one_line(daemon):
    with pytest.raises(OrinError, match="max_tokens must be at most"):
        plan(daemon, max_tokens=10**6)
    with pytest.raises(OrinError, match="no planner daemon at"):
        plan_command(TASK, short_dir() / "nobody.sock", None, False, False, 4, None, None, 5)


def test_plan_environment_without_engine_points_at_environment_push(daemon, tmp_path):
    proc = run_cli("plan", "--socket", str(daemon.socket), "--environment", "home.yaml", TASK, check=False)
    assert proc.returncode == 2
    assert "orin-llm environment push home.yaml" in proc.stderr and "PUT" not in proc.stderr


def test_environment_show_and_push(capped_daemon, tmp_path):
    """`orin-llm environment show` prints the home as YAML; `push FILE` replaces it, YAML or JSON,
    with --if-match refusing a stale version."""
    import yaml

    from orin_llm.planning.home import EXAMPLE_HOME_PATH, load_environment

    sock = str(capped_daemon.socket)
    shown = run_cli("environment", "show", "--socket", sock)
    home, version = yaml.safe_load(shown.stdout), int(shown.stderr.split("version ")[-1])
    assert home["name"] == capped_daemon.client().health()["environment"]["name"]
    home["name"] = "pushed_home"
    (tmp_path / "home.yaml").write_text(yaml.safe_dump(home))
    pushed = run_cli("environment", "push", str(tmp_path / "home.yaml"), "--socket", sock, "--if-match", str(version))
    assert f"environment 'pushed_home' is now version {version + 1}" in pushed.stdout
    stale = run_cli("environment", "push", str(tmp_path / "home.yaml"), "--socket", sock, "--if-match", str(version),
                    check=False)
    assert stale.returncode == 2 and f"at version {version + 1}, not {version}" in stale.stderr
    assert "nothing was changed" in stale.stderr
    shown = run_cli("environment", "show", "--socket", sock, "--json")
    assert json.loads(shown.stdout)["name"] == "pushed_home" and f"version {version + 1}" in shown.stderr
    (tmp_path / "home.json").write_text(json.dumps(load_environment(EXAMPLE_HOME_PATH).model_dump(mode="json")))
    pushed = run_cli("environment", "push", str(tmp_path / "home.json"), "--socket", sock)
    assert f"environment 'example_home' is now version {version + 2}" in pushed.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: h\nrooms: [\n")
    proc = run_cli("environment", "push", str(bad), "--socket", sock, check=False)
    assert proc.returncode == 2 and f"{bad}: YAML syntax error" in proc.stderr  # checked before it is sent


def test_plan_with_a_goal_says_whether_it_is_reached_and_what_is_missing(capped_daemon):
    """--goal (repeatable) and --feasibility reach the daemon; the summary says what the simulation found."""
    sock = str(capped_daemon.socket)
    proc = run_cli("plan", "--socket", sock, "--goal", "at(milk, coffee_table)", "--goal", "robot_at(coffee_table)",
                   "--feasibility", "report", "Bring the milk to the coffee table.")
    assert "-- the goal given reached (plan from the " in proc.stderr, proc.stderr
    answer = json.loads(run_cli("plan", "--socket", sock, "--goal", "on(tv)", "--json", "--state",
                                '{"robot_at": "sofa", "on": {"tv": false}}', "Switch on the tv.").stdout)
    assert answer["goal_reached"] is True and answer["final_state"]["on"]["tv"] is True
    bad = run_cli("plan", "--socket", sock, "--feasibility", "strict", TASK, check=False)
    assert bad.returncode == 2 and "--feasibility 'strict': choose enforce, report or off" in bad.stderr
    bad = run_cli("plan", "--socket", sock, "--goal", "at(mug, garage)", TASK, check=False)
    assert bad.returncode == 2 and "'garage' is not a room or place of this home" in bad.stderr
    bad = run_cli("plan", "--socket", sock, "--goal", "holding(mug)", "--goal", "at(mug, sink)", TASK, check=False)
    assert bad.returncode == 2 and "holding(mug) and at(mug, sink) contradict each other" in bad.stderr


def test_state_show_and_update(capped_daemon):
    sock = str(capped_daemon.socket)
    before = json.loads(run_cli("state", "show", "--socket", sock).stdout)
    proc = run_cli("state", "update", "--socket", sock, '{"robot_at": "sofa", "holding": "remote"}')
    after = json.loads(proc.stdout)
    assert (after["robot_at"], after["holding"]) == ("sofa", "remote")
    assert "tokens computed for the change" in proc.stderr
    assert json.loads(run_cli("state", "show", "--socket", sock).stdout) == after
    bad = run_cli("state", "update", "--socket", sock, '{"holding": "unicorn"}', check=False)
    assert bad.returncode == 2 and "'unicorn' is not an object of this home" in bad.stderr
    assert "nothing was changed" in bad.stderr
    bad = run_cli("state", "show", "--socket", sock, "--environment", "attic", check=False)
    assert bad.returncode == 2 and "no environment named 'attic'" in bad.stderr
    for command in (("state", "show"), ("state", "update", '{"robot_at": "sofa"}')):  # a name no route carries
        bad = run_cli(*command, "--socket", sock, "--environment", "flat/2", check=False)
        assert bad.returncode == 2 and "environment name 'flat/2': use 1 to 128 letters" in bad.stderr, bad.stderr
    restore = {k: before[k] for k in ("robot_at", "holding", "object_at", "open", "on", "said", "done")}
    restore["object_at"] = {**{o: None for o in after["object_at"]}, **before["object_at"]}
    run_cli("state", "update", "--socket", sock, json.dumps(restore))
    assert json.loads(run_cli("state", "show", "--socket", sock).stdout) == before
