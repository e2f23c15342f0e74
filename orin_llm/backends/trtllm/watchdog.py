"""The watchdog for TensorRT-LLM 0.12's executor hang: requests in flight and no progress for too long.

0.12's executor has a race when requests are cancelled that hangs it ("Fixed the hang caused by race
condition when canceling requests", v0.13.0 release notes), and the runtime cancels often: stop strings,
disconnected clients, deadlines, hedged plans the remote won. A hung executor answers nothing, so every
request in flight would wait forever. `TrtllmEngine.step` asks `Watchdog.check` after each step: when
requests are in flight and none received a response for the profile's `executor_stall_s`, the engine fails
those requests with the reason (`ExecutorStalled`), shuts the executors down on a thread of their own
(`shutdown` releases the GIL, J executor.cpp; one that does not return in SHUTDOWN_WAIT_S is left
behind, its memory with it, and the report says so), creates new ones from the same engine files and goes
on with the requests that were waiting. 0.12 cannot keep an engine loaded across executors: an Executor
deserializes its engine file itself (no binding shares one), so the new ones read the files again, from
the page cache once the first load read them.

What it cannot catch: a `cancel_request` call that itself never returns. 0.12 binds it without releasing
the GIL (J cpp/tensorrt_llm/pybind/executor/executor.cpp, `.def("cancel_request", ...)`), so such a call
would stop every Python thread of the daemon; only a supervisor outside the process (systemd) could
restart it. The hang the release notes name is the executor's loop; its cancel call is assumed to return
(the fake does so: tests/backends/trtllm/fake_trtllm.py `HANG_AFTER_CANCEL`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Optional

from ...errors import EngineRestarted

DEFAULT_STALL_S = 30.0  # Profile.executor_stall_s's default (profile.py)
SHUTDOWN_WAIT_S = 10.0


class ExecutorStalled(EngineRestarted):
    """A request failed because the executor made no progress; the daemon answers 503 with Retry-After."""


class Watchdog:
    def __init__(self, stall_s: float = DEFAULT_STALL_S, clock: Callable[[], float] = time.monotonic):
        self.stall_s, self.clock = stall_s, clock
        self.since = clock()  # the last time something moved, or nothing was in flight
        self.restarts = 0
        self.last: Optional[str] = None  # the last restart's reason
        self.left_behind = 0  # executors whose shutdown did not return (their memory is still held)

    def check(self, in_flight: int, moved: bool) -> Optional[float]:
        """Seconds without progress when over the limit with requests in flight; else None."""
        now = self.clock()
        if not in_flight or moved:
            self.since = now
            return None
        stalled = now - self.since
        return stalled if stalled > self.stall_s else None

    def restarted(self, reason: str, left_behind: int) -> None:
        self.restarts += 1
        self.last = reason
        self.left_behind += left_behind
        self.since = self.clock()

    def report(self) -> dict:
        return {"stall_s": self.stall_s, "restarts": self.restarts, "last_restart": self.last,
                "left_behind": self.left_behind}


def shut_down(executors: list[Any], wait_s: float = SHUTDOWN_WAIT_S) -> int:
    """Shut each executor down on a thread of its own; how many did not finish within `wait_s`."""
    threads = [threading.Thread(target=ex.shutdown, name="orin-llm-executor-shutdown", daemon=True)
               for ex in executors]
    for t in threads:
        t.start()
    deadline = time.monotonic() + wait_s
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    return sum(t.is_alive() for t in threads)
