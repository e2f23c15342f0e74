"""The executor watchdog (orin_llm/backends/trtllm/watchdog.py) against the fake executor that hangs after a
cancel, as 0.12's cancel race does (fake_trtllm.HANG_AFTER_CANCEL): the requests in flight fail with the
reason, new executors replace the hung ones, the waiting requests and the next ones are served, and the
restart is reported where /health and /metrics read it."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from orin_llm.backends.trtllm.engine import TrtllmEngine
from orin_llm.backends.trtllm.watchdog import ExecutorStalled, Watchdog
from orin_llm.planning.planner import Planner
from orin_llm.runtime.sampling import SamplingParams
from orin_llm.server.jobs import plan_job
from orin_llm.server.schemas import PlanRequest
from orin_llm.server.worker import Job, Worker
from tests.conftest import tiny_fixture

from .test_trtllm_engine import install_models, make_engine_dir
from .test_trtllm_grammar import SMALL_HOME

tiny_engine_dir = tiny_fixture("engine_dir")  # random weights do here (tests/conftest.py)
STALL_S = 0.5


def test_the_watchdog_counts_time_without_progress_only_with_requests_in_flight():
    now = [0.0]
    w = Watchdog(2.0, clock=lambda: now[0])
    now[0] = 5.0
    assert w.check(in_flight=0, moved=False) is None  # nothing in flight: never a stall
    now[0] = 6.0
    assert w.check(1, moved=True) is None
    now[0] = 7.9
    assert w.check(1, moved=False) is None
    now[0] = 8.5
    assert w.check(1, moved=False) == pytest.approx(2.5)
    w.restarted("why", left_behind=0)
    assert w.check(1, moved=False) is None and w.report()["restarts"] == 1 and w.report()["last_restart"] == "why"


@pytest.fixture
def hanging(tmp_path, engine_dir, fake):
    """A loaded engine whose profile allows STALL_S without progress, on the fake that hangs after a cancel."""
    path = make_engine_dir(engine_dir, tmp_path / "trt", draft=False, max_draft_len=0, limits={"max_batch_size": 2})
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["profile"]["executor_stall_s"] = STALL_S
    (path / "manifest.json").write_text(json.dumps(manifest))
    fake.HANG_AFTER_CANCEL = True
    eng = TrtllmEngine.load(path)
    eng.reference = install_models(fake, eng)
    yield eng
    eng.close()


def step_until(eng, done, timeout_s: float = 20.0) -> None:
    end = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < end, "timed out stepping the engine"
        eng.step()


def test_a_hung_executor_fails_the_requests_in_flight_restarts_and_serves_again(hanging, fake):
    eng = hanging
    prompt = eng.tokenizer.encode("robot cup", add_special_tokens=False)
    params = SamplingParams(max_tokens=200, temperature=0.0)
    victim, bystander = eng.generate(prompt, params, "none"), eng.generate(prompt, params, "none")
    late = eng.generate(prompt, params, "none")
    for g in (victim, bystander, late):
        eng.submit(g)
    step_until(eng, lambda: victim.take() and bystander.take())  # both running, the third waits for room
    assert late in eng.waiting
    old = list(eng.executors)
    eng.abort(victim)  # a stop string or a client gone: cancel_request, and the fake's executor hangs
    t0 = time.monotonic()
    step_until(eng, lambda: bystander.done and late.done)  # `late` took the room and was enqueued: it hangs too
    stalled_after = time.monotonic() - t0
    for g in (bystander, late):
        assert isinstance(g.error, ExecutorStalled), g.error
    assert STALL_S <= stalled_after < STALL_S + 5
    assert "made no progress for" in str(late.error) and "2 request(s) in flight" in str(late.error)
    assert "executor_stall_s" in str(late.error)
    assert all(ex.is_shut_down for ex in old) and eng.target_executor not in old
    report = eng.kv_usage()["executor"]
    assert report["restarts"] == 1 and report["left_behind"] == 0 and "no progress" in report["last_restart"]
    # the next request runs on the new executor, as it would have alone
    again = eng.generate(prompt, SamplingParams(max_tokens=6, temperature=0.0), "none")
    eng.submit(again)
    step_until(eng, lambda: again.done)
    assert again.error is None and again.result.token_ids == eng.reference.greedy_run(prompt, 6)
    assert eng.watchdog.restarts == 1 and not eng.busy


def test_without_a_cancel_nothing_restarts(hanging):
    """A slow executor is not a hung one: with progress, the watchdog stays quiet however long it runs."""
    eng = hanging
    prompt = eng.tokenizer.encode("robot cup", add_special_tokens=False)
    gen = eng.generate(prompt, SamplingParams(max_tokens=40, temperature=0.0), "none")
    eng.submit(gen)
    step_until(eng, lambda: gen.done)
    assert gen.error is None and eng.watchdog.restarts == 0


def test_the_daemon_answers_503_for_a_stalled_request_then_keeps_serving(hanging):
    """Through the worker the daemon runs: the stalled request's client gets 503 with Retry-After and the
    reason; the next plan is served; /health's and /metrics' source (kv_usage) counts the restart."""
    eng = hanging
    worker = Worker(lambda: Planner(eng, SMALL_HOME), queue_size=4)
    try:
        worker.wait_loaded(60)
        worker.start()
        req = PlanRequest(task="Put the mug in the sink.", max_tokens=200, constrained=False, speculation="none")
        loop = asyncio.new_event_loop()
        try:
            leaving = Job("plan", plan_job(req, SamplingParams(max_tokens=200)), loop, stream=True)
            staying = Job("plan", plan_job(req, SamplingParams(max_tokens=200)), loop, stream=True)
            worker.submit(leaving)
            worker.submit(staying)

            async def events(job):
                out = []
                while not out or out[-1][0] not in ("done", "error"):
                    out.append(await asyncio.wait_for(job.events.get(), 60))
                    if out[-1][0] == "delta" and job is leaving:
                        job.cancel.set()  # the client goes away: the worker cancels, the executor hangs
                return out
            left = loop.run_until_complete(events(leaving))
            stayed = loop.run_until_complete(events(staying))
        finally:
            loop.close()
        assert left[-1][0] == "error" and left[-1][1].status == 499
        kind, error = stayed[-1]
        assert kind == "error" and error.status == 503 and error.retry_after == 1
        assert "made no progress" in str(error)
        assert eng.kv_usage()["executor"]["restarts"] == 1
        assert "orin_llm_executor_restarts 1.0" in worker.metrics.render().decode()  # what /metrics serves
        from tests.server.test_worker import run_job

        again = run_job(worker, "plan", plan_job(req.model_copy(update={"max_tokens": 8}),
                                                 SamplingParams(max_tokens=8)))
        assert again[-1][0] == "done" and again[-1][1]["timings"]["completion_tokens"] > 0
    finally:
        worker.stop()
