"""orin-llm behind vLLM's router (vllm-router, `--policy cache_aware`) in front of two REAL vLLM CPU
replicas: each home's plans stay on one replica once its prefix is seeded (concurrently: with
sequential traffic every new prefix goes to the first replica), and a stopped router ends in a local
answer. Routing is the router's job: the daemon only knows the router's URL."""

from __future__ import annotations

import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from orin_llm.environment import EXAMPLE_HOME_PATH, load_environment
from tests.server.conftest import free_port

from .vllm_replica import VENV, Replica, model_dir, vllm_python

pytestmark = pytest.mark.full
TASKS = ("Bring the milk from the fridge to the coffee table.", "Switch on the kettle.", "Put the book on the bed.")


class Router:
    def __init__(self, workers: list[str], port: int, log: Path, policy: str = "cache_aware"):
        vllm_python()  # installs .venv-vllm (with the router) or fails saying why
        self.url = f"http://127.0.0.1:{port}"
        self.log_path, self._log = log, open(log, "wb")
        self.proc = subprocess.Popen([str(VENV / "bin" / "vllm-router"), "--host", "127.0.0.1", "--port", str(port),
                                      "--worker-urls", *workers, "--policy", policy],
                                     stdout=self._log, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout_s: float = 120) -> Router:
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise AssertionError(f"the router exited {self.proc.returncode}:\n{self.log_path.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(self.url + "/v1/models", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.5)
        raise AssertionError(f"the router not ready after {timeout_s} s:\n{self.log_path.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


@pytest.fixture(scope="module")
def site(engine_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    model = model_dir(Path(engine_dir), out / "model")
    replicas = []
    try:
        for i in range(2):  # one at a time: two loading at once on two cores only slows both
            replicas.append(Replica(model, free_port(), out / f"vllm{i}.log", "--enable-scale-out").wait_ready())
        router = Router([r.url for r in replicas], free_port(), out / "router.log").wait_ready()
        yield replicas, router
        router.stop()
    finally:
        for r in replicas:
            r.stop()


@pytest.fixture(scope="module")
def fleet_daemon(start_daemon, site):
    _, router = site
    d = start_daemon("--remote", router.url, "--remote-first-token-share", "0.3")
    other = load_environment(EXAMPLE_HOME_PATH).model_dump()
    other["rooms"][1]["objects"].append("teapot")
    other["name"] = "other_home"
    with d.client() as c:
        c._request("PUT", "/v1/environments/other", json=other)
    return d


def plan(daemon, task: str, home, deadline_ms: int = 120_000) -> dict:
    body = {"task": task, "max_tokens": 24, "deadline_ms": deadline_ms, **({"environment": home} if home else {})}
    with daemon.client(timeout_s=300) as c:
        return c._request("POST", "/v1/plan", json=body).json()


def requests_per_replica(replicas) -> list[float]:
    return [r.metric("vllm:request_success_total") for r in replicas]


def test_each_home_stays_on_one_replica(fleet_daemon, site):
    replicas, _ = site
    seeded: dict = {}
    threads = [threading.Thread(target=lambda h=h: seeded.__setitem__(h, plan(fleet_daemon, TASKS[0], h)))
               for h in (None, "other")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(out["served_by"] == "remote" for out in seeded.values()), seeded
    where = {}
    for home in (None, "other"):
        before = requests_per_replica(replicas)
        outs = [plan(fleet_daemon, task, home) for task in TASKS[1:]]
        delta = [b - a for a, b in zip(before, requests_per_replica(replicas), strict=True)]
        assert all(o["served_by"] == "remote" for o in outs), outs
        asked = sum(o["remote"]["requests"] for o in outs)  # a request per step (--remote-plans stepwise)
        assert sorted(delta) == [0, asked], f"home {home!r} spread over the replicas: {delta}"
        assert all(o["remote"]["cached_tokens"] > 0 for o in outs)  # its prefix is cached where it went
        where[home] = delta.index(asked)
    print(f"homes on replicas: {where}")


def test_a_stopped_router_ends_in_a_local_answer(fleet_daemon, site):
    _, router = site
    router.stop()
    out = plan(fleet_daemon, TASKS[0], None, deadline_ms=60_000)
    assert out["served_by"] == "local" and "remote failed" in out["fallback"], out
