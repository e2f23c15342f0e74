"""A fresh daemon answers /health within a second of binding, while its engine loads; `orin-llm health
--wait N` waits N seconds whatever its first attempts get; a failed load still exits non-zero."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest

from orin_llm.client import PlannerClient, PlannerError, PlannerUnavailable

from .conftest import ROOT, short_dir


def daemon(engine: str, socket, *args: str) -> subprocess.Popen:
    """The daemon, its output in daemon.log beside the socket (log(socket) reads it)."""
    with open(socket.parent / "daemon.log", "wb") as out:
        return subprocess.Popen([sys.executable, "-m", "orin_llm.server.daemon", "--engine", engine, "--socket",
                                 str(socket), "--device", "cpu", "--state-dir", "none", *args],
                                stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)


def log(socket) -> str:
    return (socket.parent / "daemon.log").read_text(errors="replace")[-3000:]


def first_health(socket, proc: subprocess.Popen, timeout_s: float = 60) -> tuple[float, dict]:
    """Seconds from the socket file's appearance (the bind) to the first /health answer, and it."""
    end = time.monotonic() + timeout_s
    while not socket.exists():
        assert proc.poll() is None and time.monotonic() < end, log(socket)
        time.sleep(0.005)
    bound = time.monotonic()
    while True:
        try:
            with PlannerClient(socket, timeout_s=5) as c:
                return time.monotonic() - bound, c.health()
        except PlannerUnavailable:  # bound, not listening yet
            assert time.monotonic() < end
            time.sleep(0.005)


@pytest.mark.full  # a real daemon loading the real engine
def test_health_answers_at_once_while_the_engine_loads(engine_dir):
    socket = short_dir() / "planner.sock"
    proc = daemon(str(engine_dir), socket)
    try:
        took, health = first_health(socket, proc)
        assert took < 1.0, took
        assert health["status"] == "loading" and health["ready"] is False  # importing torch takes longer
        cli = subprocess.run([sys.executable, "-m", "orin_llm.cli", "health", "--socket", str(socket)],
                             capture_output=True, text=True, cwd=ROOT)
        # not ready: exit 1 (unless the load finished meanwhile: then 0)
        assert (cli.returncode, cli.stdout.split(":")[0]) in ((1, "loading"), (0, "ok")), cli
        with PlannerClient(socket, timeout_s=5) as c:
            try:
                c.plan("Open the fridge.", max_tokens=2, goal="none")
            except PlannerError as e:  # still loading: 503, come back later
                assert e.status == 503 and "still loading" in e.message
            try:
                ready = c.wait_ready(180, alive=lambda: proc.poll() is None)
            except PlannerError as e:
                raise AssertionError(f"{e}\n{log(socket)}") from None
        assert ready["status"] == "ok" and ready["engine"]
    finally:
        proc.terminate()
        assert proc.wait(60) == 0, log(socket)
    assert not socket.exists()


def test_a_failed_load_is_reported_and_exits_2(tmp_path):
    socket = short_dir() / "planner.sock"
    proc = daemon(str(tmp_path / "nothing-here"), socket)
    took, health = first_health(socket, proc)
    assert took < 1.0 and health["ready"] is False and health["status"] in ("loading", "failed")
    assert proc.wait(120) == 2, log(socket)
    assert f"error: engine dir {tmp_path / 'nothing-here'} does not exist" in log(socket)
    assert not socket.exists()


def test_health_wait_waits_through_refusals_and_slow_answers():
    """`orin-llm health --wait 25` against a socket nobody listens on for the first 2 s, then a daemon
    whose first answer would take a minute, then "loading", then ready: it waits, whatever the first
    attempts got, and no single attempt outlasts the wait (one used to wait 30 s for its answer)."""
    socket = short_dir() / "planner.sock"
    t0 = time.monotonic()
    cli = subprocess.Popen([sys.executable, "-m", "orin_llm.cli", "health", "--socket", str(socket), "--wait", "25",
                            "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    time.sleep(2)  # connection refused (no socket file) meanwhile
    answers = iter([(503, {"status": "loading", "ready": False, "loading_s": 1.0}, 60.0),  # the client gives up
                    (503, {"status": "loading", "ready": False, "loading_s": 2.0}, 0.0)])
    ready = {"status": "ok", "ready": True, "engine": "fake"}
    with FakeDaemon(socket, lambda: next(answers, (200, ready, 0.0))):
        out, err = cli.communicate(timeout=60)
    assert cli.returncode == 0, err
    assert json.loads(out) == ready and time.monotonic() - t0 < 25


class FakeDaemon:
    """An HTTP/1.1 server on a Unix socket answering GET /health with reply() -> (status, body, delay_s)."""

    def __init__(self, path, reply):
        import http.server
        import socketserver

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                status, body, delay = reply()
                time.sleep(delay)
                data = json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except BrokenPipeError:  # the client gave up on this attempt
                    pass

            def address_string(self) -> str:
                return "unix"

            def log_message(self, *args) -> None:
                pass

        class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
            daemon_threads = True

        self.server = Server(str(path), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeDaemon:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_health_wait_on_a_daemon_still_loading_exits_1_and_says_so():
    socket = short_dir() / "planner.sock"
    loading = (503, {"status": "loading", "ready": False, "loading_s": 12.5}, 0.0)
    with FakeDaemon(socket, lambda: loading):
        t0 = time.monotonic()
        cli = subprocess.run([sys.executable, "-m", "orin_llm.cli", "health", "--socket", str(socket), "--wait", "2"],
                             capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert cli.returncode == 1, cli  # not ready (2 would say: not there)
    assert cli.stdout.strip() == "loading: no engine yet, 12.5 s after the daemon started"
    assert time.monotonic() - t0 > 2


def test_what_the_daemon_imports_before_binding_leaves_torch_out():
    """The runtime (torch: seconds) is imported behind the bound socket, never before it."""
    code = ("import sys; from orin_llm.server import app, config, daemon, protocol; import uvicorn; "
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('orin_llm.runtime')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert out.strip() == "[]"
