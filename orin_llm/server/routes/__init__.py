"""The daemon's HTTP routes, one router per concern, each reading what it shares through `AppState`
(routes/state.py) so that a route can be tested without a daemon.

health.py (/health, /metrics) imports no torch, so a daemon answers it within a second of binding,
while the engine still loads; the engine's routes (`engine_routers`) are added once it has loaded.
"""

from __future__ import annotations

from fastapi import APIRouter


def engine_routers() -> list[APIRouter]:
    """The routes that run jobs on the engine: importing them imports the runtime (torch)."""
    from . import chat, environment, home_state, plan

    return [environment.router, home_state.router, plan.router, chat.router]
