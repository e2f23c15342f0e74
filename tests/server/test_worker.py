"""The worker builds the planner on its own thread, so one thread does all of the engine's work."""

import threading

import pytest

from orin_llm.environment import EXAMPLE_HOME_PATH, load_environment
from orin_llm.errors import OrinError
from orin_llm.runtime.planner import Planner
from orin_llm.server.worker import Worker


@pytest.mark.full
def test_the_planner_is_built_on_the_engine_thread_and_jobs_wait_for_start(engine):
    built_on = []

    def make():
        built_on.append(threading.current_thread().name)
        return Planner(engine, load_environment(EXAMPLE_HOME_PATH))

    worker = Worker(make, queue_size=2)
    try:
        assert built_on == ["orin-llm-engine"] and worker.planner.prefix is not None
        assert not worker.accepting  # built, but no jobs before start()
        worker.start()
        assert worker.accepting
    finally:
        worker.stop()
    assert not worker.accepting


def test_a_planner_that_cannot_be_built_raises_from_the_constructor():
    def make():
        raise OrinError("engines/x: no manifest.json; build it with orin-llm build")

    with pytest.raises(OrinError, match="no manifest.json"):
        Worker(make)
