"""The homes: GET|PUT /v1/environment (the default one, ETag / If-Match versions), GET /v1/environments,
and GET|PUT|DELETE /v1/environments/{name} (named homes pinned next to it)."""

from __future__ import annotations

import asyncio
import re
from typing import Optional

from fastapi import APIRouter, Depends, Header, Request
from fastapi.responses import JSONResponse, Response

from ...errors import OrinError
from ...planning.home import environment_from_dict
from ..bodies import BodyError
from ..content import parse_environment_body
from ..errors import RequestError
from ..jobs import environment_job, remove_environment_job
from ..schemas import EnvironmentVersion
from ..worker import Job
from .common import ERRORS, arrival, respond
from .state import AppState, app_state

router = APIRouter()

ENVIRONMENT_BODY = {"required": True, "description": "An environment: JSON in the shape GET /v1/environment "
                    "returns, or the YAML home file as is (Content-Type: application/yaml).",
                    "content": {media: {"schema": {"type": "object", "additionalProperties": True}}
                                for media in ("application/json", "application/yaml")}}


def versioned(r: dict) -> Response:
    return JSONResponse(r, headers={"ETag": f'"{r["version"]}"'})


@router.get("/v1/environment")
async def get_environment(state: AppState = Depends(app_state)) -> Response:
    prefix = state.planner.prefix
    assert prefix is not None
    return JSONResponse(prefix.environment.model_dump(mode="json", exclude_none=True),
                        headers={"ETag": f'"{prefix.version}"'})


@router.put("/v1/environment", responses={200: {"model": EnvironmentVersion}, **ERRORS},
            openapi_extra={"requestBody": ENVIRONMENT_BODY})
async def put_environment(
    request: Request,
    if_match: Optional[str] = Header(None, description='The ETag of GET /v1/environment, e.g. "3".'),
    state: AppState = Depends(app_state),
) -> Response:
    """Replace the home: JSON (the shape GET returns), or the YAML file itself with
    `Content-Type: application/yaml`. Requests already running finish on the old one."""
    env = await environment_of(request, state)
    job = Job("environment", environment_job(env, parse_if_match(if_match)), asyncio.get_running_loop(),
              created=arrival(request), exclusive=True)
    return await respond(state, job, request, versioned)


@router.get("/v1/environments")
async def list_environments(state: AppState = Depends(app_state)) -> dict:
    """The default environment and the named ones, each pinned in the KV cache."""
    homes = list(state.planner.homes.items())
    return {name or "default": {"name": h.prefix.environment.name, "version": h.prefix.version,
                                "prefix_tokens": len(h.prefix.ids)} for name, h in homes}


@router.get("/v1/environments/{name}")
async def get_named_environment(name: str, state: AppState = Depends(app_state)) -> Response:
    check_name(name)
    home = state.planner.homes.get(name)
    if home is None:
        raise RequestError(404, f"no environment named {name!r}; GET /v1/environments lists them")
    return JSONResponse(home.prefix.environment.model_dump(mode="json", exclude_none=True),
                        headers={"ETag": f'"{home.prefix.version}"'})


@router.put("/v1/environments/{name}", responses={200: {"model": EnvironmentVersion}, **ERRORS},
            openapi_extra={"requestBody": ENVIRONMENT_BODY})
async def put_named_environment(
    name: str, request: Request,
    if_match: Optional[str] = Header(None, description='The ETag of GET /v1/environments/NAME, e.g. "3".'),
    state: AppState = Depends(app_state),
) -> Response:
    """Add or replace a named environment, pinned next to the default one (plans choose it with
    "environment": NAME). Refused with 507 when its prefix would not fit the KV cache next to the
    others, naming the numbers."""
    check_name(name)
    env = await environment_of(request, state)
    job = Job("environment", environment_job(env, parse_if_match(if_match), name), asyncio.get_running_loop(),
              created=arrival(request), exclusive=True)
    return await respond(state, job, request, versioned)


@router.delete("/v1/environments/{name}")
async def delete_named_environment(name: str, request: Request, state: AppState = Depends(app_state)) -> Response:
    """Unpin a named environment (requests still running on it finish)."""
    check_name(name)
    job = Job("environment", remove_environment_job(name), asyncio.get_running_loop(), created=arrival(request),
              exclusive=True)
    return await respond(state, job, request, JSONResponse)


async def environment_of(request: Request, state: AppState):
    """The request's body as an environment: JSON, or YAML with Content-Type: application/yaml."""
    body = await request.body()  # within the body limit (BodyLimit counts it)
    try:
        data = await parse_environment_body(body, request.headers.get("content-type"), state.bodies)
        return environment_from_dict(data, source="environment")  # found valid there: milliseconds here
    except BodyError as e:  # a limit of bodies.py (413), or what the parser or the home's check said (422)
        raise RequestError(e.status, e.message) from None
    except (OrinError, ValueError) as e:
        raise RequestError(422, str(e)) from None


def check_name(name: str) -> None:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}", name):
        raise RequestError(422, f"environment name {name!r}: use 1 to 128 letters, digits, '.', '_', ':' or '-', "
                                "starting with a letter or digit")


NAMED = "/v1/environments/"


def unroutable_name(path: str) -> Optional[RequestError]:
    """The answer to a path under /v1/environments/ that no route took (app.py's 404 handler): its name
    holds a '/' (sent as %2F too, which arrives decoded), and a route's {name} is one path segment, so
    it was a bare 404. Now check_name's 422, naming the names allowed; None when the name is a good one."""
    name = path.removeprefix(NAMED)
    name = name.removesuffix("/state")  # /v1/environments/NAME/state, NAME with a "/" in it
    try:
        check_name(name)
    except RequestError as e:
        return e
    return None


def parse_if_match(value: Optional[str]) -> Optional[int]:
    """`"3"`, `W/"3"` or `3` → 3; `*` or no header → None (any version)."""
    if value is None or value.strip() == "*":
        return None
    tag = value.strip().removeprefix("W/").strip('"')
    if not tag.isdigit():
        raise RequestError(412, f'If-Match {value!r} is not an environment ETag like "3"')
    return int(tag)
