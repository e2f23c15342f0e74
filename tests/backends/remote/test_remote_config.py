"""`--remote` and its options, through both front ends (server/config.py): unsafe URLs are refused before
the daemon claims its socket; the token comes from a file or the environment, never the command line."""

from __future__ import annotations

import argparse

import pytest

from orin_llm.errors import OrinError
from orin_llm.server.config import DaemonConfig, add_arguments


def config(args: list[str], env: dict) -> DaemonConfig:
    p = argparse.ArgumentParser()
    add_arguments(p)
    return DaemonConfig.from_options(vars(p.parse_args(["--engine", "e", *args])), env)


def test_no_remote_unless_configured():
    c = config([], {"ORIN_LLM_REMOTE_TOKEN": "t"})
    c.check()
    assert c.remote_settings() is None


def test_the_token_file_wins_over_the_environment(tmp_path):
    (tmp_path / "token").write_text("from-file\n")
    args = ["--remote", "https://site:8000", "--remote-first-token-share", "0.3", "--remote-timeout-s", "4"]
    env = {"ORIN_LLM_REMOTE_TOKEN": "env"}
    s = config([*args, "--remote-token-file", str(tmp_path / "token")], env).remote_settings()
    assert (s.token, s.first_token_share, s.timeout_s) == ("from-file", 0.3, 4.0)
    assert config(args, {"ORIN_LLM_REMOTE_TOKEN": "env"}).remote_settings().token == "env"


@pytest.mark.parametrize("args,why", [
    (["--remote", "http://10.0.0.5:8000"], "must be https"),
    (["--remote", "https://10.0.0.5:8000"], "needs a bearer token"),
    (["--remote", "http://127.0.0.1:8000", "--remote-first-token-share", "1.5"], r"in \(0, 1\]"),
    (["--remote", "https://10.0.0.5:8000", "--remote-token-file", "/nonexistent/token"], "No such file"),
])
def test_unsafe_or_broken_remotes_are_refused_at_check(args, why):
    with pytest.raises(OrinError, match=why):
        config(args, {}).check()
