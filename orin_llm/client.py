"""A small synchronous client for the planning daemon, over its Unix socket.

    with PlannerClient("/run/orin-llm/planner.sock") as planner:
        answer = planner.plan("Bring the mug to the sofa.", observations=["the mug is on the counter"])
        for event in planner.plan_stream("Open the fridge."):
            ...  # {"delta": "..."} events, then the full response

Errors the daemon answers raise PlannerError(status, message); a daemon that is not there (no
socket file, nobody listening) raises PlannerUnavailable, which names the socket path. Used by
`orin-llm plan`, the ROS 2 node and the benchmarks. Runs on Python 3.10 (httpx, not httpx2).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional, Union

import httpx

from .server.sockets import default_socket_path


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


class PlannerClient:
    def __init__(self, socket_path: Union[str, Path, None] = None, timeout_s: float = 120.0):
        self.socket_path = str(socket_path or default_socket_path(client=True))
        # the host is a placeholder: the transport always dials the socket
        self._http = httpx.Client(transport=httpx.HTTPTransport(uds=self.socket_path),
                                  base_url="http://orin-llm", timeout=timeout_s)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> PlannerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- endpoints -------------------------------------------------------------------------

    def health(self) -> dict:
        return self._request("GET", "/health").json()

    def metrics(self) -> str:
        return self._request("GET", "/metrics").text

    def plan(self, task: str, observations: Optional[list[str]] = None, stream: bool = False,
             **opts: Any) -> dict:
        """The plan response: plan, steps, environment_version, timings, speculation, finish_reason.
        opts: max_tokens, temperature, top_p, seed, deadline_ms, speculation."""
        if stream:
            final: dict = {}
            for event in self.plan_stream(task, observations, **opts):
                final = event
            return final
        return self._request("POST", "/v1/plan", json=_plan_body(task, observations, opts)).json()

    def plan_stream(self, task: str, observations: Optional[list[str]] = None, **opts: Any) -> Iterator[dict]:
        """{"delta": text} events as the plan is decoded, then the full response (as plan())."""
        body = {**_plan_body(task, observations, opts), "stream": True}
        yield from self._stream("/v1/plan", body)

    def chat(self, messages: list[dict], **opts: Any) -> dict:
        """An OpenAI-style chat completion (non-streaming)."""
        return self._request("POST", "/v1/chat/completions", json={"messages": messages, **opts}).json()

    def get_environment(self) -> dict:
        """{"version": int, "environment": {...}}: the version is what If-Match takes."""
        r = self._request("GET", "/v1/environment")
        return {"version": _etag_version(r.headers.get("etag")), "environment": r.json()}

    def put_environment(self, environment: dict, if_match: Optional[int] = None) -> dict:
        """Replace the environment: {"version", "name", "prefix_tokens"}. With if_match, only if the
        current version is that one (else PlannerError 412)."""
        headers = {"If-Match": f'"{if_match}"'} if if_match is not None else {}
        return self._request("PUT", "/v1/environment", json=environment, headers=headers).json()

    # -- plumbing --------------------------------------------------------------------------

    def _request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        try:
            r = self._http.request(method, path, **kw)
        except (httpx.ConnectError, FileNotFoundError) as e:
            raise PlannerUnavailable(self.socket_path, _reason(e)) from None
        except httpx.TransportError as e:
            raise PlannerError(None, f"{method} {path} failed: {_reason(e)}") from None
        if r.status_code >= 400:
            raise PlannerError(r.status_code, _message(r.text))
        return r

    def _stream(self, path: str, body: dict) -> Iterator[dict]:
        try:
            with self._http.stream("POST", path, json=body) as r:
                if r.status_code >= 400:
                    raise PlannerError(r.status_code, _message(r.read().decode("utf-8", "replace")))
                for line in r.iter_lines():
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
        except (httpx.ConnectError, FileNotFoundError) as e:
            raise PlannerUnavailable(self.socket_path, _reason(e)) from None
        except httpx.TransportError as e:
            raise PlannerError(None, f"the stream from {path} broke: {_reason(e)}") from None
        raise PlannerError(None, "the stream ended without [DONE] (the daemon went away?)")


def _plan_body(task: str, observations: Optional[list[str]], opts: dict) -> dict:
    body = {"task": task, **{k: v for k, v in opts.items() if v is not None}}
    if observations:
        body["observations"] = list(observations)
    return body


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
    if isinstance(e, httpx.TimeoutException):
        return f"timed out ({type(e).__name__})"
    return text or type(e).__name__


def _etag_version(etag: Optional[str]) -> Optional[int]:
    tag = (etag or "").removeprefix("W/").strip('"')
    return int(tag) if tag.isdigit() else None
