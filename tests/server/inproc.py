"""An app over httpx's ASGI transport with a real Worker on a given engine (the worker on its own thread,
as in a daemon): the routes, the worker and the planner in-process, with no daemon process."""

from __future__ import annotations

import asyncio
from typing import Optional

import httpx

from orin_llm.planning.home import EXAMPLE_HOME_PATH, Environment, load_environment
from orin_llm.planning.planner import Planner
from orin_llm.server.app import AppState, ServerConfig, create_app, open_app
from orin_llm.server.worker import Worker


def serve(engine, payloads: list[dict], environment: Optional[Environment] = None,
          route: str = "/v1/plan") -> list[httpx.Response]:
    """POST each payload to `route` of an app on `engine`, in order (the example home by default)."""
    env = environment or load_environment(EXAMPLE_HOME_PATH)
    worker = Worker(lambda: Planner(engine, env), queue_size=4)
    try:
        worker.wait_loaded(120)
        worker.start()
        state = AppState(ServerConfig(), worker)
        app = create_app(state)
        open_app(app)

        async def go() -> list[httpx.Response]:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://orin-llm",
                                         timeout=120) as c:
                return [await c.post(route, json=p) for p in payloads]
        return asyncio.run(go())
    finally:
        worker.stop()
        if worker.loaded:
            for home in worker.planner.homes.values():
                engine.unpin(home.pin)
                if home.state_pin is not None:
                    engine.unpin(home.state_pin)
