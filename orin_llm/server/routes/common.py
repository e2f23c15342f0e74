"""What the engine's routes share: the sampling limits, submitting a job and answering it (whole or
streamed), and the small request checks. Handlers validate, build a job and wait for it; they never
touch the engine themselves, so the event loop stays free to accept, stream and notice disconnects
while the worker decodes."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Optional

from fastapi import Request
from fastapi.responses import Response, StreamingResponse

from ...errors import OrinError
from ...runtime.sampling import SamplingParams
from ..errors import RequestError
from ..schemas import ErrorResponse, Sampling
from ..streams import SSE_HEADERS, events, first_event
from ..worker import Job
from .state import AppState

ERRORS: dict = {status: {"model": ErrorResponse, "description": what} for status, what in (
    (400, "stream asked for over HTTP/1.0"),
    (412, "If-Match names another environment version"), (413, "Body, prompt or environment over the limits"),
    (422, "Invalid request: the message says what to fix"), (503, "Queue full (see Retry-After) or shutting down"),
    (504, "deadline_ms passed"))}


def sampling(state: AppState, req: Sampling, max_tokens: Optional[int], stop: Iterable[str] = ()) -> SamplingParams:
    limit = state.limit
    n = min(state.config.default_max_tokens, limit) if max_tokens is None else max_tokens
    if n > limit:
        raise RequestError(422, f"max_tokens must be at most {limit} for this engine, got {n}")
    try:
        top_p = 1.0 if req.top_p is None else req.top_p
        return SamplingParams(max_tokens=n, temperature=req.temperature or 0.0, top_p=top_p,
                              seed=req.seed, stop=list(stop))
    except OrinError as e:
        raise RequestError(422, str(e)) from None


async def respond(state: AppState, job: Job, request: Request, render: Callable[[dict], Response],
                  on_delta: Callable[[str], Optional[dict]] = lambda d: {"delta": d},
                  on_done: Callable[[dict], Iterable[dict]] = lambda p: [p],
                  head: Iterable[dict] = ()) -> Response:
    assert state.worker is not None
    state.worker.submit(job)  # RequestError(503) when the queue is full
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
