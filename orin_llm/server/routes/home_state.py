"""The state of a home over time: GET|PATCH /v1/environment/state (the default home) and
/v1/environments/{name}/state (a named one).

The robot reports what really happened (where it is, what it holds, where things lie, what is open
or on) without sending the home again: the static home stays pinned in the KV cache and only the
state, rendered after it, is computed again. A PATCH names only what changed; a state naming things
the home does not have gets 422 saying what to fix, and nothing changes. Plans that are running
keep the state they began with.
"""

from __future__ import annotations

import asyncio
from typing import Any, Optional

from fastapi import APIRouter, Body, Depends, Request
from fastapi.responses import JSONResponse, Response

from ...planning.home.state import HomeState
from ..content import BodyRoute
from ..errors import RequestError
from ..jobs import state_job
from ..schemas import StateChange, check_utf8
from ..worker import Job
from .common import ERRORS, arrival, respond
from .environment import check_name
from .state import AppState, app_state

router = APIRouter(route_class=BodyRoute)  # bodies under bodies.py's limits

UPDATE = Body(description="What changed: any of robot_at, holding, object_at, open, on, said (the keys GET "
                          "returns); keys left out stay as they are, null makes a fact unknown.",
              examples=[{"robot_at": "kitchen", "holding": "mug", "open": {"fridge": True}}])


@router.get("/v1/environment/state")
async def get_default_state(state: AppState = Depends(app_state)) -> Response:
    """The default home's current state (what plans start from)."""
    return current_state(state, None)


@router.get("/v1/environments/{name}/state")
async def get_named_state(name: str, state: AppState = Depends(app_state)) -> Response:
    """A named home's current state."""
    check_name(name)
    return current_state(state, name)


@router.patch("/v1/environment/state", responses={200: {"model": StateChange}, **ERRORS})
async def patch_default_state(request: Request, update: dict[str, Any] = UPDATE,
                              state: AppState = Depends(app_state)) -> Response:
    """Change the default home's state: {state, environment_version, computed_tokens}."""
    return await change_state(state, request, update, None)


@router.patch("/v1/environments/{name}/state", responses={200: {"model": StateChange}, **ERRORS})
async def patch_named_state(name: str, request: Request, update: dict[str, Any] = UPDATE,
                            state: AppState = Depends(app_state)) -> Response:
    """Change a named home's state."""
    check_name(name)
    return await change_state(state, request, update, name)


def current_state(state: AppState, name: Optional[str]) -> Response:
    home = state.planner.homes.get(name)
    if home is None:
        raise RequestError(404, f"no environment named {name!r}; GET /v1/environments lists them")
    env = home.prefix.environment
    if env.is_text:
        raise RequestError(422, f"environment {env.name!r} is plain text: it has no state; give it rooms and actions")
    # what plans start from: the robot's last report, else the home's own state:, else only an empty hand
    current = state.planner.current_state(name) or HomeState()
    return JSONResponse(current.model_dump(mode="json"), headers={"ETag": f'"{home.prefix.version}"'})


async def change_state(state: AppState, request: Request, update: dict[str, Any], name: Optional[str]) -> Response:
    try:
        check_utf8(update)
    except ValueError as e:
        raise RequestError(422, str(e)) from None
    # one at a time and in order, as environment switches: a later report must not be overtaken
    job = Job("state", state_job(update, name), asyncio.get_running_loop(), created=arrival(request),
              exclusive=True)
    return await respond(state, job, request, JSONResponse)
