"""Start and stop: the socket file (stale, live, mode, group), sd_notify, a full queue, SIGTERM."""

from __future__ import annotations

import grp
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import time

import pytest

from orin_llm.client import PlannerClient, PlannerError, PlannerUnavailable

from .conftest import ROOT, short_dir

pytestmark = pytest.mark.full

LONG = "Describe, step by step and in great detail, how to tidy up every room of the home."
GRACE_S = 3.0


def run_daemon(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orin_llm.server.daemon", *args], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)


def test_a_second_daemon_on_a_live_socket_is_refused(daemon, engine_dir, client):
    before = os.stat(daemon.socket)
    proc = run_daemon("--engine", str(engine_dir), "--socket", str(daemon.socket))
    assert proc.returncode == 2
    assert f"another daemon is already listening on {daemon.socket}" in proc.stderr
    after = os.stat(daemon.socket)
    assert (after.st_ino, after.st_dev) == (before.st_ino, before.st_dev)  # untouched
    assert client.health()["ready"]


def test_a_file_that_is_not_a_socket_is_left_alone(engine_dir):
    path = short_dir() / "planner.sock"
    path.write_text("precious")
    proc = run_daemon("--engine", str(engine_dir), "--socket", str(path))
    assert proc.returncode == 2 and "is not a socket" in proc.stderr
    assert path.read_text() == "precious"


def test_client_of_a_daemon_that_is_not_there():
    path = short_dir() / "planner.sock"
    with pytest.raises(PlannerUnavailable, match=f"no planner daemon at {path}"):
        PlannerClient(path).health()


def test_stale_socket_mode_notify_full_queue_and_sigterm(start_daemon):
    where = short_dir()
    path = where / "planner.sock"
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))  # a crashed daemon's leftover: the file is there, nobody listens
    stale.close()
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(where / "notify"))
    notify.settimeout(30)
    group = grp.getgrgid(os.getgid()).gr_name
    # one request decodes at a time (--max-batch 1), so the second waits in the queue of 1
    d = start_daemon("--queue-size", "1", "--max-batch", "1", "--grace-s", str(GRACE_S), "--socket-group", group,
                     socket=path, env={"NOTIFY_SOCKET": str(where / "notify")})

    assert notify.recv(100) == b"READY=1"
    st = os.stat(path)
    assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o660 and st.st_gid == os.getgid()
    assert "removing stale socket" in d.log()

    # one request streaming, one queued: the third is turned away with Retry-After
    streamed: list = []
    first_delta = threading.Event()

    def stream() -> None:
        try:
            for event in d.client().plan_stream(LONG, max_tokens=1000, constrained=False):
                streamed.append(event)
                first_delta.set()
        except PlannerError as e:
            streamed.append(e)

    queued: list = []

    def wait_in_queue() -> None:
        try:
            queued.append(d.client().plan("Open the fridge.", max_tokens=2, goal="none"))
        except PlannerError as e:
            queued.append(e)

    threads = [threading.Thread(target=stream), threading.Thread(target=wait_in_queue)]
    threads[0].start()
    assert first_delta.wait(60)
    threads[1].start()
    with d.client() as c:
        end = time.monotonic() + 30
        while c.health()["queue"]["depth"] < 1 and time.monotonic() < end:
            time.sleep(0.05)
        with pytest.raises(PlannerError, match="busy") as err:
            c.plan("Open the fridge.", max_tokens=2, goal="none")
        assert err.value.status == 503

    # SIGTERM mid-stream: the stream ends (here with an error event), the process exits 0 in time
    t0 = time.monotonic()
    d.proc.send_signal(signal.SIGTERM)
    assert d.proc.wait(GRACE_S + 10) == 0, d.log()[-2000:]
    assert time.monotonic() - t0 < GRACE_S + 5
    for t in threads:
        t.join(10)
    assert isinstance(streamed[-1], PlannerError) and "shutting down" in streamed[-1].message
    assert len(streamed) > 1  # some deltas came before
    assert isinstance(queued[0], PlannerError) and "shutting down" in queued[0].message
    assert not path.exists()
    assert notify.recv(100) == b"STOPPING=1"
    notify.close()
    with pytest.raises(PlannerUnavailable):
        PlannerClient(path).health()
