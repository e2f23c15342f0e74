"""`orin-llm plan --socket` (server/cli.plan_command) against the shared daemon."""

from __future__ import annotations

import json

import pytest

from orin_llm.errors import OrinError
from orin_llm.server.cli import plan_command

from .conftest import short_dir

TASK = "Open the fridge."


def plan(daemon, **kw):
    opts = dict(observations=None, as_json=False, stream=False, max_tokens=4, temperature=None, seed=None,
                timeout_s=60)
    plan_command(TASK, daemon.socket, **{**opts, **kw})


def test_plan_prints_the_plan_and_a_summary(daemon, client, capsys):
    expected = client.plan(TASK, max_tokens=4)
    plan(daemon)
    out, err = capsys.readouterr()
    assert out.strip() == expected["plan"] and "prompt tokens" in err
    plan(daemon, stream=True)
    out, err = capsys.readouterr()
    assert out.strip() == expected["plan"] and f"environment v{expected['environment_version']}" in err


def test_plan_json(daemon, client, capsys):
    plan(daemon, as_json=True, observations=["the fridge is closed"])
    result = json.loads(capsys.readouterr().out)
    assert result["plan"] and result["timings"]["completion_tokens"] <= 4
    plan(daemon, as_json=True, stream=True)
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert all("delta" in e for e in lines[:-1]) and "steps" in lines[-1]


def test_plan_errors_are_one_line(daemon):
    with pytest.raises(OrinError, match="max_tokens must be at most"):
        plan(daemon, max_tokens=10**6)
    with pytest.raises(OrinError, match="no planner daemon at"):
        plan_command(TASK, short_dir() / "nobody.sock", None, False, False, 4, None, None, 5)
