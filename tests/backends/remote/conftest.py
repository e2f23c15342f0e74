"""The server tests' real daemons (tests/server/conftest.py), for the remote tests that start one; a real
HTTP peer (peer.py) and a planner on the tiny engine behind HedgedBackend, for the tests of the race."""

from pathlib import Path

import pytest

from orin_llm.backends.remote.hedged import Breaker, HedgedBackend
from orin_llm.backends.remote.settings import RemoteSettings
from orin_llm.planning.home import EXAMPLE_HOME_PATH, load_environment
from orin_llm.planning.planner import Planner
from tests.server.conftest import start_daemon  # noqa: F401  (a fixture, re-exported for this directory)

from .peer import Peer
from .vllm_replica import Replica, model_dir

# The feasibility the remote tests plan under: `enforce`, the default. A remote plan under it is asked one
# step per request with the steps the home's state allows (--remote-plans stepwise, backends/remote/stepwise.py),
# so it runs remotely like any other; with `whole` such plans were mostly refused here and these tests asked
# for `report`. Kept as a name for what imports it.
REMOTE_FEASIBILITY = "enforce"


@pytest.fixture
def peer():
    with Peer() as p:
        yield p


@pytest.fixture(scope="module")
def planner(tiny_engine):
    """One planner per module (its home's grammar and pin take a while); each test points it at its own
    remote with `planners`."""
    p = Planner(HedgedBackend(tiny_engine, RemoteSettings("http://127.0.0.1:1")), load_environment(EXAMPLE_HOME_PATH))
    yield p
    tiny_engine.unpin(p.pin)


@pytest.fixture
def planners(planner):
    def use(url: str, **kw) -> Planner:
        """The planner, on a fresh remote: these settings, no failures behind it, its model not yet asked."""
        backend = planner.engine
        backend.settings = RemoteSettings(url, **kw)
        backend.breaker, backend._model = Breaker(backend.settings), None
        return planner
    return use


@pytest.fixture(scope="package")
def two_replicas(engine_dir, tmp_path_factory):
    """Two real vLLM CPU replicas of the embedded model (vllm_replica.py), shared by the routers' tests
    (test_router.py: vLLM's router; test_sglang_router.py: SGLang's), started once: each takes its share
    of two cores for half a minute, so a second pair would only lengthen the full tier."""
    from tests.server.conftest import free_port

    out = tmp_path_factory.mktemp("site")
    model = model_dir(Path(engine_dir), out / "model")
    replicas = []
    try:
        for i in range(2):  # one at a time: two loading at once on two cores only slows both
            # --enable-scale-out: without it vLLM's router's token requests get 403 (GUIDE, "Site server")
            replicas.append(Replica(model, free_port(), out / f"vllm{i}.log", "--enable-scale-out").wait_ready())
        yield replicas
    finally:
        for r in replicas:
            r.stop()
