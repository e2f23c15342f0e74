"""What every route shares, passed explicitly: the worker, the limits, the metrics.

The state exists before the engine: a daemon serves /health while its worker loads, and `open()`
fills in what depends on the engine (the max_tokens limit, the grammar cache, whether the chat
template speaks tools) once it has loaded.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

from fastapi import Request

from ..body_process import BodyProcess
from ..metrics import Metrics

if TYPE_CHECKING:
    from ..worker import Worker


@dataclass
class ServerConfig:
    max_body_bytes: int = 256 * 1024
    default_max_tokens: int = 128
    max_tokens_limit: Optional[int] = None  # a cap below the engine's own output limit


def engine_max_tokens(engine: Any) -> int:
    """Most new tokens a request may ask for: prompt (≤ max_input_len) + output ≤ max_seq_len."""
    limits = engine.manifest.limits
    return limits.get("max_output_len") or limits["max_seq_len"] - limits["max_input_len"]


@dataclass
class AppState:
    config: ServerConfig = field(default_factory=ServerConfig)
    worker: Optional[Worker] = None  # None until the daemon has made it (it imports the runtime)
    metrics: Metrics = field(default_factory=Metrics)
    started: float = field(default_factory=time.monotonic)  # for /health's loading_s
    serving: bool = False  # open(): the engine's routes are in place and the worker has loaded
    limit: int = 0  # most max_tokens a request may ask for (open())
    grammars: Any = None  # chat answers' grammars (response_format, tools), used on the engine's thread
    native_tools: bool = False  # the chat template renders tools itself
    state_dir: Any = None  # server/state_dir.py's StateDir: what the daemon keeps (None: in-process tests)
    bodies: BodyProcess = field(default_factory=BodyProcess)  # homes' bodies are read there (started on first use)

    @property
    def ready(self) -> bool:
        """Requests may reach the engine's routes."""
        return self.serving and self.worker is not None and self.worker.loaded

    @property
    def planner(self):
        assert self.worker is not None
        return self.worker.planner

    @property
    def engine(self):
        return self.planner.engine

    def open(self) -> None:
        """The worker has loaded: derive what the routes need from its engine, then serve them."""
        from ..structured import GrammarCache
        from ..tool_calls import template_speaks_tools

        engine = self.engine
        self.limit = min(self.config.max_tokens_limit or engine_max_tokens(engine), engine_max_tokens(engine))
        self.grammars = GrammarCache()
        self.native_tools = template_speaks_tools(engine.tokenizer)
        self.serving = True


def app_state(request: Request) -> AppState:
    """The FastAPI dependency that hands a route its app's state."""
    return request.app.state.orin
