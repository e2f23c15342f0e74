"""The worker is the only stepper (issue #42): inside the daemon nothing but the worker's loop calls
`step` (or `run`) on the engine; a goal plan's reading and later candidates, pins and state changes
are requests the loop submits next to the others, so another request keeps decoding while a goal
plan's later candidates run. On the tiny engine, with a real Worker (its own thread, as in a daemon)."""

from __future__ import annotations

import asyncio
import sys
import threading
from dataclasses import dataclass, field

import pytest

from orin_llm.planning.home import EXAMPLE_HOME_PATH, load_environment
from orin_llm.planning.planner import Planner
from orin_llm.runtime.sampling import SamplingParams
from orin_llm.server.jobs import environment_job, plan_job, state_job
from orin_llm.server.schemas import PlanRequest
from orin_llm.server.worker import Job, Worker
from tests.conftest import tiny_fixture

tiny_engine = tiny_fixture("engine")  # random weights do here (tests/conftest.py)
TASK = "Bring the milk from the fridge to the coffee table."
WORKER = "orin_llm/server/worker.py"


class Recording:
    """The engine, with every step() and run() recorded: who called it, and which requests it ran."""

    def __init__(self, engine):
        self._engine = engine
        self.calls: list[tuple[str, str, str]] = []  # (method, caller's file, caller's function)
        self.ran: list[list] = []  # per step: the requests it ran
        self.recording = False  # from the worker's start on (loading pins the home by driving, on its thread)
        self.lock = threading.Lock()

    def __getattr__(self, name):  # test code: the engine as it is, but for step and run
        return getattr(self._engine, name)

    def _record(self, method: str) -> None:
        caller = sys._getframe(2)
        if self.recording:
            self.calls.append((method, caller.f_code.co_filename, caller.f_code.co_name))

    def step(self):
        self._record("step")
        ran = self._engine.step()
        if self.recording:
            self.ran.append(list(ran))
        return ran

    def run(self, request):
        self._record("run")
        return self._engine.run(request)


@dataclass
class Watched(Job):
    """A job whose events are noted on the worker's thread with the engine's step count at the time."""

    log: list = field(default_factory=list)
    engine: object = None

    def emit(self, kind, value=None):
        self.log.append((kind, len(self.engine.ran)))
        super().emit(kind, value)


@pytest.fixture
def worker(tiny_engine):
    recording = Recording(tiny_engine)
    w = Worker(lambda: Planner(recording, load_environment(EXAMPLE_HOME_PATH)), queue_size=8)
    w.wait_loaded(120)
    recording.recording = True
    w.start()
    yield w, recording
    w.stop()
    for home in w.planner.homes.values():
        tiny_engine.unpin(home.pin)
        if home.state_pin is not None:
            tiny_engine.unpin(home.state_pin)


def run_jobs(worker: Worker, recording: Recording, *jobs: tuple) -> list[list]:
    """Submit the jobs at once (endpoint, begin, stream) and collect each one's events to its answer."""
    loop = asyncio.new_event_loop()
    try:
        made = [Watched(endpoint, begin, loop, stream=stream, engine=recording) for endpoint, begin, stream in jobs]
        for job in made:
            worker.submit(job)

        async def collect(job):
            events = []
            while not events or events[-1][0] not in ("done", "error"):
                events.append(await asyncio.wait_for(job.events.get(), 120))
            return events
        async def every():
            return await asyncio.gather(*(collect(j) for j in made))
        return loop.run_until_complete(every()), made
    finally:
        loop.close()


def plan(**kw):
    req = PlanRequest(task=TASK, speculation="none", **kw)
    return plan_job(req, SamplingParams(max_tokens=req.max_tokens or 16))


def test_only_the_worker_loop_steps_the_engine(worker):
    w, recording = worker
    # 4 tokens write no whole step: every candidate misses, so the goal plans run their later candidates
    (facts, inferred, state, env, _), _ = run_jobs(
        w, recording, ("plan", plan(goal=["at(milk, coffee_table)"], max_tokens=4), False),
        ("plan", plan(goal="infer", max_tokens=4), True),
        ("state", state_job({"robot_at": "kitchen"}, None), False),
        ("environment", environment_job(load_environment(EXAMPLE_HOME_PATH), None, "lab"), False),
        ("plan", plan(max_tokens=8), True))
    for events in (facts, inferred, state, env):
        assert events[-1][0] == "done", events[-1]
    assert facts[-1][1]["search"]["candidates"] == 2 and inferred[-1][1]["goal_inferred"]
    assert [e[0] for e in inferred][:1] == ["start"]  # a stream starts once the goal is read
    callers = {(method, file.rsplit("orin_llm/", 1)[-1], fn) for method, file, fn in recording.calls}
    assert callers == {("step", "server/worker.py", "_loop")}, callers


def test_another_request_decodes_while_a_goal_plans_later_candidates_run(worker):
    w, recording = worker
    (goal, other), (_, watched) = run_jobs(
        w, recording, ("plan", plan(goal=["at(milk, coffee_table)"], max_tokens=4), False),
        ("plan", plan(max_tokens=64, constrained=False), True))
    assert goal[-1][0] == "done" and other[-1][0] == "done"
    assert goal[-1][1]["search"]["candidates"] == 2
    later = [i for i, ran in enumerate(recording.ran)
             if any(g.params.seed == 1 and g.params.temperature > 0 and g.constraint is not None
                    for g in ran)]  # the steps that ran the goal's second candidate (sampled, seed 1; the other
    # request is unconstrained and unseeded)
    assert later, "the second candidate never ran in a step of the worker's loop"
    assert any(len(recording.ran[i]) == 2 for i in later)  # it ran in the same steps as the other request
    # and the other request's text reached its client meanwhile, not after the goal plan was answered
    deltas = [at for kind, at in watched.log if kind == "delta"]
    assert any(later[0] <= at <= later[-1] + 1 for at in deltas), (later, deltas)
