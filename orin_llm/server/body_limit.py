"""ASGI middleware: refuse request bodies over a size limit with 413, before parsing them.

A declared Content-Length over the limit is answered at once; a chunked body is counted as it
arrives. Either way the rest of a moderately large body is read and dropped first: a client
still writing its body would otherwise see a broken pipe instead of the 413.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Optional

from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .errors import error_body

DRAIN_MAX = 16 << 20  # read and drop at most this much of an oversized body, then just close


class BodyLimit:
    def __init__(self, app: ASGIApp, limit: int, on_reject: Optional[Callable[[str], None]] = None):
        self.app, self.limit, self.on_reject = app, limit, on_reject

    def message(self) -> str:
        return f"request body over the limit of {self.limit} bytes"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope["headers"]).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.limit:
            if int(declared) <= DRAIN_MAX:
                await self._drain(receive, 0)
            if self.on_reject:
                self.on_reject(scope["path"])
            response = JSONResponse(error_body(413, self.message()), status_code=413,
                                    headers={"Connection": "close"})
            return await response(scope, receive, send)
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    if message.get("more_body"):
                        await self._drain(receive, seen)
                    raise HTTPException(413, self.message())  # FastAPI re-raises it as is
            return message

        await self.app(scope, counted, send)

    @staticmethod
    async def _drain(receive: Receive, seen: int) -> None:
        while seen <= DRAIN_MAX:
            message = await receive()
            if message["type"] != "http.request":
                return
            seen += len(message.get("body", b""))
            if not message.get("more_body"):
                return
