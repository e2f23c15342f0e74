"""The one thread that owns the engine: a bounded FIFO of jobs, run together (continuous batching).

The engine and the planner are not thread-safe, so everything that touches them (plans, chat
completions, environment switches) runs here. Between two engine steps the thread takes every job
that arrived (as many as the engine runs together), starts it (its request is submitted to the
engine), runs one step, which advances every running request (torch: one forward pass over all of
them; TensorRT-LLM: each one's next response), and then hands each job what its request decided:
text deltas, the final answer, or an error. Requests join and leave between steps. The engine is a
runtime/backend.py `Backend`, either one: this loop serves both. An environment switch is a request
too (it computes and pins the new prefix in the same steps); switches run one at a time, and a plan
uses the version that was current when it began, so no request mixes versions.

This loop is the only stepper of the engine. A job that needs more than one request (a goal plan:
the goal's reading, its candidates) is a task (runtime/tasks.py) that asks for them one at a time;
each is submitted next to every other request, and the task is resumed between two steps once its
request is done, so the others keep decoding meanwhile and no step runs inside another.

A job carries its inputs (a `begin` callable run on this thread, which returns a `JobStart`), a
cancel Event (set when the client goes away), a deadline, and an asyncio queue of events that this
thread feeds through `loop.call_soon_threadsafe`: ("start", None), ("delta", text), then ("done",
payload) or ("error", RequestError). Cancellation, the deadline and a shutdown are checked after
every step; the request is then ended, and what it computed stays in the KV cache.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

from ..errors import EngineRestarted, OrinError, PromptTooLong
from ..planning.planner import Planner
from ..runtime.backend import Request
from ..runtime.block_manager import NoBlocks
from ..runtime.cache import PinTooLarge
from ..runtime.tasks import Task
from .errors import RequestError
from .load_meter import LoadMeter
from .metrics import Metrics

if TYPE_CHECKING:
    from ..planning.step_events import FeasibleSteps

log = logging.getLogger("orin_llm.server")

STALL_WARN_S = 1.0  # a load that stopped the daemon's threads longer than this is logged
SAVE_BUSY_S = 5.0  # while requests keep coming, what changed is saved at most this often (and when idle, at the end)


@dataclass
class JobStart:
    """What a job's `begin(planner)` started (server/jobs.py makes them)."""

    generation: Optional[Request]  # its request, not yet submitted; None: the job was done in begin()
    # (or it is a task's)
    finish: Callable[[float], dict]  # queue_s -> the response payload, once the request (the task) is done;
    # queue_s: the job's wait from its arrival to the moment the engine began its (primary) request
    # turns a streamed plan's text into ("step", {...}) events; made once the primary request is known
    steps: Optional[Callable[[Request], FeasibleSteps]] = None
    task: Optional[Task] = None  # in place of `generation`: the requests it asks for, one at a time


# `exclusive` jobs (Job.exclusive: environment switches) start only when no other exclusive job runs.
Begin = Callable[[Planner], JobStart]


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
    exclusive: bool = False  # an environment switch: one at a time

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


@dataclass
class Active:
    """A started job: its task (its request on the engine now, the primary one), what builds its answer."""

    job: Job
    task: Task
    finish: Callable[[float], dict]
    began: float  # time.monotonic() when the worker started it
    make_steps: Optional[Callable[[Request], FeasibleSteps]] = None
    steps: Optional[FeasibleSteps] = None  # for a streamed plan, once its primary request is known

    @property
    def gen(self) -> Optional[Request]:
        """The request the answer reports (deltas, timings, served_by): the task's primary."""
        return self.task.primary if self.task.primary is not None else self.task.request

    @property
    def request(self) -> Request:
        """The request on the engine now."""
        return self.task.request


