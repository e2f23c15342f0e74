"""A real HTTP server on loopback that speaks the OpenAI completions API (streamed), standing in for the
network peer where a test needs it to misbehave on cue: answer, answer off the grammar, stall, fail.
It is the peer, not our code: what it is told to answer is the test's input, and the test checks what
the robot's daemon made of it."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, Optional

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Peer:
    def __init__(self) -> None:
        self.mode = "ok"  # ok | stall | http500 | malformed
        self.text = "go_to(fridge)\nopen(fridge)\npick(milk)"
        self.texts: list[str] = []  # answers for the next requests, one each (then `text`)
        self.reply: Optional[Callable[[dict[str, Any]], str]] = None  # body -> answer, before `texts` and `text`
        self.stall_s = 5.0
        self.cached_tokens = 0
        self.requests: list[dict[str, Any]] = []
        self.token: Optional[str] = None  # the bearer token it requires, if any
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        app = Starlette(routes=[Route("/v1/models", self.models), Route("/v1/completions", self.complete,
                                                                          methods=["POST"])])
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> Peer:
        self.thread.start()
        end = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < end, "the peer did not start"
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)

    def _authorized(self, request: Request) -> bool:
        return self.token is None or request.headers.get("authorization") == f"Bearer {self.token}"

    async def models(self, request: Request):
        if not self._authorized(request):
            return JSONResponse({"error": "unauthorized"}, status_code=401)
        return JSONResponse({"object": "list", "data": [{"id": "peer-model", "object": "model"}]})

    async def complete(self, request: Request):
        body = await request.json()
        self.requests.append({"body": body, "authorization": request.headers.get("authorization")})
        if not self._authorized(request):
            return JSONResponse({"error": "unauthorized"}, status_code=401)
        if self.mode == "http500":
            return JSONResponse({"error": "engine died"}, status_code=500)
        mode, stall_s, cached = self.mode, self.stall_s, self.cached_tokens
        text = self.reply(body) if self.reply else self.texts.pop(0) if self.texts else self.text

        async def events():
            if mode == "stall":
                await asyncio.sleep(stall_s)
            if mode == "malformed":
                yield b"data: {not json\n\n"
                return
            pieces = [text[i:i + 5] for i in range(0, len(text), 5)]
            for piece in pieces:
                chunk = {"object": "text_completion", "choices": [{"index": 0, "text": piece, "finish_reason": None}]}
                yield f"data: {json.dumps(chunk)}\n\n".encode()
            done = {"choices": [{"index": 0, "text": "", "finish_reason": "stop"}]}
            yield f"data: {json.dumps(done)}\n\n".encode()
            usage = {"choices": [], "usage": {"prompt_tokens": len(body["prompt"]), "completion_tokens": len(pieces),
                                              "total_tokens": len(body["prompt"]) + len(pieces),
                                              "prompt_tokens_details": {"cached_tokens": cached}}}
            yield f"data: {json.dumps(usage)}\n\n".encode()
            yield b"data: [DONE]\n\n"
        return StreamingResponse(events(), media_type="text/event-stream")
