"""The event loop's side of a job: wait for its answer, or stream it as server-sent events.

While a request waits (queued, or generating without streaming) nothing is sent to the client,
so a client that goes away is noticed by listening for `http.disconnect`; a streaming response
notices it itself (Starlette cancels the body iterator, and `finally` cancels the job).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any, Optional

from starlette.requests import Request

from .errors import RequestError
from .worker import Job

DONE = "data: [DONE]\n\n"
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def sse(obj: Any) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def first_event(job: Job, request: Request) -> Optional[tuple[str, Any]]:
    """The job's next event; None when the client went away first. A deadline that passes while
    the job still waits in the queue is answered here (the worker would only see it later)."""
    get = asyncio.ensure_future(job.events.get())
    gone = asyncio.ensure_future(_disconnected(request))
    timeout = None if job.deadline is None else max(0.0, job.deadline - time.monotonic()) + 0.05
    try:
        done, _ = await asyncio.wait({get, gone}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        get.cancel()
        gone.cancel()
    if get in done:
        return get.result()
    job.cancel.set()
    return None if gone in done else ("error", job.deadline_error())


async def events(job: Job, on_delta: Callable[[str], Optional[dict]], on_done: Callable[[dict], Iterable[dict]],
                 head: Iterable[dict] = ()) -> AsyncIterator[str]:
    """SSE lines for a started job: `head`, deltas (on_delta may hold one back: None; a plan's
    `{"step": ...}` events as its lines complete), the final payload(s) or an error, then [DONE]."""
    try:
        for obj in head:
            yield sse(obj)
        while True:
            kind, value = await job.events.get()
            if kind == "delta":
                if (obj := on_delta(value)) is not None:
                    yield sse(obj)
            elif kind == "step":
                yield sse({"step": value})
            elif kind == "done":
                for obj in on_done(value):
                    yield sse(obj)
                break
            elif kind == "error":
                assert isinstance(value, RequestError)
                yield sse(value.body())
                break
        yield DONE
    finally:
        job.cancel.set()  # the client went away mid-stream (or we are done: then a no-op)
