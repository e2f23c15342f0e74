"""The state directory (server/state_dir.py): on by default, one daemon each, an unusable one refused
when it was given and reported when it was the default."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from orin_llm.errors import OrinError
from orin_llm.server.config import DaemonConfig
from orin_llm.server.state_dir import open_state_dir


def config(*args: str, **environ: str) -> DaemonConfig:
    values = {"state_dir": args[0]} if args else {}
    return DaemonConfig.from_options(values, environ=environ)


def test_the_default_directory_is_made_locked_and_reported(tmp_path):
    kept = open_state_dir(config(XDG_STATE_HOME=str(tmp_path)))
    assert kept.path == tmp_path / "orin-llm" and (tmp_path / "orin-llm" / "homes").is_dir()
    assert (tmp_path / "orin-llm" / "lock").read_text() == f"{os.getpid()}\n"
    assert kept.report() == {"dir": str(tmp_path / "orin-llm"), "kept": True, "histories": None,
                             "homes_restored": [], "homes_skipped": []}
    os.close(kept.lock_fd)


def test_none_keeps_nothing_and_says_what_the_robot_must_send_again(tmp_path):
    kept = open_state_dir(config("none", XDG_STATE_HOME=str(tmp_path)))
    assert kept.path is None and list(tmp_path.iterdir()) == []
    report = kept.report()
    assert report["kept"] is False and report["why"].startswith("--state-dir none: nothing is kept")
    assert "PUT and PATCH them again" in report["why"]


def test_a_second_daemon_on_a_given_directory_is_refused_on_the_default_one_warned(tmp_path):
    first = open_state_dir(config(str(tmp_path / "s")))
    try:
        with pytest.raises(OrinError) as e:
            open_state_dir(config(str(tmp_path / "s")))
        assert str(e.value) == (f"--state-dir {tmp_path / 's'}: another daemon (pid {os.getpid()}) keeps its state "
                                "there; give another directory, or --state-dir none to keep nothing")
        second = open_state_dir(config(STATE_DIRECTORY=str(tmp_path / "s")))  # the default: it serves, keeping nothing
        assert second.path is None and "another daemon" in second.why_off and "nothing is kept" in second.why_off
    finally:
        os.close(first.lock_fd)
    again = open_state_dir(config(str(tmp_path / "s")))
    assert again.path == tmp_path / "s"  # free again
    os.close(again.lock_fd)


def test_the_lock_goes_with_a_killed_daemon(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys, time; fd = os.open(sys.argv[1], "
                               "os.O_RDWR | os.O_CREAT); fcntl.flock(fd, fcntl.LOCK_EX); print(1, flush=True); "
                               "time.sleep(600)", str(tmp_path / "lock")], stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline()
        with pytest.raises(OrinError, match="another daemon"):
            open_state_dir(config(str(tmp_path)))
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    kept = open_state_dir(config(str(tmp_path)))
    assert kept.path == tmp_path
    os.close(kept.lock_fd)


def test_a_directory_that_cannot_be_made_is_refused_when_given_and_reported_when_the_default(tmp_path):
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(OrinError, match=f"--state-dir {tmp_path / 'file' / 's'}: .*; give another directory"):
        open_state_dir(config(str(tmp_path / "file" / "s")))
    kept = open_state_dir(config(XDG_STATE_HOME=str(tmp_path / "file")))
    assert kept.path is None and kept.why_off.startswith(f"the default state directory {tmp_path / 'file'}")
    assert kept.report()["kept"] is False
