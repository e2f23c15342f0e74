"""POST /v1/chat/completions: OpenAI's chat completions, streamed or whole, with tool calls."""

from __future__ import annotations

import asyncio
from typing import Optional

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response

from ..content import BodyRoute
from ..jobs import PlanCheck, chat_chunk, chat_job, chat_meta
from ..plan_calls import CheckedCalls
from ..schemas import ChatRequest
from ..structured import answer_of
from ..tool_calls import Call, CallParser
from ..worker import Job
from .common import ERRORS, arrival, check_stream, respond, sampling
from .state import AppState, app_state

router = APIRouter(route_class=BodyRoute)  # bodies under bodies.py's limits


@router.post("/v1/chat/completions", responses=ERRORS)
async def chat(req: ChatRequest, request: Request, state: AppState = Depends(app_state)) -> Response:
    """OpenAI-compatible chat completion; `model` may name anything, the engine answers.
    `response_format` and `tools` constrain the answer (server/structured.py); streamed tool calls
    come as `delta.tool_calls` pieces, as OpenAI sends them. Calls that are steps of the home are
    checked against its state (server/plan_calls.py): each comes whole once checked."""
    check_stream(req, request)
    wanted = req.max_tokens if req.max_completion_tokens is None else req.max_completion_tokens
    meta = chat_meta(state.engine.name)
    answer = answer_of(req)
    check = PlanCheck(req.feasibility) if answer.parser_mode else None  # calls may be steps of the home
    begin = chat_job(req, sampling(state, req, wanted, req.stops()), meta, answer, state.grammars, state.native_tools,
                     check)
    job = Job("chat", begin, asyncio.get_running_loop(), stream=req.stream, deadline_ms=req.deadline_ms,
              created=arrival(request))
    include_usage = bool(req.stream_options and req.stream_options.include_usage)
    calls = CallParser(answer.parser_mode) if answer.parser_mode else None  # reads a streamed answer

    held = HeldCalls(check)

    def on_delta(text: str) -> Optional[dict]:
        if calls is None:
            return chat_chunk(meta, {"content": text})
        delta = calls.feed(text)
        if calls.is_calls and held.active:
            delta = held.complete(calls)
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


class HeldCalls:
    """A streamed answer's calls when they are steps of the home: each one is held back until it is
    complete and checked against the simulated state, then sent whole (one delta.tool_calls entry);
    under enforce, none after the first that fails."""

    def __init__(self, check: Optional[PlanCheck]):
        self.check = check
        self.checker: Optional[CheckedCalls] = None
        self.seen = self.sent = 0

    @property
    def active(self) -> bool:
        """The job set the world to check against (it did before the first delta, if at all)."""
        return self.check is not None and self.check.world is not None

    def complete(self, parser: CallParser) -> Optional[dict]:
        if self.checker is None:
            assert self.check is not None
            self.checker = self.check.checker()
        assert self.checker is not None
        entries = []
        for call in parser.complete_calls[self.seen:]:
            self.seen += 1
            if self.checker.take(call):
                entries.append(entry(self.sent, call))
                self.sent += 1
        return {"tool_calls": entries} if entries else None


def entry(index: int, call: Call) -> dict:
    return {"index": index, "id": call.id, "type": "function",
            "function": {"name": call.name, "arguments": call.arguments}}
