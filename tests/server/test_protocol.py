"""HTTP on the socket, byte by byte: content types, header limits, HTTP/1.0, clients that go away.

Raw sockets on purpose: an HTTP library would normalise exactly what these tests send."""

from __future__ import annotations

import json
import socket
import time

import pytest

from .conftest import Daemon

pytestmark = pytest.mark.full

PLAN_BODY = b'{"task": "Open the fridge.", "max_tokens": 16}'  # a whole step (a cut plan ends at the last)


def exchange(daemon: Daemon, data: bytes, timeout_s: float = 60, half_close: bool = False) -> bytes:
    """Send `data`, read until the daemon closes (the requests say Connection: close, or are HTTP/1.0).
    `half_close`: shut our sending side after it (answered all the same: test_protocol_half_close.py)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout_s)
        s.connect(str(daemon.socket))
        try:
            s.sendall(data)
            if half_close:
                s.shutdown(socket.SHUT_WR)
        except OSError:  # the daemon answered and closed while we were still sending: fine
            pass
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except ConnectionResetError:  # what we sent after its close resets the connection
            pass
        return out


def parse(reply: bytes) -> tuple[str, dict[str, str], bytes]:
    head, _, body = reply.partition(b"\r\n\r\n")
    status, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    return status, headers, body


def request(method: str, path: str, body: bytes = b"", headers: tuple[str, ...] = (), version: str = "1.1") -> bytes:
    lines = [f"{method} {path} HTTP/{version}", "Host: x", *headers]
    if body:
        lines.append(f"Content-Length: {len(body)}")
    if version == "1.1":
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


@pytest.mark.parametrize("content_type", [None, "application/x-www-form-urlencoded", "text/plain",
                                          "application/json; charset=utf-8"])
def test_a_json_body_is_json_whatever_the_content_type_says(daemon, client, content_type):
    """curl -d sends a form content type; the body is read as JSON anyway (as llama.cpp's server does)."""
    headers = (f"Content-Type: {content_type}",) if content_type else ()
    status, _, body = parse(exchange(daemon, request("POST", "/v1/plan", PLAN_BODY, headers)))
    assert status == "HTTP/1.1 200 OK", body
    assert json.loads(body)["plan"] == client.plan("Open the fridge.", max_tokens=16)["plan"] != ""


def test_a_body_that_is_not_json_gets_the_parser_message(daemon):
    data = request("POST", "/v1/plan", b"task=Open+the+fridge", ("Content-Type: application/x-www-form-urlencoded",))
    status, _, body = parse(exchange(daemon, data))
    assert status.startswith("HTTP/1.1 422") and "the body is not valid JSON" in json.loads(body)["error"]["message"]


@pytest.mark.parametrize("name, head", [
    ("10,000 header fields", "".join(f"X-Field-{i}: 1\r\n" for i in range(10_000))),
    ("a 1 MB header", "X-Big: " + "a" * (1 << 20) + "\r\n"),
    ("101 header fields", "".join(f"X-{i}: 1\r\n" for i in range(100))),  # + Host
])
def test_oversized_request_heads_get_431(daemon, client, name, head):
    data = f"GET /health HTTP/1.1\r\nHost: x\r\n{head}\r\n".encode()
    status, headers, body = parse(exchange(daemon, data))
    assert status == "HTTP/1.1 431 Request Header Fields Too Large", (name, status)
    assert headers["connection"] == "close"
    error = json.loads(body)["error"]
    assert error["code"] == 431 and "send fewer or smaller headers" in error["message"]
    assert client.health()["ready"]


def test_a_head_that_never_ends_is_cut_at_the_limit(daemon, client):
    """No end of headers ever comes: the daemon answers once the head passes the limit, without waiting."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(30)
        s.connect(str(daemon.socket))
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ")
        reply = b""
        try:
            for _ in range(100):  # 1 MB in 10 kB pieces, the connection never half-closed
                s.sendall(b"a" * 10_000)
                time.sleep(0.001)
        except OSError:
            pass
        try:
            while chunk := s.recv(65536):
                reply += chunk
        except ConnectionResetError:
            pass
    assert reply.startswith(b"HTTP/1.1 431 ")
    assert client.health()["ready"]


def test_ordinary_heads_pass(daemon):
    head = "".join(f"X-{i}: {'v' * 100}\r\n" for i in range(98))  # 100 fields with Host and Connection, ~11 kB
    status, _, body = parse(exchange(daemon, request("GET", "/health", headers=(head.rstrip("\r\n"),))))
    assert status == "HTTP/1.1 200 OK" and json.loads(body)["ready"]


def test_http_1_0_gets_no_chunked_encoding(daemon, client):
    """RFC 9112 §6.1: no Transfer-Encoding to an HTTP/1.0 request. A stream is refused with a message;
    a plain answer has a Content-Length."""
    data = request("POST", "/v1/plan", b'{"task": "Open the fridge.", "max_tokens": 4, "stream": true}',
                   version="1.0")
    status, headers, body = parse(exchange(daemon, data))
    assert status.startswith("HTTP/1.1 400") and "transfer-encoding" not in headers
    assert "stream needs HTTP/1.1" in json.loads(body)["error"]["message"]
    status, headers, body = parse(exchange(daemon, request("POST", "/v1/plan", PLAN_BODY, version="1.0")))
    assert status == "HTTP/1.1 200 OK" and "transfer-encoding" not in headers
    assert int(headers["content-length"]) == len(body) and json.loads(body)["plan"]
    data = request("POST", "/v1/chat/completions", b'{"messages": [{"role": "user", "content": "hi"}], '
                   b'"max_tokens": 2, "stream": true}', version="1.0")
    status, headers, _ = parse(exchange(daemon, data))
    assert status.startswith("HTTP/1.1 400") and "transfer-encoding" not in headers
    assert client.health()["ready"]


@pytest.mark.parametrize("half_close", [True, False])
def test_a_client_that_goes_away_with_pipelined_requests_leaves_no_traceback(daemon, client, half_close):
    """Two pipelined plans, then the client goes (half-close or close) while the first is decoding:
    the first request hears of it too, so nothing writes to the closed connection."""
    log_start = len(daemon.log())
    before = client.metrics()
    body = b'{"task": "Describe every room of the home in great detail.", "max_tokens": 200}'
    one = request("POST", "/v1/plan", body).replace(b"Connection: close\r\n", b"")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(str(daemon.socket))
        s.sendall(one + one)
        end = time.monotonic() + 30
        while not client.health()["queue"]["running"] and time.monotonic() < end:
            time.sleep(0.02)
        if half_close:
            s.shutdown(socket.SHUT_WR)
        time.sleep(0.2)
    end = time.monotonic() + 60
    while client.health()["queue"]["running"] and time.monotonic() < end:
        time.sleep(0.05)
    time.sleep(0.3)
    log = daemon.log()[log_start:]
    assert "Traceback" not in log and "Exception in ASGI application" not in log, log
    assert cancelled(client.metrics()) > cancelled(before)  # the first one was stopped, not decoded for nobody
    assert client.plan("Open the fridge.", max_tokens=2, goal="none")["finish_reason"] == "length"  # it answers


def cancelled(metrics: str) -> float:
    line = next(x for x in metrics.splitlines() if x.startswith('orin_llm_requests_total{endpoint="plan",'
                                                                'outcome="cancelled"}'))
    return float(line.split()[-1])
