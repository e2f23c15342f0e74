"""POST /v1/plan: a plan for a task in the current environment."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response

from ...planning.step_events import final_steps
from ..content import BodyRoute
from ..jobs import plan_job
from ..schemas import PlanRequest, PlanResponse
from ..worker import Job
from .common import ERRORS, arrival, check_stream, respond, sampling
from .state import AppState, app_state

router = APIRouter(route_class=BodyRoute)  # bodies under bodies.py's limits


@router.post("/v1/plan", responses={200: {"model": PlanResponse, "description": "The plan; with `stream`, "
                                          "text/event-stream ending with this object and [DONE]."}, **ERRORS})
async def plan(req: PlanRequest, request: Request, state: AppState = Depends(app_state)) -> Response:
    """A plan for a task in the current environment; `stream` sends SSE: `{"delta"}` events and
    `{"step"}` events (each step once complete and feasible; with a goal, the chosen plan's text and
    steps once it is chosen), then the full response, then `[DONE]`."""
    check_stream(req, request)
    arrived = arrival(request)
    job = Job("plan", plan_job(req, sampling(state, req, req.max_tokens), arrived), asyncio.get_running_loop(),
              stream=req.stream, deadline_ms=req.deadline_ms, created=arrived)

    def on_done(answer: dict) -> list[dict]:
        # with a goal (given, or read in the task) the text and the step events were held back until the plan
        # was chosen: a candidate the search dropped never reaches the client (worker.py)
        if answer.get("goal_reached") is None:
            return [answer]
        text = [{"delta": answer["plan"]}] if answer["plan"] else []
        return [*text, *({"step": s} for s in final_steps(answer)), answer]
    return await respond(state, job, request, JSONResponse, on_done=on_done)
