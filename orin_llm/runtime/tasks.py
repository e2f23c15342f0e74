"""Work that takes more than one engine request (a goal plan: the goal's reading, candidates, the
search; a pin; a state change), written as a task that asks for plain requests and never steps.

A task is a generator: it yields each request it needs (built, not submitted) and is resumed once
that request is done, reading its result off the request; it returns its answer. Whoever steps the
engine drives it. In the daemon that is the worker alone (server/worker.py): it submits each request
next to every other one and resumes the task between two steps, as vLLM runs a request's n > 1
samples as child requests, so other requests keep decoding while a plan's later candidates run and
no step runs inside another. `drive` is the one synchronous driver, for callers that own the engine
(the CLI, benches, tests, loading).

A task yields `Primary(request)` for the request its answer reports: the one whose text deltas
stream, whose timings and `served_by` the answer carries (a plan's first candidate), with what the
task's caller keeps beside it (`context`: a plan's PlanRun, its world, goal and conversation); the
requests themselves carry nothing of their callers.

Imports nothing of the engines: any Backend's requests will do.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, Generic, Optional, TypeVar, Union

from .backend import Backend, Request

T = TypeVar("T")


@dataclass(frozen=True)
class Primary:
    """The request a task's answer reports (yielded in place of the bare request)."""

    request: Request
    context: Any = None  # what the caller keeps beside it (a plan's PlanRun), read off Task.context


Steps = Generator[Union[Request, Primary], None, T]


class Task(Generic[T]):
    """A task's generator and where it stands: the request in flight, the primary one, its answer."""

    def __init__(self, steps: Steps):
        self._steps = steps
        self.request: Optional[Request] = None  # the one the driver submitted last
        self.primary: Optional[Request] = None
        self.context: Any = None  # the primary's Primary.context
        self.finished = False
        self.value: Optional[T] = None

    @classmethod
    def of(cls, request: Request) -> Task:
        """The task of one request, which is its primary; its answer is the request."""
        def one() -> Steps:
            yield Primary(request)
            return request
        return cls(one())

    def advance(self) -> Optional[Request]:
        """Run the task on to its next request (the last one it asked for is done): that request, to
        submit; None once it has returned (`value`). Raises what the task raised."""
        try:
            asked = next(self._steps)
        except StopIteration as end:
            self.finished, self.value, self.request = True, end.value, None
            return None
        if isinstance(asked, Primary):
            self.context = asked.context
            asked = self.primary = asked.request
        self.request = asked
        return asked

    def close(self) -> None:
        """End the task early (its request failed, was aborted, or its client went)."""
        self._steps.close()


def drive(engine: Backend, work: Union[Task, Steps]) -> Any:
    """Run a task to its end on an engine no one else steps: submit each request it asks for and step
    until it is done; its answer, or the first failed request's error raised. The synchronous driver,
    in this one place (the daemon's worker drives tasks between its own steps)."""
    task = work if isinstance(work, Task) else Task(work)
    request = task.advance()
    while request is not None:
        engine.submit(request)
        while not request.done:
            engine.step()
        if request.error is not None:
            task.close()
            raise request.error
        request = task.advance()
    return task.value


def run(engine: Backend, request: Request) -> Any:
    """One request to its end (`drive` of it): its result, its error raised."""
    drive(engine, Task.of(request))
    return request.result


def run_pin(engine: Backend, ids: list[int]) -> Any:
    """`pin` for either engine: its pin request driven to its end (requests in flight advance too);
    its error raised."""
    request = engine.pin_request(ids)
    drive(engine, Task.of(request))
    return request.pin
