"""How long the engine's load kept the daemon's Python from running, reported instead of assumed away.

TensorRT-LLM 0.12's `Executor(...)` reads and deserializes its engine inside C++ that keeps the GIL (J
cpp/tensorrt_llm/pybind/executor/executor.cpp: plain `py::init`, no `gil_scoped_release`), once per engine.
Meanwhile no Python thread of the daemon runs, its event loop included: /health cannot answer "loading"
and a connection waits in the socket's backlog until the load lets go. The load cannot move to a child
process (the executor must live where its requests are stepped), so the daemon measures it: a thread that
wakes every TICK_S records the longest gap between its wake-ups while the engine loads. The worker logs it,
and /health reports it under `load`; `orin-llm health --wait` keeps retrying through such a gap.
"""

from __future__ import annotations

import threading
import time
from typing import Optional

TICK_S = 0.05


class LoadMeter:
    def __init__(self, tick_s: float = TICK_S):
        self.tick_s = tick_s
        self.seconds: Optional[float] = None
        self.longest_stall_s = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._tick, name="orin-llm-load-meter", daemon=True)

    def _tick(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(self.tick_s):
            now = time.monotonic()
            self.longest_stall_s = max(self.longest_stall_s, now - last - self.tick_s)
            last = now

    def __enter__(self) -> LoadMeter:
        self._t0 = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.seconds = time.monotonic() - self._t0

    def report(self) -> dict:
        return {"seconds": round(self.seconds or 0.0, 3), "longest_stall_s": round(self.longest_stall_s, 3)}
