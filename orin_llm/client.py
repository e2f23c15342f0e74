"""A small synchronous client for the planning daemon, over its Unix socket.

    with PlannerClient("/run/orin-llm/planner.sock") as planner:
        answer = planner.plan("Bring the mug to the sofa.", observations=["the mug is on the counter"])
        for event in planner.plan_stream("Open the fridge."):
            ...  # {"delta": "..."} events, then the full response

Errors the daemon answers raise PlannerError(status, message); a daemon that is not there (no
socket file, nobody listening) raises PlannerUnavailable, which names the socket path. Used by
`orin-llm plan`, the ROS 2 node and the benchmarks. Runs on Python 3.10.

HTTP/1.1 through the standard library's http.client over the Unix socket: a planning call is
latency-bound, and this costs ~0.7 ms less per request than httpx on a small CPU (measured,
docs/notes/benchmarks-lab-notes.md), with nothing to install on the robot. One keep-alive connection for plain
requests; each stream gets its own, so closing a stream closes its connection and the daemon
sees its client go.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Optional, Union

from .server.sockets import default_socket_path

JSON = {"Content-Type": "application/json", "Accept": "application/json"}
# A reused keep-alive connection the daemon has closed meanwhile (its idle timeout) fails like this
# before the daemon has read anything: such a request is sent again, once, on a new connection.
STALE = (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError)
# wait_ready's longest single attempt: a daemon busy starting may not answer one at once, and one slow
# answer must not use up the whole wait
WAIT_ATTEMPT_S = 5.0


class PlannerError(Exception):
    def __init__(self, status: Optional[int], message: str):
        super().__init__(f"{message} (HTTP {status})" if status else message)
        self.status, self.message = status, message


class PlannerUnavailable(PlannerError):
    """No daemon answers on the socket."""

    def __init__(self, socket_path: str, reason: str):
        super().__init__(None, f"no planner daemon at {socket_path} ({reason}); start it with "
                               "`orin-llm serve` or `systemctl start orin-llm`, or pass the right --socket")
        self.socket_path = socket_path


class NotReady(PlannerError):
    """The daemon answers, but is not ready (still loading, failed to load, or stopping): `health` is its /health."""

    def __init__(self, socket_path: str, health: dict):
        super().__init__(None, f"the daemon at {socket_path} is not ready (status {health.get('status')!r})")
        self.health = health


class _UnixConnection(http.client.HTTPConnection):
    """http.client's connection, dialing a Unix socket (the host is only the Host header)."""

    def __init__(self, socket_path: str, timeout_s: float):
        super().__init__("orin-llm", timeout=timeout_s)
        self.socket_path = socket_path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.socket_path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


class Response:
    def __init__(self, status: int, headers: http.client.HTTPMessage, body: bytes):
        self.status, self.headers, self.body = status, headers, body

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def json(self) -> Any:
        return json.loads(self.body)


