"""The HTTP API (docs/ARCHITECTURE.md, "The daemon"): FastAPI routes in front of one Worker.

Handlers validate, build a job and wait for it; they never touch the engine themselves, so
the event loop stays free to accept, stream and notice disconnects while the worker decodes.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Optional

from fastapi import FastAPI, Header, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.exceptions import HTTPException

from .. import __version__
from ..environment import environment_from_dict
from ..errors import OrinError
from ..runtime.backend import Backend
from ..runtime.sampling import SamplingParams
from .body_limit import BodyLimit
from .content import JsonBodies, parse_environment_body
from .errors import RequestError, error_body
from .jobs import chat_chunk, chat_job, chat_meta, environment_job, plan_job, remove_environment_job
from .schemas import ChatRequest, EnvironmentVersion, ErrorResponse, PlanRequest, PlanResponse, Sampling, check_utf8
from .streams import SSE_HEADERS, events, first_event
from .structured import GrammarCache, answer_of
from .tool_calls import CallParser, template_speaks_tools
from .worker import Job, Worker

ENDPOINTS = {"/v1/plan": "plan", "/v1/chat/completions": "chat", "/v1/environment": "environment"}
MODELS = {"/v1/plan": PlanRequest, "/v1/chat/completions": ChatRequest}
ERRORS: dict = {status: {"model": ErrorResponse, "description": what} for status, what in (
    (400, "stream asked for over HTTP/1.0"),
    (412, "If-Match names another environment version"), (413, "Body, prompt or environment over the limits"),
    (422, "Invalid request: the message says what to fix"), (503, "Queue full (see Retry-After) or shutting down"),
    (504, "deadline_ms passed"))}


@dataclass
class ServerConfig:
    max_body_bytes: int = 256 * 1024
    default_max_tokens: int = 128
    max_tokens_limit: Optional[int] = None  # a cap below the engine's own output limit


def engine_max_tokens(engine: Backend) -> int:
    """Most new tokens a request may ask for: prompt (≤ max_input_len) + output ≤ max_seq_len."""
    limits = engine.manifest.limits
    return limits.get("max_output_len") or limits["max_seq_len"] - limits["max_input_len"]


def create_app(worker: Worker, config: Optional[ServerConfig] = None) -> FastAPI:
    config = config or ServerConfig()
    planner, metrics = worker.planner, worker.metrics
    engine = planner.engine
    limit = min(config.max_tokens_limit or engine_max_tokens(engine), engine_max_tokens(engine))
    grammars = GrammarCache()  # chat answers' grammars (response_format, tools), used on the engine's thread
    native_tools = template_speaks_tools(engine.tokenizer)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        worker.start()
        try:
            yield
        finally:
            await asyncio.to_thread(worker.stop)

    app = FastAPI(title="orin-llm planner", version=__version__, lifespan=lifespan,
                  docs_url=None, redoc_url=None)  # the docs pages load scripts from a CDN
    app.add_middleware(BodyLimit, limit=config.max_body_bytes,
                       on_reject=lambda path: count(path, "invalid"))
    app.add_middleware(JsonBodies)

    def count(path: str, outcome: str) -> None:
        if path in ENDPOINTS:
            metrics.count(ENDPOINTS[path], outcome)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> Response:
        count(request.url.path, "invalid")
        return JSONResponse(error_body(422, describe(exc.errors(), MODELS.get(request.url.path))), 422)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> Response:
        count(request.url.path, "invalid" if exc.status_code < 500 else "error")
        message = str(exc.detail)
        if exc.__cause__ is not None:  # FastAPI's "error parsing the body": say which error
            message += f" ({type(exc.__cause__).__name__}: {exc.__cause__})"
        return JSONResponse(error_body(exc.status_code, message), exc.status_code,
                            headers=getattr(exc, "headers", None))

    @app.exception_handler(RequestError)
    async def request_error(request: Request, exc: RequestError) -> Response:
        count(request.url.path, "rejected" if exc.status == 503 else "invalid")
        return exc.response()

    def sampling(req: Sampling, max_tokens: Optional[int], stop: Iterable[str] = ()) -> SamplingParams:
        n = min(config.default_max_tokens, limit) if max_tokens is None else max_tokens
        if n > limit:
            raise RequestError(422, f"max_tokens must be at most {limit} for this engine, got {n}")
        try:
            top_p = 1.0 if req.top_p is None else req.top_p
            return SamplingParams(max_tokens=n, temperature=req.temperature or 0.0, top_p=top_p,
                                  seed=req.seed, stop=list(stop))
        except OrinError as e:
            raise RequestError(422, str(e)) from None

    async def respond(job: Job, request: Request, render: Callable[[dict], Response],
                      on_delta: Callable[[str], Optional[dict]] = lambda d: {"delta": d},
                      on_done: Callable[[dict], Iterable[dict]] = lambda p: [p],
                      head: Iterable[dict] = ()) -> Response:
        worker.submit(job)  # RequestError(503) when the queue is full
        try:
            event = await first_event(job, request)
        except BaseException:  # cancelled: the server is giving up on this request
            job.cancel.set()
            raise
        if event is None:
            return Response(status_code=499)  # the client went away; nobody reads this
        kind, value = event
        if kind == "error":
            return value.response()
        if kind == "done":
            return render(value)
        return StreamingResponse(events(job, on_delta, on_done, head), media_type="text/event-stream",
                                 headers=SSE_HEADERS)

    @app.get("/health")
    async def health() -> dict:
        prefix = planner.prefix
        assert prefix is not None
        kv = engine.kv_usage()
        return {"status": "ok" if worker.accepting else "stopping", "ready": worker.accepting,
                "engine": engine.name, "backend": engine.manifest.backend,
                "device": kv["device"],
                "environment": {"name": prefix.environment.name, "version": prefix.version},
                "prefix_tokens": len(prefix.ids),
                "queue": {"depth": worker.depth, "capacity": worker.capacity,
                          "running": worker.running},
                "kv_cache": {**{k: kv[k] for k in ("tokens", "capacity_tokens", "bytes")},
                             **({"pool": kv["pool"]} if "pool" in kv else {})},
                "scheduler": scheduler_info(engine),
                # the torch backend's CPU fast paths: true, or why not (TensorRT-LLM's engine has its own kernels)
                **({"kernels": engine.kernels()} if engine.capabilities.kernels else {}),
                "limits": {"max_input_len": engine.manifest.limits["max_input_len"], "max_tokens": limit,
                           "max_body_bytes": config.max_body_bytes}}

    @app.get("/metrics")
    async def metrics_text() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/environment")
    async def get_environment() -> Response:
        prefix = planner.prefix
        assert prefix is not None
        return JSONResponse(prefix.environment.model_dump(mode="json", exclude_none=True),
                            headers={"ETag": f'"{prefix.version}"'})

    @app.put("/v1/environment", responses={200: {"model": EnvironmentVersion}, **ERRORS},
             openapi_extra={"requestBody": ENVIRONMENT_BODY})
    async def put_environment(
        request: Request,
        if_match: Optional[str] = Header(None, description='The ETag of GET /v1/environment, e.g. "3".'),
    ) -> Response:
        """Replace the home: JSON (the shape GET returns), or the YAML file itself with
        `Content-Type: application/yaml`. Requests already running finish on the old one."""
        env = await environment_of(request)
        job = Job("environment", environment_job(env, parse_if_match(if_match)), asyncio.get_running_loop(),
                  created=arrival(request), exclusive=True)
        return await respond(job, request, lambda r: JSONResponse(r, headers={"ETag": f'"{r["version"]}"'}))

    @app.get("/v1/environments")
    async def list_environments() -> dict:
        """The default environment and the named ones, each pinned in the KV cache."""
        homes = list(planner.homes.items())
        return {name or "default": {"name": h.prefix.environment.name, "version": h.prefix.version,
                                    "prefix_tokens": len(h.prefix.ids)} for name, h in homes}

    @app.get("/v1/environments/{name}")
    async def get_named_environment(name: str) -> Response:
        home = planner.homes.get(name)
        if home is None:
            raise RequestError(404, f"no environment named {name!r}; GET /v1/environments lists them")
        return JSONResponse(home.prefix.environment.model_dump(mode="json", exclude_none=True),
                            headers={"ETag": f'"{home.prefix.version}"'})

    @app.put("/v1/environments/{name}", responses={200: {"model": EnvironmentVersion}, **ERRORS},
             openapi_extra={"requestBody": ENVIRONMENT_BODY})
    async def put_named_environment(
        name: str, request: Request,
        if_match: Optional[str] = Header(None, description='The ETag of GET /v1/environments/NAME, e.g. "3".'),
    ) -> Response:
        """Add or replace a named environment, pinned next to the default one (plans choose it with
        "environment": NAME). Refused with 507 when its prefix would not fit the KV cache next to the
        others, naming the numbers."""
        check_name(name)
        env = await environment_of(request)
        job = Job("environment", environment_job(env, parse_if_match(if_match), name), asyncio.get_running_loop(),
                  created=arrival(request), exclusive=True)
        return await respond(job, request, lambda r: JSONResponse(r, headers={"ETag": f'"{r["version"]}"'}))

    @app.delete("/v1/environments/{name}")
    async def delete_named_environment(name: str, request: Request) -> Response:
        """Unpin a named environment (requests still running on it finish)."""
        job = Job("environment", remove_environment_job(name), asyncio.get_running_loop(), created=arrival(request),
                  exclusive=True)
        return await respond(job, request, JSONResponse)

    @app.post("/v1/plan", responses={200: {"model": PlanResponse, "description": "The plan; with `stream`, "
                                           "text/event-stream ending with this object and [DONE]."}, **ERRORS})
    async def plan(req: PlanRequest, request: Request) -> Response:
        """A plan for a task in the current environment; `stream` sends SSE: `{"delta"}` events,
        then the full response, then `[DONE]`."""
        check_stream(req, request)
        job = Job("plan", plan_job(req, sampling(req, req.max_tokens)), asyncio.get_running_loop(),
                  stream=req.stream, deadline_ms=req.deadline_ms, created=arrival(request))
        return await respond(job, request, JSONResponse)

    @app.post("/v1/chat/completions", responses=ERRORS)
    async def chat(req: ChatRequest, request: Request) -> Response:
        """OpenAI-compatible chat completion; `model` may name anything, the engine answers.
        `response_format` and `tools` constrain the answer (server/structured.py); streamed tool calls
        come as `delta.tool_calls` pieces, as OpenAI sends them."""
        check_stream(req, request)
        wanted = req.max_tokens if req.max_completion_tokens is None else req.max_completion_tokens
        meta = chat_meta(engine.name)
        answer = answer_of(req)
        begin = chat_job(req, sampling(req, wanted, req.stops()), meta, answer, grammars, native_tools)
        job = Job("chat", begin, asyncio.get_running_loop(), stream=req.stream, deadline_ms=req.deadline_ms,
                  created=arrival(request))
        include_usage = bool(req.stream_options and req.stream_options.include_usage)
        calls = CallParser(answer.parser_mode) if answer.parser_mode else None  # reads a streamed answer

        def on_delta(text: str) -> Optional[dict]:
            if calls is None:
                return chat_chunk(meta, {"content": text})
            delta = calls.feed(text)
            return chat_chunk(meta, delta) if delta else None

        def on_done(completion: dict) -> list[dict]:
            rest = calls.finish() if calls is not None else None  # text held back while undecided
            out = [chat_chunk(meta, rest)] if rest else []
            out.append(chat_chunk(meta, {}, completion["choices"][0]["finish_reason"]))
            if include_usage:
                out.append({**chat_chunk(meta, None), "usage": completion["usage"]})
            return out

        # the first chunk, as OpenAI's: content "" for text, null for calls, left out while either may come
        head = {None: {"role": "assistant", "content": ""}, "calls": {"role": "assistant", "content": None},
                "either": {"role": "assistant"}}[answer.parser_mode]
        return await respond(job, request, JSONResponse, on_delta=on_delta, on_done=on_done,
                             head=[chat_chunk(meta, head)])

    return app


async def environment_of(request: Request):
    """The request's body as an environment: JSON, or YAML with Content-Type: application/yaml."""
    body = await request.body()  # within the body limit (BodyLimit counts it)
    try:
        data = parse_environment_body(body, request.headers.get("content-type"))
        check_utf8(data)
        return environment_from_dict(data, source="environment")
    except (OrinError, ValueError) as e:
        raise RequestError(422, str(e)) from None


