"""Real daemons on real sockets: `python -m orin_llm.server.daemon` in a subprocess.

One daemon serves the whole session for tests that leave its state as they found it; tests that
change the environment, kill the daemon or need other options start their own (engine load and
prefill take a few seconds each).
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

import httpx
import pytest

from orin_llm.client import PlannerClient, PlannerError

ROOT = Path(__file__).resolve().parents[2]


_SHORT_DIRS: list[Path] = []


def short_dir() -> Path:
    """A socket path must fit in 108 bytes: pytest's tmp_path can be longer. Removed when the test
    process ends (pytest's own tmp_path is pruned by pytest; these are not, and a docs block can
    leave an 800 MB policy export in one)."""
    where = Path(tempfile.mkdtemp(prefix="orin-", dir="/tmp"))
    if not _SHORT_DIRS:
        atexit.register(lambda: [shutil.rmtree(d, ignore_errors=True) for d in _SHORT_DIRS])
    _SHORT_DIRS.append(where)
    return where


class Daemon:
    url: Optional[str] = None  # with --tcp

    def __init__(self, engine_dir: Path, socket: Path, *args: str, env: Optional[dict] = None):
        self.socket = socket
        self.log_path = socket.parent / "daemon.log"
        self._log = open(self.log_path, "wb")
        base = {k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET", "ORIN_LLM_SOCKET")}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "orin_llm.server.daemon", "--engine", str(engine_dir), "--socket", str(socket),
             "--device", "cpu", *(() if "--state-dir" in args else ("--state-dir", str(socket.parent / "state"))),
             *args],
            stdout=self._log, stderr=subprocess.STDOUT, cwd=ROOT,
            env={**base, "PYTHONUNBUFFERED": "1", **(env or {})})

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout_s: float = 180) -> Daemon:
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise AssertionError(f"daemon exited {self.proc.returncode}:\n{self.log()[-3000:]}")
            try:
                with PlannerClient(self.socket, timeout_s=2) as c:
                    if c.health()["ready"]:
                        return self
            except (PlannerError, httpx.HTTPError):
                pass
            time.sleep(0.2)
        raise AssertionError(f"daemon not ready after {timeout_s} s:\n{self.log()[-3000:]}")

    def client(self, timeout_s: float = 120) -> PlannerClient:
        return PlannerClient(self.socket, timeout_s=timeout_s)

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 60) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError(f"daemon ignored signal {sig} for {timeout_s} s:\n{self.log()[-3000:]}"
                                     ) from None
        self._log.close()
        return self.proc.returncode


@pytest.fixture(scope="session")
def start_daemon(engine_dir):
    """start_daemon(*args, socket=None, env=None) -> a ready Daemon, stopped at the end of the session."""
    started: list[Daemon] = []
    dirs: list[Path] = []

    def start(*args: str, socket: Optional[Path] = None, env: Optional[dict] = None, wait: bool = True) -> Daemon:
        if socket is None:
            dirs.append(short_dir())
            socket = dirs[-1] / "planner.sock"
        d = Daemon(engine_dir, socket, *args, env=env)
        started.append(d)
        return d.wait_ready() if wait else d

    yield start
    for d in started:
        d.stop()
    for p in dirs:
        shutil.rmtree(p, ignore_errors=True)


@pytest.fixture(scope="session")
def daemon(start_daemon) -> Daemon:
    """The shared daemon: example home, default limits, room for the concurrency test's clients."""
    return start_daemon("--queue-size", "32")


@pytest.fixture(scope="session")
def capped_daemon(start_daemon) -> Daemon:
    """A second one for tests that change its environment or fuzz it: max_tokens capped at 8 so
    that every generated request is quick, and reachable over TCP on the loopback (schemathesis)."""
    port = free_port()
    d = start_daemon("--tcp", f"127.0.0.1:{port}", "--max-tokens-limit", "8", "--queue-size", "32")
    d.url = f"http://127.0.0.1:{port}"
    return d


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def client(daemon):
    with daemon.client() as c:
        yield c

