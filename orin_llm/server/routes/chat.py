"""POST /v1/chat/completions: OpenAI's chat completions, streamed or whole, with tool calls."""

from __future__ import annotations

import asyncio
from typing import Optional

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response

from ..jobs import chat_chunk, chat_job, chat_meta
from ..schemas import ChatRequest
from ..structured import answer_of
from ..tool_calls import CallParser
from ..worker import Job
from .common import ERRORS, arrival, check_stream, respond, sampling
from .state import AppState, app_state

router = APIRouter()


@router.post("/v1/chat/completions", responses=ERRORS)
async def chat(req: ChatRequest, request: Request, state: AppState = Depends(app_state)) -> Response:
    """OpenAI-compatible chat completion; `model` may name anything, the engine answers.
    `response_format` and `tools` constrain the answer (server/structured.py); streamed tool calls
    come as `delta.tool_calls` pieces, as OpenAI sends them."""
    check_stream(req, request)
    wanted = req.max_tokens if req.max_completion_tokens is None else req.max_completion_tokens
    meta = chat_meta(state.engine.name)
    answer = answer_of(req)
    begin = chat_job(req, sampling(state, req, wanted, req.stops()), meta, answer, state.grammars, state.native_tools)
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
    return await respond(state, job, request, JSONResponse, on_delta=on_delta, on_done=on_done,
                         head=[chat_chunk(meta, head)])
