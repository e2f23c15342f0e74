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
from typing import Optional

import pytest

from orin_llm.planning.home import EXAMPLE_HOME_PATH, load_environment
from tests.server.conftest import free_port

from .vllm_replica import VENV, vllm_python

pytestmark = pytest.mark.full
TASKS = ("Bring the milk from the fridge to the coffee table.", "Switch on the kettle.", "Put the book on the bed.")


class Router:
    """A router binary on loopback: vLLM's (vllm-router) by default; `command` names another one
    (test_sglang_router.py: SGLang's), started with the same --host/--port/--worker-urls/--policy flags."""

    def __init__(self, workers: list[str], port: int, log: Path, policy: str = "cache_aware",
                 command: Optional[list[str]] = None):
        if command is None:
            vllm_python()  # installs .venv-vllm (with the router) or fails saying why
            command = [str(VENV / "bin" / "vllm-router")]
        self.url = f"http://127.0.0.1:{port}"
        self.log_path, self._log = log, open(log, "wb")
        self.proc = subprocess.Popen([*command, "--host", "127.0.0.1", "--port", str(port),
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
def site(two_replicas, tmp_path_factory):
    log = tmp_path_factory.mktemp("vllm-router") / "router.log"
    router = Router([r.url for r in two_replicas], free_port(), log).wait_ready()
    yield two_replicas, router
    router.stop()


def with_other_home(d):
    """The daemon `d` with a second home ("other": the example and a teapot), so that two prefixes route."""
    other = load_environment(EXAMPLE_HOME_PATH).model_dump()
    other["rooms"][1]["objects"].append("teapot")
    other["name"] = "other_home"
    with d.client() as c:
        c._request("PUT", "/v1/environments/other", json=other)
    return d


@pytest.fixture(scope="module")
def fleet_daemon(start_daemon, site):
    _, router = site
    return with_other_home(start_daemon("--remote", router.url, "--remote-first-token-share", "0.3"))


def plan(daemon, task: str, home, deadline_ms: int = 120_000) -> dict:
    # goal "none": the routing of the model's own plan (a plain request would read a goal first: a request more)
    body = {"task": task, "max_tokens": 24, "deadline_ms": deadline_ms, "goal": "none",
            **({"environment": home} if home else {})}
    with daemon.client(timeout_s=300) as c:
        return c._request("POST", "/v1/plan", json=body).json()


def requests_per_replica(replicas) -> list[float]:
    return [r.metric("vllm:request_success_total") for r in replicas]


def test_each_home_stays_on_one_replica(fleet_daemon, site):
    replicas, _ = site
    homes_stay_on_one_replica(fleet_daemon, replicas)


def homes_stay_on_one_replica(daemon, replicas) -> None:
    """Two homes seeded concurrently, then each home's plans: all served remotely, each home's requests on
    one replica, its prefix cached there (test_sglang_router.py asks the same of SGLang's router)."""
    seeded: dict = {}
    threads = [threading.Thread(target=lambda h=h: seeded.__setitem__(h, plan(daemon, TASKS[0], h)))
               for h in (None, "other")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(out["served_by"] == "remote" for out in seeded.values()), seeded
    where = {}
    for home in (None, "other"):
        before = requests_per_replica(replicas)
        outs = [plan(daemon, task, home) for task in TASKS[1:]]
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
