"""How request bodies are read: JSON whatever the Content-Type says; YAML too for the environment.

`curl -d '{"task": ...}'` sends `Content-Type: application/x-www-form-urlencoded`, and FastAPI then
hands the model the raw bytes ("Input should be a valid dictionary"). Like llama.cpp's server, which
parses every body as JSON, the daemon reads the body of POST /v1/plan and /v1/chat/completions, and
of PATCH /v1/environment/state and /v1/environments/NAME/state, as JSON whatever the header says; a
body that is not JSON gets the JSON parser's own message. Their routes are `BodyRoute`s: FastAPI's
JSON parse goes through bodies.load_json, so their bodies are bounded like the environment's.

PUT /v1/environment takes the home as JSON (the shape GET returns) or, with a YAML content type
(`application/yaml`, RFC 9512, or the older `application/x-yaml`, `text/yaml`, `text/x-yaml`), as the
YAML file itself. Either way it is read and checked as a home in a process of its own
(body_process.py), under the limits of bodies.py (no YAML aliases, depth and values bounded), so
that no body holds the event loop.
"""

from __future__ import annotations

import re
from typing import Any, Optional

from fastapi import Request
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from .bodies import BodyError, load_json
from .body_process import BodyProcess

JSON_PATHS = frozenset({"/v1/plan", "/v1/chat/completions"})
STATE_PATH = re.compile(r"/v1/(environment|environments/[^/]+)/state")
YAML_TYPES = frozenset({"application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml"})


class JsonBodies:
    """ASGI middleware: POST bodies of the JSON endpoints are JSON, whatever the Content-Type says."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and json_body(scope["method"], scope["path"]):
            headers = [(k, v) for k, v in scope["headers"] if k != b"content-type"]
            scope = {**scope, "headers": [*headers, (b"content-type", b"application/json")]}
        await self.app(scope, receive, send)


class BoundedRequest(Request):
    """FastAPI parses a model's body with `await request.json()`: this one under bodies.py's limits.
    A BodyError goes out as an HTTPException (FastAPI passes those on; anything else it makes a 400)."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            try:
                # the models check their text fields themselves, naming the field
                self._json = load_json(await self.body(), unicode=False)
            except BodyError as e:
                raise HTTPException(e.status, e.message) from None
        return self._json


class BodyRoute(APIRoute):
    """The route class of the routers whose bodies FastAPI parses (FastAPI's documented way to give a
    route its own Request class)."""

    def get_route_handler(self):
        handler = super().get_route_handler()

        async def bounded(request: Request):
            return await handler(BoundedRequest(request.scope, request.receive))
        return bounded


def json_body(method: str, path: str) -> bool:
    return (method == "POST" and path in JSON_PATHS) or (method == "PATCH" and STATE_PATH.fullmatch(path) is not None)


def media_type(content_type: Optional[str]) -> str:
    """`Application/YAML; charset=utf-8` -> `application/yaml`."""
    return (content_type or "").split(";")[0].strip().lower()


async def parse_environment_body(body: bytes, content_type: Optional[str], process: BodyProcess) -> Any:
    """The PUT /v1/environment body as a Python object that is a valid home, read in the body process
    (body_process.py) under the limits of bodies.py; ValueError says what is wrong with it, BodyError
    (a ValueError) which limit or what the home's check found."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"the body is not UTF-8 (byte {e.start})") from None
    if not text.strip():
        raise ValueError("the body is empty; send the environment as JSON, or as YAML with "
                         "Content-Type: application/yaml")
    return await process.environment(body, yaml=media_type(content_type) in YAML_TYPES)
