"""The one thread that owns the engine: a bounded FIFO of jobs, run one at a time.

The engine holds one KV cache and the planner is not thread-safe, so everything that touches
them (plans, chat completions, environment switches) runs here, in arrival order; a switch
therefore lands between two requests and no request mixes environment versions.

A job carries its inputs (a `begin` callable run on this thread), a cancel Event (set when the
client goes away), a deadline, and an asyncio queue of events that this thread feeds through
`loop.call_soon_threadsafe`: ("start", None), ("delta", text), then ("done", payload) or
("error", RequestError). Cancellation, the deadline and a shutdown are checked between tokens;
the generation is then closed, which crops the cache back to the pinned prefix.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional

from ..errors import OrinError, PromptTooLong
from ..runtime.generate import Generation
from ..runtime.planner import Planner
from .errors import RequestError
from .metrics import Metrics

log = logging.getLogger("orin_llm.server")

# begin(planner) -> (generation or None, finish(queue_s) -> response payload); queue_s: the job's wait
# from its arrival to the moment the engine began it
Begin = Callable[[Planner], "tuple[Optional[Generation], Callable[[float], dict]]"]


@dataclass
class Job:
    endpoint: str  # metrics label: plan, chat, environment
    begin: Begin
    loop: asyncio.AbstractEventLoop
    stream: bool = False  # emit start/delta events (otherwise only the final one)
    deadline_ms: Optional[int] = None
    events: asyncio.Queue = field(default_factory=asyncio.Queue)
    cancel: threading.Event = field(default_factory=threading.Event)
    created: float = field(default_factory=time.monotonic)  # arrival (time.monotonic())

    @property
    def deadline(self) -> Optional[float]:
        return self.created + self.deadline_ms / 1000 if self.deadline_ms else None

    def deadline_error(self) -> RequestError:
        return RequestError(504, f"deadline of {self.deadline_ms} ms exceeded")

    def emit(self, kind: str, value: Any = None) -> None:
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, (kind, value))
        except RuntimeError:  # the event loop is closed: nobody is listening any more
            pass


class Worker:
    """`make_planner` runs on the engine thread itself (it loads the engine and pins the prefix), so
    that one thread does all of the engine's work. With torch on a CPU that matters: OpenMP gives each
    thread that runs parallel work its own team, and decoding on a second thread next to the loader's
    team ran ~40% slower here (docs/BENCHMARKS.md). The constructor returns once the planner is
    built, raising what building it raised; jobs run from start() on."""

    planner: Planner  # built by the engine thread

    def __init__(self, make_planner: Callable[[], Planner], queue_size: int = 16, metrics: Optional[Metrics] = None):
        self.capacity = queue_size
        self.metrics = metrics or Metrics()
        self.running: Optional[Job] = None
        self.stop_at: Optional[float] = None  # set by drain(): jobs still running then are ended
        self._queue: queue.Queue[Optional[Job]] = queue.Queue(maxsize=queue_size)
        self._go = threading.Event()  # set by start() (or stop()): the thread may take jobs
        self._built = threading.Event()
        self._build_error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._main, args=(make_planner,), name="orin-llm-engine",
                                        daemon=True)
        self._thread.start()
        self._built.wait()
        if self._build_error is not None:
            raise self._build_error
        self.metrics.watch(self)

    @property
    def depth(self) -> int:
        return self._queue.qsize()

    @property
    def accepting(self) -> bool:
        return self.stop_at is None and self._go.is_set() and self._thread.is_alive()

    def start(self) -> None:
        self._go.set()

    def submit(self, job: Job) -> None:
        if not self.accepting:
            raise RequestError(503, "the daemon is shutting down", retry_after=5)
        try:
            self._queue.put_nowait(job)
        except queue.Full:
            raise RequestError(503, f"busy: {self.capacity} requests are queued already; retry shortly",
                               retry_after=1) from None

    def drain(self, grace_s: float) -> None:
        """Begin a graceful stop: take no new jobs; queued and running ones must end within grace_s
        (minus a margin so their error events still reach the clients before the server gives up)."""
        if self.stop_at is None:
            self.stop_at = time.monotonic() + max(0.0, grace_s - min(1.0, grace_s / 4))

    def stop(self, timeout_s: float = 10.0) -> None:
        self.drain(0.0)
        while True:  # what is still queued ends now, with an error its client may still read
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                self._end(job, "shutdown", RequestError(503, "the daemon is shutting down"))
        if self._thread.is_alive():
            self._queue.put(None)
            self._go.set()
            self._thread.join(timeout_s)

    # -- the thread ------------------------------------------------------------------------

    def _main(self, make_planner: Callable[[], Planner]) -> None:
        try:
            self.planner = make_planner()
        except BaseException as e:  # handed to the constructor, which raises it
            self._build_error = e
            return
        finally:
            self._built.set()
        self._go.wait()
        self._loop()

    def _loop(self) -> None:
        while (job := self._queue.get()) is not None:
            self.running = job
            try:
                self._run(job)
            except RequestError as e:
                self._end(job, "invalid" if e.status < 500 else "error", e)
            except PromptTooLong as e:  # over max_input_len: 413, as for an oversized body
                self._end(job, "invalid", RequestError(413, str(e)))
            except OrinError as e:  # bad input the runtime caught (speculation, empty task, ...)
                self._end(job, "invalid", RequestError(422, str(e)))
            except Exception as e:  # a bug: keep serving the others, say so, keep the traceback
                log.exception("%s request failed", job.endpoint)
                self._end(job, "error", RequestError(500, f"internal error: {type(e).__name__}: {e}"))
            finally:
                self.running = None

    def _why_stop(self, job: Job) -> Optional[tuple[str, RequestError]]:
        now = time.monotonic()
        if job.deadline is not None and now > job.deadline:
            return "deadline", job.deadline_error()
        if job.cancel.is_set():
            return "cancelled", RequestError(499, "the client went away")
        if self.stop_at is not None and now > self.stop_at:
            return "shutdown", RequestError(503, "the daemon is shutting down")
        return None

    def _run(self, job: Job) -> None:
        started = time.monotonic()
        if stop := self._why_stop(job):
            return self._end(job, *stop)
        queue_s = started - job.created
        gen, finish = job.begin(self.planner)
        if gen is None:  # an environment switch: done in begin()
            job.emit("done", finish(queue_s))
            self.metrics.count(job.endpoint, "ok")
            return
        if job.stream:
            job.emit("start")
        it = iter(gen)
        try:
            for delta in it:
                if job.stream:
                    job.emit("delta", delta)
                if stop := self._why_stop(job):
                    break
        finally:
            it.close()  # ends the decode early if we broke out; the cache goes back to the prefix
        if stop:
            return self._end(job, *stop)
        job.emit("done", finish(queue_s))
        assert gen.result is not None
        self.metrics.observe(job.endpoint, gen.result, queue_wait_s=queue_s,
                             latency_s=time.monotonic() - job.created)

    def _end(self, job: Job, outcome: str, error: RequestError) -> None:
        job.emit("error", error)
        self.metrics.count(job.endpoint, outcome)
