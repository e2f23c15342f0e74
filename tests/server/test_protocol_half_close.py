"""protocol.py, point 3: a client that sends its request and then shuts its sending side (`nc -N`,
`shutdown(SHUT_WR)`) gets its whole answer, over HTTP/1.1 and 1.0; one that then closes for good is
a client gone, as before (its plan is cancelled). Raw sockets on the tiny engine's daemon."""

from __future__ import annotations

import json
import re
import shutil
import socket
import time

import pytest

from tests.conftest import tiny_fixture
from tests.server.conftest import Daemon, free_port, short_dir

pytestmark = pytest.mark.full  # daemon processes (the fast tier runs the routes in-process)

tiny_engine_dir = tiny_fixture("engine_dir")
PLAN = b'{"task": "Open the fridge.", "max_tokens": 8}'
STREAM = b'{"task": "Open the fridge.", "max_tokens": 8, "stream": true}'
LONG = b'{"task": "Describe every room of the home in great detail.", "max_tokens": 1000, "constrained": false'


@pytest.fixture(scope="module")
def daemon(tiny_engine_dir):
    where = short_dir()
    port = free_port()
    d = Daemon(tiny_engine_dir, where / "planner.sock", "--queue-size", "8", "--tcp", f"127.0.0.1:{port}")
    d.url = f"127.0.0.1:{port}"
    try:
        yield d.wait_ready()
    finally:
        d.stop()
        shutil.rmtree(where, ignore_errors=True)


def request(method: str, path: str, body: bytes = b"", version: str = "1.1") -> bytes:
    head = f"{method} {path} HTTP/{version}\r\nHost: x\r\n"
    if body:
        head += f"Content-Length: {len(body)}\r\n"
    return (head + "\r\n").encode() + body


def connect(daemon: Daemon, tcp: bool = False) -> socket.socket:
    if tcp:
        host, _, port = (daemon.url or "").rpartition(":")
        return socket.create_connection((host, int(port)))
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(str(daemon.socket))
    return s


def half_closed(daemon: Daemon, data: bytes, timeout_s: float = 60) -> bytes:
    """Send `data`, shut our sending side, read until the daemon closes (no Connection: close asked)."""
    with connect(daemon) as s:
        s.settimeout(timeout_s)
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


def responses(reply: bytes) -> list[tuple[str, dict, bytes]]:
    """The HTTP responses in `reply`, each whole (its Content-Length, or its chunks to the last)."""
    out = []
    while reply:
        head, sep, rest = reply.partition(b"\r\n\r\n")
        assert sep, f"a response cut in its head: {reply[:200]!r}"
        status, *lines = head.decode("latin-1").split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
        if headers.get("transfer-encoding") == "chunked":
            body = b""
            while True:
                size, _, rest = rest.partition(b"\r\n")
                n = int(size, 16)
                body, rest = body + rest[:n], rest[n + 2:]
                if n == 0:
                    break
        else:
            n = int(headers["content-length"])
            assert len(rest) >= n, f"a body cut short: {len(rest)} of {n} bytes"
            body, rest = rest[:n], rest[n:]
        out.append((status, headers, body))
        reply = rest
    return out


@pytest.mark.parametrize("version", ["1.1", "1.0"])
def test_health_and_a_plan_answer_a_half_closed_request(daemon, version):
    (status, headers, body), = responses(half_closed(daemon, request("GET", "/health", version=version)))
    assert status == "HTTP/1.1 200 OK" and json.loads(body)["ready"] is True
    assert headers["connection"] == "close" or version == "1.0"
    (status, _, body), = responses(half_closed(daemon, request("POST", "/v1/plan", PLAN, version)))
    assert status == "HTTP/1.1 200 OK" and json.loads(body)["finish_reason"] in ("stop", "length")


def test_a_stream_answers_a_half_closed_request_to_its_end(daemon):
    (status, headers, body), = responses(half_closed(daemon, request("POST", "/v1/plan", STREAM)))
    assert status == "HTTP/1.1 200 OK" and headers["content-type"].startswith("text/event-stream")
    events = [line[len("data: "):] for line in body.decode().split("\n\n") if line]
    assert events[-1] == "[DONE]" and "finish_reason" in json.loads(events[-2])


def test_pipelined_requests_then_a_half_close_are_all_answered(daemon):
    data = request("GET", "/health") + request("POST", "/v1/plan", PLAN) + request("GET", "/health")
    answers = responses(half_closed(daemon, data))
    assert [status for status, _, _ in answers] == ["HTTP/1.1 200 OK"] * 3
    assert "plan" in json.loads(answers[1][2]) and answers[2][1]["connection"] == "close"  # the last one closes


def test_a_request_cut_short_by_the_half_close_is_not_waited_for(daemon):
    """Its body can never be complete: the connection is closed at once, as before."""
    cut = request("POST", "/v1/plan", PLAN)[:-5]
    t0 = time.monotonic()
    assert half_closed(daemon, cut) == b"" and time.monotonic() - t0 < 5


def cancelled(daemon: Daemon) -> float:
    with daemon.client() as c:
        m = re.search(r'^orin_llm_requests_total{endpoint="plan",outcome="cancelled"} (\S+)$', c.metrics(), re.M)
    return float(m.group(1)) if m else 0.0


@pytest.mark.parametrize("stream, tcp", [(False, False), (True, False), (False, True)])
def test_a_half_closed_client_that_then_closes_is_gone_and_its_plan_cancelled(daemon, stream, tcp):
    """Over TCP, where a half-close and a close send the same FIN, the half-close itself is the client
    gone (as before): its plan must not run on for nobody."""
    before = cancelled(daemon)
    body = LONG + (b', "stream": true}' if stream else b"}")
    s = connect(daemon, tcp)
    try:
        s.sendall(request("POST", "/v1/plan", body))
        s.shutdown(socket.SHUT_WR)
        with daemon.client() as c:  # over TCP it may be cancelled before it starts
            end = time.monotonic() + 30
            while not tcp and not c.health()["queue"]["running"] and time.monotonic() < end:
                time.sleep(0.02)
            assert tcp or c.health()["queue"]["running"], "the plan never started"
    finally:
        s.close()
    end = time.monotonic() + 20
    while cancelled(daemon) == before and time.monotonic() < end:
        time.sleep(0.05)
    assert cancelled(daemon) == before + 1  # stopped, not decoded to its 1000th token for nobody
    log = daemon.log()
    assert "Traceback" not in log and "Exception in ASGI application" not in log, log[-3000:]