class PlannerClient:
    def __init__(self, socket_path: Union[str, Path, None] = None, timeout_s: float = 120.0):
        self.socket_path = str(socket_path or default_socket_path(client=True))
        self.timeout_s = timeout_s
        self._conn: Optional[_UnixConnection] = None
        self._used = False  # whether _conn has answered a request (then it may have gone stale)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> PlannerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- endpoints -------------------------------------------------------------------------

    def health(self) -> dict:
        """The daemon's /health. A daemon still loading its engine answers 503 with
        `{"status": "loading", "ready": false, ...}` (and `"failed"` if loading failed): that body is
        returned too; check `ready`."""
        r = self._request("GET", "/health", accept=(503,))
        if r.status == 200:
            return r.json()
        try:
            body = r.json()
        except ValueError:
            body = None
        if isinstance(body, dict) and "status" in body:
            return body
        raise PlannerError(r.status, _message(r.text))

    def wait_ready(self, timeout_s: float, alive: Optional[Callable[[], bool]] = None) -> dict:
        """Poll /health until the daemon says it is ready, and return it. Whatever an attempt gets (no
        socket yet, nobody listening, a timeout, "loading") it tries again until timeout_s has passed,
        each attempt waiting at most WAIT_ATTEMPT_S (and never past the end); then, or as soon as
        `alive()` is false, the last error is raised (PlannerUnavailable if nobody ever answered, NotReady
        if the daemon's last answer said it was not ready)."""
        end = time.monotonic() + timeout_s
        timeout = self.timeout_s
        try:
            while True:
                self.timeout_s = max(0.05, min(timeout, WAIT_ATTEMPT_S, end - time.monotonic()))
                try:
                    health = self.health()
                    if health.get("ready"):
                        return health
                    error: PlannerError = NotReady(self.socket_path, health)
                except PlannerError as e:  # PlannerUnavailable included
                    error = e
                finally:
                    self.close()  # the next attempt connects anew, with its own timeout
                if time.monotonic() >= end or (alive is not None and not alive()):
                    raise error
                time.sleep(min(0.2, max(0.0, end - time.monotonic())))
        finally:
            self.timeout_s = timeout

    def metrics(self) -> str:
        return self._request("GET", "/metrics").text

    def plan(self, task: str, observations: Optional[list[str]] = None, stream: bool = False,
             **opts: Any) -> dict:
        """The plan response: plan, steps, environment_version, timings, speculation, finish_reason,
        feasibility, violations, final_state, goal_reached, goal_missing, search, goal_inferred, goal_dropped.
        opts: max_tokens,
        temperature, top_p, seed, deadline_ms, speculation, constrained, environment, conversation,
        goal (a list of facts like "at(mug, sink)", or "infer"), feasibility ("enforce", "report" or "off"), state
        (a change to the home's state for this request only)."""
        if stream:
            final: dict = {}
            for event in self.plan_stream(task, observations, **opts):
                final = event
            return final
        return self._request("POST", "/v1/plan", json=_plan_body(task, observations, opts)).json()

    def plan_stream(self, task: str, observations: Optional[list[str]] = None, **opts: Any) -> Iterator[dict]:
        """{"delta": text} events as the plan is decoded, {"step": {"index", "action", "args"}} events as its
        lines complete as steps of the home, then the full response (as plan()). A plan with a goal (the
        default reads one in the task) sends its text and steps once the plan is chosen."""
        body = {**_plan_body(task, observations, opts), "stream": True}
        yield from self._stream("/v1/plan", body)

    def chat(self, messages: list[dict], **opts: Any) -> dict:
        """An OpenAI-style chat completion (non-streaming)."""
        return self._request("POST", "/v1/chat/completions", json={"messages": messages, **opts}).json()

    def get_environment(self) -> dict:
        """{"version": int, "environment": {...}}: the version is what If-Match takes."""
        r = self._request("GET", "/v1/environment")
        return {"version": _etag_version(r.headers.get("ETag")), "environment": r.json()}

    def put_environment(self, environment: dict, if_match: Optional[int] = None) -> dict:
        """Replace the environment: {"version", "name", "prefix_tokens"}. With if_match, only if the
        current version is that one (else PlannerError 412)."""
        headers = {"If-Match": f'"{if_match}"'} if if_match is not None else {}
        return self._request("PUT", "/v1/environment", json=environment, headers=headers).json()

    def get_state(self, environment: Optional[str] = None) -> dict:
        """The home's current state (the default home, or the named one): robot_at, holding, object_at,
        open, on, said, done; a fact the robot has not reported is absent."""
        return self._request("GET", _state_path(environment)).json()

    def update_state(self, update: dict, environment: Optional[str] = None) -> dict:
        """Report what really happened: `update` holds only what changed (the keys of get_state()).
        Returns {"state", "environment_version", "computed_tokens"}; a state naming things the home
        does not have raises PlannerError 422 and nothing changes."""
        return self._request("PATCH", _state_path(environment), json=update).json()

    # -- plumbing --------------------------------------------------------------------------

    def _request(self, method: str, path: str, json: Any = None, headers: Optional[dict] = None,
                 accept: tuple[int, ...] = ()) -> Response:
        """The response; a status ≥ 400 not in `accept` raises PlannerError."""
        body = None if json is None else _dumps(json)
        for attempt in (0, 1):
            if self._conn is None:
                self._conn, self._used = _UnixConnection(self.socket_path, self.timeout_s), False
            reused = self._used
            try:
                self._conn.request(method, path, body=body, headers={**JSON, **(headers or {})})
                r = self._conn.getresponse()
                data = r.read()
            except STALE as e:
                self.close()
                if reused and attempt == 0:
                    continue
                raise PlannerError(None, f"{method} {path} failed: {_reason(e)}") from None
            except (FileNotFoundError, ConnectionRefusedError, PermissionError) as e:
                self.close()
                raise PlannerUnavailable(self.socket_path, _reason(e)) from None
            except (OSError, http.client.HTTPException) as e:  # timeouts included
                self.close()
                raise PlannerError(None, f"{method} {path} failed: {_reason(e)}") from None
            self._used = True
            if r.will_close:
                self.close()
            if r.status >= 400 and r.status not in accept:
                raise PlannerError(r.status, _message(data.decode("utf-8", "replace")))
            return Response(r.status, r.headers, data)
        raise AssertionError("unreachable")

    def _stream(self, path: str, body: dict) -> Iterator[dict]:
        conn = _UnixConnection(self.socket_path, self.timeout_s)
        try:
            conn.request("POST", path, body=_dumps(body), headers={**JSON, "Accept": "text/event-stream"})
            r = conn.getresponse()
            if r.status >= 400:
                raise PlannerError(r.status, _message(r.read().decode("utf-8", "replace")))
            while raw := r.readline():
                line = raw.decode("utf-8").rstrip("\r\n")
                if not line.startswith("data: "):
                    continue
                data = line[len("data: "):]
                if data == "[DONE]":
                    return
                event = json.loads(data)
                if "error" in event:
                    err = event["error"]
                    raise PlannerError(err.get("code"), err.get("message", str(err)))
                yield event
        except (FileNotFoundError, ConnectionRefusedError, PermissionError) as e:
            raise PlannerUnavailable(self.socket_path, _reason(e)) from None
        except (OSError, http.client.HTTPException) as e:
            raise PlannerError(None, f"the stream from {path} broke: {_reason(e)}") from None
        finally:
            conn.close()  # also when the caller closes the generator early: the daemon cancels
        raise PlannerError(None, "the stream ended without [DONE] (the daemon went away?)")


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False).encode("utf-8")


def _plan_body(task: str, observations: Optional[list[str]], opts: dict) -> dict:
    body = {"task": task, **{k: v for k, v in opts.items() if v is not None}}
    if observations:
        body["observations"] = list(observations)
    return body


def _state_path(environment: Optional[str]) -> str:
    if environment is None:
        return "/v1/environment/state"
    return f"/v1/environments/{urllib.parse.quote(environment, safe='')}/state"


def _message(text: str) -> str:
    try:
        return json.loads(text)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return text.strip() or "no message"


def _reason(e: Exception) -> str:
    text = str(e)
    if isinstance(e, FileNotFoundError) or "No such file" in text:
        return "no such socket"
    if "refused" in text.lower():
        return "nobody listening"
    if "ermission" in text:
        return "permission denied: is your user in the socket's group?"
    if isinstance(e, TimeoutError):
        return f"timed out after the client's timeout ({type(e).__name__})"
    if isinstance(e, http.client.RemoteDisconnected):
        return "the daemon closed the connection without answering"
    return text or type(e).__name__


def _etag_version(etag: Optional[str]) -> Optional[int]:
    tag = (etag or "").removeprefix("W/").strip('"')
    return int(tag) if tag.isdigit() else None