def check_name(name: str) -> None:
    import re

    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}", name):
        raise RequestError(422, f"environment name {name!r}: use 1 to 128 letters, digits, '.', '_', ':' or '-', "
                                "starting with a letter or digit")


def scheduler_info(engine) -> dict:
    """How the engine batches: requests decoding together, rows per step, prompt tokens per step
    (a TensorRT-LLM engine batches inside its executor: none of these)."""
    if not engine.capabilities.tunable_batch:
        return {}
    s = engine.stats()
    return {"max_running": s.max_running, "max_step_tokens": s.max_step_tokens,
            "prefill_chunk_tokens": s.prefill_chunk_tokens, "running": s.running, "waiting": s.waiting}
ENVIRONMENT_BODY = {"required": True, "description": "An environment: JSON in the shape GET /v1/environment "
                    "returns, or the YAML home file as is (Content-Type: application/yaml).",
                    "content": {media: {"schema": {"type": "object", "additionalProperties": True}}
                                for media in ("application/json", "application/yaml")}}


def arrival(request: Request) -> float:
    """time.monotonic() when the request's head had arrived (server/protocol.py stamps it; pipelined
    requests wait for the ones before them, and that counts as queueing), else now."""
    return getattr(request.state, "arrived", None) or time.monotonic()


def check_stream(req: Sampling, request: Request) -> None:
    # A stream has no length up front, so it goes out chunked; RFC 9112 §6.1: a server MUST NOT send
    # Transfer-Encoding to a request that does not indicate HTTP/1.1, and uvicorn would.
    if req.stream and request.scope.get("http_version") == "1.0":
        raise RequestError(400, "stream needs HTTP/1.1 (a streamed answer is sent in chunks, which HTTP/1.0 "
                                "does not have); send the request over HTTP/1.1, or without stream")


def parse_if_match(value: Optional[str]) -> Optional[int]:
    """`"3"`, `W/"3"` or `3` → 3; `*` or no header → None (any version)."""
    if value is None or value.strip() == "*":
        return None
    tag = value.strip().removeprefix("W/").strip('"')
    if not tag.isdigit():
        raise RequestError(412, f'If-Match {value!r} is not an environment ETag like "3"')
    return int(tag)


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