class Worker:
    """`make_planner` runs on the engine thread itself (it loads the engine and pins the prefix), so
    that one thread does all of the engine's work. With torch on a CPU that matters: OpenMP gives each
    thread that runs parallel work its own team, and decoding on a second thread next to the loader's
    team ran ~40% slower here (docs/notes/benchmarks-lab-notes.md). The constructor returns at once, so the daemon can
    answer /health while the engine loads: `loaded` says when the planner is built, `wait_loaded()`
    waits for it and raises what building it raised (`load_error`); jobs run from start() on, once
    it is built."""

    planner: Planner  # built by the engine thread (once `loaded`)

    def __init__(self, make_planner: Callable[[], Planner], queue_size: int = 16, metrics: Optional[Metrics] = None,
                 save: Optional[Callable[[Planner], None]] = None, save_idle_s: float = 1.0):
        self.capacity = queue_size
        # what the daemon keeps (default: the engine's lookup histories), saved on this thread once
        # nothing has run for save_idle_s, every SAVE_BUSY_S while busy, after a home is PUT or
        # removed, and when the thread ends (SIGTERM); OSError is logged, the planner goes on
        self.save = save or (lambda planner: planner.engine.save_histories())
        self.save_idle_s = save_idle_s
        self._unsaved = False  # a job ran since the last save
        self.metrics = metrics or Metrics()
        self.active: list[Active] = []
        self.held: list[Job] = []  # exclusive jobs waiting for the one in flight
        self.stop_at: Optional[float] = None  # set by drain(): jobs still running then are ended
        self._queue: queue.Queue[Optional[Job]] = queue.Queue(maxsize=queue_size)
        self._go = threading.Event()  # set by start() (or stop()): the thread may take jobs
        self._built = threading.Event()  # make_planner has returned or raised
        self.load_error: Optional[BaseException] = None
        self.load_report: Optional[dict] = None  # load_meter.py: how long the load took, the longest stall
        self._stopping = False
        self._saved_at = time.monotonic()
        self._thread = threading.Thread(target=self._main, args=(make_planner,), name="orin-llm-engine",
                                        daemon=True)
        self._thread.start()

    @property
    def loaded(self) -> bool:
        """The planner is built (False while loading, and for good if building it failed)."""
        return self._built.is_set() and self.load_error is None

    def wait_loaded(self, timeout_s: Optional[float] = None) -> bool:
        """Wait until the planner is built (True) or timeout_s passed (False); raises what building it raised."""
        if not self._built.wait(timeout_s):
            return False
        if self.load_error is not None:
            raise self.load_error
        return True

    @property
    def depth(self) -> int:
        """Requests waiting: in this queue, or admitted by the worker but not yet by the engine."""
        return self._queue.qsize() + len(self.held) + self.planner.engine.stats().waiting

    @property
    def running(self) -> int:
        return len(self.active)

    @property
    def max_running(self) -> int:
        """Requests that run together: the engine's batch (1 for an engine that runs one at a time)."""
        return self.planner.engine.stats().max_running

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
            # a load cannot be interrupted: a daemon stopped while loading does not wait for it
            self._thread.join(timeout_s if self._built.is_set() else 0)

    # -- the thread ------------------------------------------------------------------------

    def _main(self, make_planner: Callable[[], Planner]) -> None:
        try:
            with LoadMeter() as meter:
                self.planner = make_planner()
            self.load_report = meter.report()
            if meter.longest_stall_s > STALL_WARN_S:
                log.warning("loading the engine kept the daemon's Python from running for up to %.1f s at a time "
                            "(TensorRT-LLM's Executor holds the GIL while it loads): /health could not answer "
                            "meanwhile", meter.longest_stall_s)
            self.metrics.watch(self)
        except BaseException as e:  # raised by wait_loaded()
            self.load_error = e
            return
        finally:
            self._built.set()
        self._go.wait()
        try:
            self._loop()
        finally:
            for a in list(self.active):  # the thread is ending: nothing runs them any more
                self._stop(a, ("shutdown", RequestError(503, "the daemon is shutting down")))
            self._save()

    def _loop(self) -> None:
        engine = self.planner.engine
        while not (self._stopping and not self.active):
            busy = bool(self.active) or engine.busy
            # idle: wait for a job, at most save_idle_s while something is unsaved
            jobs = self._take(block=not busy, timeout_s=self.save_idle_s if self._unsaved else None)
            if not jobs and not busy and not self._stopping:  # save_idle_s passed with nothing to do
                self._save()
            for job in jobs:
                self._begin(job)
            if self.active:
                try:
                    engine.step()
                except Exception as e:  # a bug in a step: every request in it fails, the daemon goes on
                    log.exception("engine step failed")
                    for a in list(self.active):
                        self._fail(a, e)
            self._pump()
            if self._unsaved and time.monotonic() - self._saved_at > SAVE_BUSY_S:
                self._save()

    def _save(self) -> None:
        """Save what the daemon keeps (atomic files: orin_llm/atomic_file.py)."""
        self._saved_at = time.monotonic()
        self._unsaved = bool(self.active)  # what those still running learn is saved once they end
        try:
            self.save(self.planner)
        except OSError as e:  # a full disk must not stop the planner
            log.warning("could not save the daemon's state: %s", e)
        except Exception:  # a bug: say so, and keep planning
            log.exception("saving the daemon's state failed")

    def _saved_home(self, job: Job) -> None:
        """A home was PUT or removed: it is saved before the client hears it was done."""
        if job.endpoint == "environment":
            self._save()

    def _take(self, block: bool, timeout_s: Optional[float] = None) -> list[Job]:
        """Jobs that arrived (waiting for one when nothing runs), and held ones whose turn came; only as
        many as the running batch has room for, so that the rest wait in the bounded queue (which
        answers 503 when full: --queue-size is the backpressure)."""
        jobs = []
        room = self.max_running - len(self.active)
        if not any(a.job.exclusive for a in self.active) and self.held and room > 0:
            jobs.append(self.held.pop(0))
        try:
            while len(jobs) < room:
                job = self._queue.get(block=block and not jobs, timeout=timeout_s)
                if job is None:
                    self._stopping = True
                    break
                jobs.append(job)
                block = False
        except queue.Empty:
            pass
        return jobs

    def _begin(self, job: Job) -> None:
        if job.exclusive and (any(a.job.exclusive for a in self.active) or
                              (self.held and job is not self.held[0])):
            self.held.append(job)  # one environment switch at a time, in order
            return
        if stop := self._why_stop(job):
            return self._end(job, *stop)
        began = time.monotonic()
        self._unsaved = True  # whatever it changes is saved when the daemon is idle again
        try:
            start = job.begin(self.planner)
            if start.generation is None and start.task is None:  # done in begin() (e.g. unpinning a home)
                self._saved_home(job)
                job.emit("done", start.finish(began - job.created))
                self.metrics.count(job.endpoint, "ok")
                return
            a = Active(job, start.task or Task.of(start.generation), start.finish, began, start.steps)
            more = self._next(a)
        except Exception as e:
            return self._end(job, *self._error(job, e))
        if more:
            self.active.append(a)
        else:
            self._answer(a)

    def _next(self, a: Active) -> bool:
        """Resume the job's task and submit the request it asks for next (False: it has returned)."""
        request = a.task.advance()
        if request is None:
            return False
        request.deadline = a.job.deadline  # a remote race or server (backends/) budgets by it
        self.planner.engine.submit(request)
        if request is a.task.primary:
            if a.make_steps is not None:
                a.steps = a.make_steps(request)
            if a.job.stream:
                a.job.emit("start")  # after the goal's reading: a goal it cannot read is still a 422
        return True

    def _pump(self) -> None:
        """Each active job's news since the last step: deltas, then done, failed or stopped."""
        for a in list(self.active):
            request, primary = a.request, a.request is a.task.primary
            if a.job.stream and primary:
                held = a.steps is not None and a.steps.hold  # a goal plan: its text is sent once chosen
                for delta in request.take():
                    if not held:
                        a.job.emit("delta", delta)
                    for step in a.steps.feed(delta) if a.steps else ():
                        a.job.emit("step", step)
            if request.error is not None:
                self._fail(a, request.error)
            elif request.done:
                if a.job.stream and a.steps and primary:
                    for step in a.steps.finish():  # the last line has no newline after it
                        a.job.emit("step", step)
                try:
                    more = self._next(a)  # the task's next request runs in the next step, with the others
                except Exception as e:
                    self.active.remove(a)
                    self._end(a.job, *self._error(a.job, e))
                    continue
                if not more:
                    self.active.remove(a)
                    self._answer(a)
            # the deadline ends the primary request; the task's later requests keep to the time left
            # themselves (goal_search.py: a plan a little late beats none)
            elif stop := self._why_stop(a.job, deadline=a.task.primary is None or not a.task.primary.done):
                self._stop(a, stop)

    def _answer(self, a: Active) -> None:
        """The task has returned: the job's answer (a task may return without a primary request: a
        plan whose goal held already)."""
        queue_s = self._queue_s(a)
        try:
            payload = a.finish(queue_s)
        except Exception as e:
            return self._end(a.job, *self._error(a.job, e))
        self._saved_home(a.job)
        gen = a.gen
        report = gen.report if gen is not None else {}  # served_by, where a remote races
        payload.update(report)
        self.metrics.served(a.job.endpoint, report)
        if a.job.stream and a.task.primary is None:
            a.job.emit("start")  # a stream answered without decoding is still a stream
        a.job.emit("done", payload)
        if gen is not None and gen.result is not None and a.job.endpoint != "environment":
            self.metrics.observe(a.job.endpoint, a.gen.result, queue_wait_s=queue_s,
                                 latency_s=time.monotonic() - a.job.created)
        else:
            self.metrics.count(a.job.endpoint, "ok")

    @staticmethod
    def _queue_s(a: Active) -> float:
        """Arrival to the engine taking the request: the wait for this thread, then for a place in
        the running batch (the generation's own queue_s)."""
        return (a.began - a.job.created) + (a.gen.timings.queue_s if a.gen is not None else 0.0)

    def _stop(self, a: Active, stop: tuple[str, RequestError]) -> None:
        self.active.remove(a)
        self.planner.engine.abort(a.request)  # what it computed stays cached
        a.task.close()
        self._end(a.job, *stop)

    def _fail(self, a: Active, error: BaseException) -> None:
        if a in self.active:
            self.active.remove(a)
        if not a.request.done:
            self.planner.engine.abort(a.request)
        a.task.close()
        self._end(a.job, *self._error(a.job, error))

    def _error(self, job: Job, e: BaseException) -> tuple[str, RequestError]:
        if isinstance(e, RequestError):
            return ("invalid" if e.status < 500 else "error"), e
        if isinstance(e, PromptTooLong):  # over max_input_len: 413, as for an oversized body
            return "invalid", RequestError(413, str(e))
        if isinstance(e, NoBlocks):  # the KV pool is full right now: come back shortly
            return "rejected", RequestError(503, str(e), retry_after=1)
        if isinstance(e, EngineRestarted):  # the engine stalled and was restarted under it: send it again
            return "error", RequestError(503, str(e), retry_after=1)
        if isinstance(e, PinTooLarge):  # the pins would leave no room for a request: not now, not later
            return "invalid", RequestError(507, str(e))
        if isinstance(e, OrinError):  # bad input the runtime caught (speculation, grammar, ...)
            return "invalid", RequestError(422, str(e))
        log.error("%s request failed", job.endpoint, exc_info=e)  # a bug: say so, keep serving the others
        return "error", RequestError(500, f"internal error: {type(e).__name__}: {e}")

    def _why_stop(self, job: Job, deadline: bool = True) -> Optional[tuple[str, RequestError]]:
        now = time.monotonic()
        if deadline and job.deadline is not None and now > job.deadline:
            return "deadline", job.deadline_error()
        if job.cancel.is_set():
            return "cancelled", RequestError(499, "the client went away")
        if self.stop_at is not None and now > self.stop_at:
            return "shutdown", RequestError(503, "the daemon is shutting down")
        return None

    def _end(self, job: Job, outcome: str, error: RequestError) -> None:
        job.emit("error", error)
        self.metrics.count(job.endpoint, outcome)
