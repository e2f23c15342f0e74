"""When the worker saves what the daemon keeps (server/worker.py): once it has been idle for
save_idle_s after a job, right after a home is PUT or removed (before the client hears it), and when
it stops (SIGTERM) — not only every few seconds while busy, which an idle daemon never reached: 3
plans made, 12 s idle, SIGKILL, and 2 plans' history were lost. A planner stub: no engine steps."""

from __future__ import annotations

import threading
import time
import types

from orin_llm.server.worker import JobStart, Worker

from .test_worker import run_job

LIVENESS_S = 30.0  # a bound for "it happens", far above the save_idle_s the tests give


class Planner:
    class engine:  # noqa: N801 (what the worker and the metrics read of an engine)
        busy = False

        @staticmethod
        def stats():
            return types.SimpleNamespace(max_running=2, waiting=0)

        @staticmethod
        def kv_usage():
            return {"tokens": 0, "capacity_tokens": 0, "bytes": 0}

    prefix = None
    version = 1


def done_in_begin(planner) -> JobStart:
    return JobStart(None, lambda queue_s: {"ok": True})


class Saves:
    def __init__(self, fail: bool = False):
        self.times: list[float] = []
        self.event = threading.Event()
        self.fail = fail

    def __call__(self, planner) -> None:
        self.times.append(time.monotonic())
        self.event.set()
        if self.fail:
            raise OSError(28, "No space left on device")


def worker(saves: Saves, idle_s: float) -> Worker:
    w = Worker(Planner, save=saves, save_idle_s=idle_s)
    assert w.wait_loaded(LIVENESS_S)
    w.start()
    return w


def test_an_idle_worker_saves_once_after_its_last_job():
    saves = Saves()
    w = worker(saves, idle_s=0.2)
    try:
        assert run_job(w, "plan", done_in_begin)[-1][0] == "done"
        assert saves.event.wait(LIVENESS_S), "nothing saved after the daemon went idle"
        assert len(saves.times) == 1
        time.sleep(1.0)  # idle with nothing new: it waits for the next job, it does not save again
        assert len(saves.times) == 1
        saves.event.clear()
        run_job(w, "plan", done_in_begin)
        assert saves.event.wait(LIVENESS_S) and len(saves.times) == 2  # the next job's, saved the same way
    finally:
        w.stop()


def test_a_home_put_or_removed_is_saved_before_its_answer():
    saves = Saves()
    w = worker(saves, idle_s=600)  # no idle save within the test: only the home's own
    try:
        assert run_job(w, "environment", done_in_begin)[-1][0] == "done"
        assert len(saves.times) == 1  # already saved when the answer came
        run_job(w, "plan", done_in_begin)
        assert len(saves.times) == 1  # a plan waits for the idle save
    finally:
        w.stop()
    assert len(saves.times) == 2  # and stopping (SIGTERM) saves it


def test_stopping_saves_what_the_idle_save_has_not_yet():
    saves = Saves()
    w = worker(saves, idle_s=600)
    run_job(w, "plan", done_in_begin)
    assert saves.times == []
    w.stop()
    assert len(saves.times) == 1


def test_a_save_that_fails_is_logged_and_the_worker_goes_on(caplog):
    saves = Saves(fail=True)
    w = worker(saves, idle_s=0.05)
    try:
        with caplog.at_level("WARNING"):
            run_job(w, "plan", done_in_begin)
            assert saves.event.wait(LIVENESS_S)
            assert run_job(w, "plan", done_in_begin)[-1][0] == "done"  # still serving
        assert "could not save the daemon's state: [Errno 28] No space left on device" in caplog.text
    finally:
        w.stop()
