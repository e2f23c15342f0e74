"""The worker builds the planner on its own thread, so one thread does all of the engine's work; its
constructor returns at once (tests/server/test_routes.py: /health while it loads); one loop serves both
backends, the TensorRT-LLM one on the fake executor and on the real bindings (`eng`,
tests/backends/trtllm/trtllm_both.py)."""

import asyncio
import threading

import pytest

from orin_llm.errors import OrinError
from orin_llm.planning.home import EXAMPLE_HOME_PATH, load_environment
from orin_llm.planning.planner import Planner
from orin_llm.runtime.sampling import SamplingParams
from orin_llm.server.jobs import environment_job, plan_job
from orin_llm.server.schemas import PlanRequest
from orin_llm.server.worker import Job, Worker
from tests.backends.trtllm.test_trtllm_engine import all_read, target_executor
from tests.backends.trtllm.test_trtllm_grammar import SMALL_HOME
from tests.backends.trtllm.trtllm_both import on_fake


@pytest.mark.full
def test_the_planner_is_built_on_the_engine_thread_and_jobs_wait_for_start(engine):
    built_on = []

    def make():
        built_on.append(threading.current_thread().name)
        return Planner(engine, load_environment(EXAMPLE_HOME_PATH))

    worker = Worker(make, queue_size=2)
    try:
        assert worker.wait_loaded(120)
        assert built_on == ["orin-llm-engine"] and worker.planner.prefix is not None
        assert not worker.accepting  # built, but no jobs before start()
        worker.start()
        assert worker.accepting
    finally:
        worker.stop()
    assert not worker.accepting


def test_a_planner_that_cannot_be_built_is_raised_by_wait_loaded():
    def make():
        raise OrinError("engines/x: no manifest.json; build it with orin-llm build")

    worker = Worker(make)  # returns at once: the daemon answers /health while it loads
    with pytest.raises(OrinError, match="no manifest.json"):
        worker.wait_loaded(30)
    assert not worker.loaded and isinstance(worker.load_error, OrinError)
    worker.stop()

# ---------------------------------------------------------------------------------- one loop, both backends


def run_job(worker: Worker, endpoint: str, begin, **options) -> list[tuple[str, object]]:
    """Submit a job and collect its events until its answer or error, as a route does."""
    loop = asyncio.new_event_loop()
    try:
        job = Job(endpoint, begin, loop, **options)
        worker.submit(job)

        async def collect():
            events = []
            while not events or events[-1][0] not in ("done", "error"):
                events.append(await asyncio.wait_for(job.events.get(), 60))
            return events
        return loop.run_until_complete(collect())
    finally:
        loop.close()


@pytest.mark.full  # the fake's case: the real engine's tokenizer and configs behind the fake
def test_one_worker_loop_serves_a_tensorrt_llm_engine(eng):
    """The loop the torch engine runs in serves TrtllmEngine too (its step: each request's next response):
    a streamed plan, an environment switch as a pin request, a request ended when its client goes, and
    the loop serving the next one after it."""
    worker = Worker(lambda: Planner(eng, SMALL_HOME), queue_size=4)
    try:
        worker.wait_loaded(60)
        worker.start()
        # the engine's max_batch_size (what the plan reserved KV for), batched inside the executor
        assert worker.max_running == eng.manifest.limits["max_batch_size"] > 1 and worker.depth == 0
        req = PlanRequest(task="Put the mug in the sink.", max_tokens=12, constrained=False)
        params = SamplingParams(max_tokens=12)
        events = run_job(worker, "plan", plan_job(req, params), stream=True)
        kinds = [k for k, _ in events]
        assert kinds[0] == "start" and kinds[-1] == "done" and "delta" in kinds
        payload = events[-1][1]
        streamed = "".join(v for k, v in events if k == "delta")
        assert streamed.strip() == payload["plan"] and payload["timings"]["completion_tokens"] > 0
        # the pinned home's stored blocks, measured by the executor (none where the engine keeps no blocks)
        assert (payload["timings"]["cached_prompt_tokens"] > 0) == eng.block_reuse

        renamed = SMALL_HOME.model_copy(update={"name": "small_home_v2"})
        events = run_job(worker, "environment", environment_job(renamed, if_match=1), exclusive=True)
        assert events[-1] == ("done", {"version": 2, "name": "small_home_v2",
                                       "prefix_tokens": len(worker.planner.prefix.ids)})
        assert eng.pins == [tuple(worker.planner.prefix.ids)]  # the new version pinned, the old one forgotten

        jobs: list[Job] = []
        plan = plan_job(req.model_copy(update={"max_tokens": 64, "speculation": "none"}), SamplingParams(max_tokens=64))

        def begin_then_go_away(planner):  # the client leaves once its request started: ended after one step
            start = plan(planner)
            jobs[0].cancel.set()
            return start
        loop = asyncio.new_event_loop()
        try:
            jobs.append(Job("plan", begin_then_go_away, loop))
            worker.submit(jobs[0])
            kind, error = loop.run_until_complete(asyncio.wait_for(jobs[0].events.get(), 60))
        finally:
            loop.close()
        assert kind == "error" and error.status == 499
        assert not eng.busy
        fake = on_fake(eng)
        if fake is not None:
            assert target_executor(fake).cancelled and all_read(fake)  # its request cancelled, nothing left queued
        # the cancelled request left nothing behind: the next plan is served in full
        events = run_job(worker, "plan", plan_job(req, params))
        assert events[-1][0] == "done" and events[-1][1]["timings"]["completion_tokens"] > 0
    finally:
        worker.stop()
