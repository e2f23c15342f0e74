"""The socket client's own plumbing, against small real HTTP servers on real Unix sockets (the
daemon itself is exercised through this client in tests/server)."""

import json
import socketserver
import threading
from http.server import BaseHTTPRequestHandler

import pytest

from orin_llm.client import PlannerClient, PlannerError, PlannerUnavailable


class OneShotHandler(BaseHTTPRequestHandler):
    """Answers one request per connection and then closes it without saying so (no
    `Connection: close`), as a daemon does to a keep-alive connection that sat idle too long."""

    protocol_version = "HTTP/1.1"
    connections: list[str] = []

    def handle(self):
        OneShotHandler.connections.append(self.path if hasattr(self, "path") else "?")
        self.handle_one_request()  # and no loop: the connection ends here

    def do_GET(self):
        status, body = (200, {"status": "ok"}) if self.path == "/health" else \
            (422, {"error": {"code": 422, "message": "max_tokens must be at most 64"}})
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def one_shot_server(tmp_path):
    path = str(tmp_path / "s.sock")
    server = socketserver.ThreadingUnixStreamServer(path, OneShotHandler)
    OneShotHandler.connections = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield path
    server.shutdown()
    server.server_close()


def test_a_keep_alive_connection_the_server_closed_is_redialled_once(one_shot_server):
    with PlannerClient(one_shot_server, timeout_s=5) as c:
        assert [c.health()["status"] for _ in range(3)] == ["ok"] * 3
    assert len(OneShotHandler.connections) == 3  # each request after the first found its connection gone


def test_an_error_answer_raises_with_the_daemons_status_and_message(one_shot_server):
    with PlannerClient(one_shot_server, timeout_s=5) as c, pytest.raises(PlannerError) as e:
        c._request("GET", "/v1/plan")
    assert e.value.status == 422 and e.value.message == "max_tokens must be at most 64"


def test_no_daemon_names_the_socket_and_how_to_start_one(tmp_path):
    path = str(tmp_path / "nobody.sock")
    with PlannerClient(path, timeout_s=5) as c, pytest.raises(PlannerUnavailable) as e:
        c.health()
    assert path in str(e.value) and "no such socket" in str(e.value) and "orin-llm serve" in str(e.value)
    with PlannerClient(path) as c, pytest.raises(PlannerUnavailable):
        list(c.plan_stream("Open the fridge."))


class RecordingHandler(BaseHTTPRequestHandler):
    """Answers every request with what it received: method, path and JSON body."""

    protocol_version = "HTTP/1.1"

    def _answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        data = json.dumps({"method": self.command, "path": self.path, "body": body}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PATCH = _answer

    def log_message(self, *args):
        pass


@pytest.fixture
def recording_server(tmp_path):
    path = str(tmp_path / "r.sock")
    server = socketserver.ThreadingUnixStreamServer(path, RecordingHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield path
    server.shutdown()
    server.server_close()


def test_plan_sends_goal_feasibility_and_a_one_off_state(recording_server):
    with PlannerClient(recording_server, timeout_s=5) as c:
        sent = c.plan("Bring the mug to the sink.", goal=["at(mug, sink)"], feasibility="report",
                      state={"robot_at": "kitchen"}, seed=None)
    assert (sent["method"], sent["path"]) == ("POST", "/v1/plan")
    assert sent["body"] == {"task": "Bring the mug to the sink.", "goal": ["at(mug, sink)"], "feasibility": "report",
                            "state": {"robot_at": "kitchen"}}  # None options are left out


def test_state_calls_name_the_default_or_a_named_home(recording_server):
    with PlannerClient(recording_server, timeout_s=5) as c:
        assert c.get_state()["path"] == "/v1/environment/state"
        got = c.update_state({"holding": "mug"}, environment="flat 2/b")
    assert (got["method"], got["path"], got["body"]) == ("PATCH", "/v1/environments/flat%202%2Fb/state",
                                                         {"holding": "mug"})
