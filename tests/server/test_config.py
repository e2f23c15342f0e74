"""One declaration of the daemon's options (server/config.py): both front ends, the same config; the
user's ORIN_LLM_THREADS read once, at the edge; the same refusals."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from orin_llm.errors import OrinError
from orin_llm.server import config as daemon_config
from orin_llm.server.config import DEFAULT_ENGINE, DaemonConfig, add_arguments, typer_command

ARGS = ["--engine", "engines/x", "--environment", "home.yaml", "--socket", "/tmp/p.sock", "--socket-group", "robots",
        "--tcp", "127.0.0.1:8000", "--queue-size", "3", "--grace-s", "2.5", "--device", "cpu",
        "--max-tokens-limit", "64", "--log-level", "warning", "--cpus", "0-1", "--nice", "5", "--threads", "2",
        "--prefill-chunk-tokens", "128", "--max-batch", "2", "--state-dir", "none", "--weights", "fp32"]


def from_typer(args: list[str], env: dict) -> DaemonConfig:
    got = []
    app = typer.Typer()
    app.command(name="serve")(typer_command(got.append, "Serve."))
    app.command(name="other")(lambda: None)  # two commands: typer keeps the "serve" name
    result = CliRunner().invoke(app, ["serve", *args], env=env)
    assert result.exit_code == 0, result.output
    return got[0]


def from_argparse(args: list[str], env: dict) -> DaemonConfig:
    p = argparse.ArgumentParser()
    add_arguments(p)
    return DaemonConfig.from_options(vars(p.parse_args(args)), environ=env)


def test_both_front_ends_fill_the_same_config(monkeypatch):
    for name in ("ORIN_LLM_THREADS", "STATE_DIRECTORY", "XDG_STATE_HOME"):  # the typer side reads this process's
        monkeypatch.delenv(name, raising=False)
    env = {"ORIN_LLM_THREADS": "7"}
    assert from_typer(ARGS, env) == from_argparse(ARGS, env) == DaemonConfig(
        engine=Path("engines/x"), environment=Path("home.yaml"), socket=Path("/tmp/p.sock"), socket_group="robots",
        tcp="127.0.0.1:8000", queue_size=3, grace_s=2.5, device="cpu", max_tokens_limit=64, log_level="warning",
        cpus="0-1", nice=5, threads=2, prefill_chunk_tokens=128, max_batch=2, state_dir="none", weights="fp32",
        env_threads=7)
    # and the same defaults (the daemon's --engine has none: it is required there)
    defaults = from_argparse(["--engine", str(DEFAULT_ENGINE)], {})
    assert from_typer([], {}) == defaults == DaemonConfig()


def test_every_field_is_an_option_with_help():
    names = {f.name for f in dataclasses.fields(DaemonConfig) if not f.metadata.get("edge")}
    assert names == daemon_config.OPTION_NAMES and len(names) == 28
    assert all(f.metadata["help"] for f in daemon_config.options())
    # the feature ladder's switch (backends/trtllm/features.py), from both front ends
    argv = ["--engine", "e", "--trtllm-features", "block_reuse,grammar"]
    assert from_argparse(argv, {}).trtllm_features == "block_reuse,grammar" == from_typer(argv[2:], {}).trtllm_features


def test_threads_from_the_option_else_the_environment_else_one_per_cpu():
    assert from_argparse(["--engine", "e", "--cpus", "0", "--threads", "3"], {"ORIN_LLM_THREADS": "5"}
                         ).placement_and_threads()[1] == 3
    assert from_argparse(["--engine", "e", "--cpus", "0"], {"ORIN_LLM_THREADS": "5"}).placement_and_threads()[1] == 5
    assert from_argparse(["--engine", "e", "--cpus", "0"], {}).placement_and_threads()[1] == 1
    with pytest.raises(OrinError, match="ORIN_LLM_THREADS='two': give a positive whole number"):
        from_argparse(["--engine", "e"], {"ORIN_LLM_THREADS": "two"})


def test_the_state_directory_is_kept_by_default_and_none_turns_it_off():
    """The default was off by accident once (`str(None).lower() == "none"`): unset means the default."""
    home = Path.home() / ".local" / "state" / "orin-llm"
    assert from_argparse(["--engine", "e"], {}).state_path == home
    assert from_argparse(["--engine", "e", "--state-dir", ""], {}).state_path == home  # a unit's unset variable
    assert from_argparse(["--engine", "e"], {"XDG_STATE_HOME": "/x"}).state_path == Path("/x/orin-llm")
    systemd = {"STATE_DIRECTORY": "/var/lib/orin-llm:/var/lib/other", "XDG_STATE_HOME": "/x"}
    assert from_argparse(["--engine", "e"], systemd).state_path == Path("/var/lib/orin-llm")  # StateDirectory=
    assert from_argparse(["--engine", "e", "--state-dir", "/srv/s"], systemd).state_path == Path("/srv/s")
    for off in ("none", "NONE", " None "):
        assert from_argparse(["--engine", "e", "--state-dir", off], systemd).state_path is None
    assert from_typer(["--state-dir", "none"], {}).state_path is None
    assert from_argparse(["--engine", "e", "--state-dir", "/srv/s"], {}).state_dir_given
    assert not from_argparse(["--engine", "e"], systemd).state_dir_given


@pytest.mark.parametrize("option, value, message", [
    ("queue_size", 0, "--queue-size must be ≥ 1, got 0"),
    ("grace_s", -1.0, "--grace-s must be ≥ 0, got -1"),
    ("max_tokens_limit", 0, "--max-tokens-limit must be ≥ 1, got 0"),
    ("threads", 0, "--threads must be ≥ 1, got 0"),
    ("prefill_chunk_tokens", 0, "--prefill-chunk-tokens must be ≥ 1, got 0"),
    ("max_batch", 0, "--max-batch must be ≥ 1, got 0"),
    ("save_idle_s", -1.0, "--save-idle-s must be ≥ 0, got -1"),
    ("log_level", "loud", "--log-level must be one of debug, info, warning, error, got 'loud'"),
])
def test_values_out_of_range_are_refused(option, value, message):
    config = DaemonConfig(**{option: value})
    with pytest.raises(OrinError) as e:
        config.check()
    assert str(e.value) == message
    DaemonConfig(log_level="INFO").check()  # case as the user likes it


def test_the_daemon_refuses_before_claiming_its_socket(tmp_path, capsys):
    from orin_llm.server.daemon import main

    socket = tmp_path / "p.sock"
    assert main(["--engine", "e", "--socket", str(socket), "--queue-size", "0"]) == 2
    assert "error: --queue-size must be ≥ 1, got 0" in capsys.readouterr().err and not socket.exists()


def test_threads_reach_torch_as_an_argument_not_through_the_environment(monkeypatch):
    import torch

    from orin_llm.runtime.host import apply_thread_setting

    before = torch.get_num_threads()
    monkeypatch.setenv("ORIN_LLM_THREADS", str(before + 1))
    try:
        apply_thread_setting(None)  # the variable is the edge's to read, not the runtime's
        assert torch.get_num_threads() == before
        apply_thread_setting(1)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
