"""The HTTP API (docs/ARCHITECTURE.md, "The daemon"): a FastAPI app in front of one Worker.

`create_app` assembles the middleware, the error handlers and /health + /metrics (routes/health.py),
none of which imports the runtime, so a daemon serves them from the moment it binds; `open_app` adds
the engine's routes (routes/environment.py, home_state.py, plan.py, chat.py) once the worker has loaded its planner.
Until then every other path answers 503 with Retry-After (`LoadingGate`). What the routes share
travels in an `AppState` (routes/state.py) on `app.state.orin`, so a route can be tested in-process
with a stub worker (tests/server/test_routes.py).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import Any, Optional

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from .. import __version__
from .body_limit import BodyLimit
from .content import JsonBodies
from .errors import RequestError, error_body
from .routes import engine_routers, health
from .routes.state import AppState, ServerConfig, engine_max_tokens
from .schemas import ChatRequest, PlanRequest

__all__ = ["AppState", "ServerConfig", "create_app", "engine_max_tokens", "open_app"]

ENDPOINTS = {"/v1/plan": "plan", "/v1/chat/completions": "chat", "/v1/environment": "environment",
             "/v1/environment/state": "state"}
MODELS = {"/v1/plan": PlanRequest, "/v1/chat/completions": ChatRequest}
OPEN_WHILE_LOADING = ("/health", "/metrics")


def create_app(state: AppState) -> FastAPI:
    """The app for `state`; it serves /health and /metrics, and the rest once `open_app` ran."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if state.worker is not None:  # else the daemon starts it once it has made it
            state.worker.start()
        try:
            yield
        finally:
            state.bodies.close()
            if state.worker is not None:
                await asyncio.to_thread(state.worker.stop)

    app = FastAPI(title="orin-llm planner", version=__version__, lifespan=lifespan,
                  docs_url=None, redoc_url=None)  # the docs pages load scripts from a CDN
    app.state.orin = state
    app.add_middleware(BodyLimit, limit=state.config.max_body_bytes,
                       on_reject=lambda path: count(path, "invalid"))
    app.add_middleware(JsonBodies)
    app.add_middleware(LoadingGate, state=state, on_reject=lambda path: count(path, "rejected"))

    def count(path: str, outcome: str) -> None:
        if path in ENDPOINTS:
            state.metrics.count(ENDPOINTS[path], outcome)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> Response:
        count(request.url.path, "invalid")
        return JSONResponse(error_body(422, describe(exc.errors(), MODELS.get(request.url.path))), 422)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> Response:
        count(request.url.path, "invalid" if exc.status_code < 500 else "error")
        if exc.status_code == 404 and request.url.path.startswith("/v1/environments/"):
            from .routes.environment import unroutable_name  # an engine route's: open_app imported it

            named = unroutable_name(request.url.path)  # a home name with a '/': 422, what names may be
            if named is not None:
                return named.response()
        message = str(exc.detail)
        if exc.__cause__ is not None:  # FastAPI's "error parsing the body": say which error
            message += f" ({type(exc.__cause__).__name__}: {exc.__cause__})"
        return JSONResponse(error_body(exc.status_code, message), exc.status_code,
                            headers=getattr(exc, "headers", None))

    @app.exception_handler(RequestError)
    async def request_error(request: Request, exc: RequestError) -> Response:
        count(request.url.path, "rejected" if exc.status == 503 else "invalid")
        return exc.response()

    app.include_router(health.router)
    return app


def open_app(app: FastAPI) -> None:
    """The worker has loaded: add the engine's routes and let requests through. Imports the runtime:
    a daemon calls `engine_routers()` on another thread first (the imports are then cached)."""
    state: AppState = app.state.orin
    for router in engine_routers():
        app.include_router(router)
    app.openapi_schema = None  # FastAPI caches it: it must list the routes just added
    state.open()


class LoadingGate:
    """While the daemon loads (or after loading failed), every path but /health and /metrics gets
    503 with Retry-After, before its body is read; the client's retry will find the route."""

    def __init__(self, app: ASGIApp, state: AppState, on_reject=lambda path: None):
        self.app, self.state, self.on_reject = app, state, on_reject

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.state.ready or scope["path"] in OPEN_WHILE_LOADING:
            return await self.app(scope, receive, send)
        worker = self.state.worker
        if worker is not None and worker.load_error is not None:
            error = RequestError(503, f"the daemon could not load its engine ({worker.load_error}); it is exiting")
        else:
            error = RequestError(503, "the daemon is still loading its engine; retry shortly (GET /health "
                                      "says when it is ready)", retry_after=health.LOADING_RETRY_S)
        self.on_reject(scope["path"])
        await error.response()(scope, receive, send)


def describe(errors: Iterable[Any], model: Optional[type] = None) -> str:
    """FastAPI's validation errors as one line that says what to fix."""
    parts = []
    for e in errors:
        # drop "body" and pydantic's union tags ("function-after[utf8(), str]", "list[ContentPart]", and a
        # model's class name: "NamedToolChoice"; field names are lower case)
        loc = [str(p) for p in e.get("loc", ()) if p != "body" and "[" not in str(p) and not str(p)[:1].isupper()]
        where, kind, msg = ".".join(loc) or "body", e.get("type", ""), str(e.get("msg", ""))
        if kind == "json_invalid":
            why = e.get("ctx", {}).get("error", msg)
            parts.append(f"the body is not valid JSON ({why} at character {where})")
            continue
        if kind == "model_attributes_type" and not loc:
            parts.append(f"the body must be a JSON object, got {json_kind(e.get('input'))}")
            continue
        if kind == "extra_forbidden":
            msg = "unknown field"
            if model is not None and len(loc) == 1:
                msg += f" (allowed: {', '.join(model.model_fields)})"
        elif kind == "finite_number":  # NaN or ±Infinity: JSON has no such numbers, Python's parser reads them
            value = e.get("input")
            msg = f"must be a finite number, got {'NaN' if value != value else ('-' if value < 0 else '') + 'Infinity'}"
        elif kind.endswith("_type") and "input" in e:  # strict types: say what came instead
            msg += f", got {json_kind(e['input'])}"
        elif kind == "missing":
            msg = "required field missing"
        elif msg.startswith("Value error, "):
            msg = msg[len("Value error, "):]
        parts.append(f"{where}: {msg}")
    return "; ".join(parts) or "invalid request"


def json_kind(value: Any) -> str:
    """A received JSON value, briefly: `"8" (a string)`, `true (a boolean)`, `a list`."""
    if isinstance(value, bool):
        return f"{'true' if value else 'false'} (a boolean)"
    if isinstance(value, str):
        shown = json.dumps(value if len(value) <= 20 else value[:20] + "…", ensure_ascii=False)
        return f"{shown} (a string)"
    if isinstance(value, (int, float)):
        return f"{value!r} (a number)"
    if value is None:
        return "null"
    return {dict: "an object", list: "a list"}.get(type(value), type(value).__name__)
