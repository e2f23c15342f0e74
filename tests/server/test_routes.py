"""The routes in-process: the app over httpx's ASGI transport, a stub worker instead of an engine.
No daemon, no model: validation, error mapping, and /health while the engine loads."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Optional

import httpx
import pytest
import yaml

from orin_llm.errors import OrinError
from orin_llm.planning.home import EXAMPLE_HOME_PATH, load_environment
from orin_llm.planning.home.state import HomeState
from orin_llm.runtime.backend import Capabilities, EngineStats
from orin_llm.server.app import AppState, ServerConfig, create_app, open_app
from orin_llm.server.errors import RequestError
from orin_llm.server.worker import Worker
from tests.planning.home.homes import home_dict

LIMITS = {"max_input_len": 512, "max_seq_len": 640, "max_batch_size": 2}  # max_tokens: 640 - 512 = 128


def stub_planner() -> SimpleNamespace:
    """What the routes (and Metrics.watch) read of a planner and its engine."""
    env = SimpleNamespace(name="stub home", model_dump=lambda **kw: {"name": "stub home"}, is_text=False)
    prefix = SimpleNamespace(environment=env, version=3, ids=[1, 2, 3, 4])
    usage = {"device": "cpu", "tokens": 4, "capacity_tokens": 1024, "bytes": 4096}
    caps = Capabilities(backend="torch", max_batch=2, tunable_batch=False, paced_prefill=False,
                        persistent_histories=False, grammars=False, kernels=False, pins_hold=True,
                        speculation=("none",))
    engine = SimpleNamespace(name="stub-engine", manifest=SimpleNamespace(backend="torch", limits=LIMITS),
                             tokenizer=SimpleNamespace(chat_template=None), kv_usage=lambda: dict(usage),
                             capabilities=caps, busy=False, stats=lambda: EngineStats(0, 0, 2),
                             save_histories=lambda: None)
    states = {None: HomeState(robot_at="hallway", open={"fridge": False})}
    return SimpleNamespace(engine=engine, prefix=prefix, version=3, homes={None: SimpleNamespace(prefix=prefix)},
                           current_state=lambda home=None: states.get(home))


class StubWorker:
    """Worker's face to the routes. `answer(job)` is what the engine thread would send: an event
    ("done", payload) or ("error", RequestError), or it raises as submit() does (a full queue)."""

    def __init__(self, answer: Optional[Callable] = None, loaded: bool = True):
        self.planner = stub_planner()
        self.answer = answer or (lambda job: ("done", {"plan": "ok"}))
        self.loaded, self.load_error = loaded, None
        self.accepting, self.capacity, self.depth, self.running = True, 4, 0, 0
        self.jobs: list = []

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def submit(self, job) -> None:
        self.jobs.append(job)
        job.emit(*self.answer(job))


def make_app(worker, config: Optional[ServerConfig] = None, open_it: bool = True):
    state = AppState(config or ServerConfig(), worker)
    app = create_app(state)
    if open_it:
        open_app(app)
    return app, state


def call(app, method: str, path: str, **kw) -> httpx.Response:
    async def go() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://orin-llm") as c:
            return await c.request(method, path, **kw)

    return asyncio.run(go())


def requests_counted(state: AppState, endpoint: str, outcome: str) -> float:
    return state.metrics.requests.labels(endpoint, outcome)._value.get()


def test_health_of_a_loaded_worker_names_its_engine_home_queue_and_limits():
    app, _ = make_app(StubWorker(), ServerConfig(max_tokens_limit=100))
    r = call(app, "GET", "/health")
    assert r.status_code == 200
    h = r.json()
    assert (h["status"], h["ready"], h["engine"], h["backend"]) == ("ok", True, "stub-engine", "torch")
    assert h["environment"] == {"name": "stub home", "version": 3} and h["prefix_tokens"] == 4
    assert h["queue"] == {"depth": 0, "capacity": 4, "running": 0}
    assert h["limits"]["max_tokens"] == 100  # the cap, below the engine's 128
    assert "kernels" not in h and h["scheduler"] == {}  # the stub engine has neither


def test_while_loading_health_says_loading_and_other_routes_503_with_retry_after():
    worker = StubWorker(loaded=False)
    app, state = make_app(worker, open_it=False)
    r = call(app, "GET", "/health")
    assert r.status_code == 503 and r.headers["retry-after"] == "1"
    assert r.json()["status"] == "loading" and r.json()["ready"] is False and r.json()["loading_s"] >= 0
    assert call(app, "GET", "/metrics").status_code == 200
    for method, path in (("POST", "/v1/plan"), ("GET", "/v1/environment"), ("GET", "/openapi.json")):
        r = call(app, method, path, json={"task": "Open the fridge."} if method == "POST" else None)
        assert r.status_code == 503 and r.headers["retry-after"] == "1", (path, r.text)
        assert "still loading" in r.json()["error"]["message"]
    assert worker.jobs == [] and requests_counted(state, "plan", "rejected") == 1

    worker.loaded = True
    assert call(app, "GET", "/health").status_code == 503  # loaded, but the engine's routes not yet there
    open_app(app)
    assert call(app, "GET", "/health").json()["status"] == "ok"
    assert call(app, "POST", "/v1/plan", json={"task": "Open the fridge."}).json() == {"plan": "ok"}
    assert "/v1/plan" in call(app, "GET", "/openapi.json").json()["paths"]


def test_a_failed_load_is_reported_by_health_and_the_gate():
    worker = StubWorker(loaded=False)
    worker.load_error = OrinError("engines/x: no manifest.json")
    app, _ = make_app(worker, open_it=False)
    h = call(app, "GET", "/health")
    assert h.status_code == 503 and h.json()["status"] == "failed" and "no manifest.json" in h.json()["error"]
    r = call(app, "POST", "/v1/plan", json={"task": "x"})
    assert r.status_code == 503 and "could not load its engine (engines/x: no manifest.json)" in r.text


@pytest.mark.parametrize("body, message", [
    ({"task": "x", "max_tokens": 129}, "max_tokens must be at most 128 for this engine, got 129"),
    ({"task": "x", "max_tokens": "8"}, 'max_tokens: Input should be a valid integer, got "8" (a string)'),
    ({"task": "x", "colour": "red"}, "colour: unknown field (allowed: "),
    ([1], "the body must be a JSON object, got a list"),
    ({"task": "x", "feasibility": "strict"}, "feasibility: Input should be 'enforce', 'report' or 'off'"),
    ({"task": "x", "goal": "at(mug, sink)"}, 'goal: a list of facts like ["at(mug, sink)"], "infer" to have the '
                                             'model read them in the task text (the default), or "none" for no '
                                             'goal; got the string "at(mug, sink)"'),
    ({"task": "x", "goal": "Infer"}, 'or "none" for no goal; got the string "Infer"'),
    ({"task": "x", "goal": 5}, "goal: Input should be a valid list, got 5 (a number)"),
    ({"task": "x", "goal": []}, "goal: List should have at least 1 item"),
    ({"task": "x", "goal": [""]}, "goal.0: String should have at least 1 character"),
    ({"task": "x", "goal": ["said"] * 65}, "goal: List should have at most 64 items"),
    ({"task": "x", "state": ["robot_at", "kitchen"]}, "state: Input should be a valid dictionary"),
])
def test_plan_validation_says_what_to_fix_and_never_reaches_the_worker(body, message):
    worker = StubWorker()
    app, state = make_app(worker)
    r = call(app, "POST", "/v1/plan", json=body)
    assert r.status_code == 422 and message in r.json()["error"]["message"], r.text
    assert worker.jobs == [] and requests_counted(state, "plan", "invalid") == 1


@pytest.mark.parametrize("answer, status, retry_after", [
    (RequestError(503, "busy: 4 requests are queued already; retry shortly", retry_after=1), 503, "1"),
    (("error", RequestError(413, "the prompt has 600 tokens, over max_input_len 512")), 413, None),
    (("error", RequestError(504, "deadline of 5 ms exceeded")), 504, None),
    (("error", RequestError(507, "the pins would leave no room")), 507, None),
])
def test_worker_errors_map_to_their_status(answer, status, retry_after):
    def reply(job):
        if isinstance(answer, Exception):
            raise answer
        return answer

    app, _ = make_app(StubWorker(reply))
    r = call(app, "POST", "/v1/plan", json={"task": "Open the fridge."})
    assert r.status_code == status and r.json()["error"]["code"] == status
    assert r.headers.get("retry-after") == retry_after


def test_a_plan_job_carries_the_request_to_the_worker():
    worker = StubWorker()
    app, _ = make_app(worker)
    r = call(app, "POST", "/v1/plan", json={"task": "Open the fridge.", "deadline_ms": 5000, "max_tokens": 7})
    assert r.status_code == 200
    (job,) = worker.jobs
    assert (job.endpoint, job.stream, job.deadline_ms, job.exclusive) == ("plan", False, 5000, False)


def test_environment_routes_check_names_etags_and_known_homes():
    worker = StubWorker(lambda job: ("done", {"version": 4, "name": "n", "prefix_tokens": 9}))
    app, _ = make_app(worker)
    r = call(app, "GET", "/v1/environment")
    assert r.status_code == 200 and r.headers["etag"] == '"3"' and r.json() == {"name": "stub home"}
    assert call(app, "GET", "/v1/environments").json() == {"default": {"name": "stub home", "version": 3,
                                                                        "prefix_tokens": 4}}
    assert call(app, "GET", "/v1/environments/attic").status_code == 404
    r = call(app, "PUT", "/v1/environments/-bad", json={"name": "x"})
    assert r.status_code == 422 and "environment name '-bad'" in r.text
    home = load_environment(EXAMPLE_HOME_PATH).model_dump(mode="json", exclude_none=True)
    r = call(app, "PUT", "/v1/environment", json=home, headers={"If-Match": "latest"})
    assert r.status_code == 412 and "is not an environment ETag" in r.text
    assert worker.jobs == []
    r = call(app, "PUT", "/v1/environment", json=home, headers={"If-Match": '"3"'})
    assert r.status_code == 200 and r.headers["etag"] == '"4"' and worker.jobs.pop().exclusive
    r = call(app, "DELETE", "/v1/environments/attic")
    assert r.status_code == 200 and worker.jobs[0].exclusive


def test_a_home_whose_examples_cannot_run_in_it_is_refused_naming_the_line():
    """Few-shot examples teach the model: one naming a thing the home lacks (`pick(cat)`) is a 422 that
    names the example's line, in JSON or YAML, for the default home and a named one; no job runs."""
    worker = StubWorker()
    app, state = make_app(worker)
    home = home_dict()
    home["examples"][1]["plan"][1] = "pick(cat)"
    try:
        for path in ("/v1/environment", "/v1/environments/flat-2"):
            for kw in ({"json": home},
                       {"content": yaml.safe_dump(home), "headers": {"content-type": "application/yaml"}}):
                r = call(app, "PUT", path, **kw)
                assert r.status_code == 422, r.text
                assert r.json()["error"]["message"] == ("environment: examples.1.plan.1: 'pick(cat)': 'cat' is not "
                                                        "an object of this home; an example names only the home's "
                                                        "things, doing what they can do")
    finally:
        state.bodies.close()
    assert worker.jobs == []


def test_a_home_name_the_route_cannot_carry_gets_a_422_that_says_which_names_are_allowed():
    """A name with a '/' (as is or %2F, which arrives decoded) is two path segments: no route took it and
    the answer was a bare 404. Every named route checks its name; other paths keep their 404 and 405."""
    worker = StubWorker()
    app, _ = make_app(worker)
    allowed = "use 1 to 128 letters, digits, '.', '_', ':' or '-', starting with a letter or digit"
    for method, path, name in (("GET", "/v1/environments/a%2Fb", "a/b"), ("PUT", "/v1/environments/a/b", "a/b"),
                               ("DELETE", "/v1/environments/a%2Fb", "a/b"),
                               ("GET", "/v1/environments/a%2Fb/state", "a/b"),
                               ("PATCH", "/v1/environments/a/b/state", "a/b"),
                               ("GET", "/v1/environments/bad%20name", "bad name"),
                               ("PATCH", "/v1/environments/..%2Fattic/state", "../attic"),
                               ("GET", "/v1/environments/.hidden/state", ".hidden")):
        r = call(app, method, path, json={"name": "h", "text": "a flat"} if method == "PUT" else None)
        assert r.status_code == 422, (method, path, r.text)
        assert r.json()["error"]["message"] == f"environment name {name!r}: {allowed}", (method, path)
    assert worker.jobs == []
    assert call(app, "GET", "/v1/environments/attic").status_code == 404  # a good name, not pinned
    assert call(app, "PUT", "/v1/environments/attic/state").status_code == 405
    r = call(app, "GET", "/v1/nothing/a/b")
    assert r.status_code == 404 and r.json()["error"]["message"] == "Not Found"


def deep(levels: int) -> str:
    return "[" * levels + "]" * levels


@pytest.mark.parametrize("method, path, body, status, words", [
    ("POST", "/v1/plan", '{"task": "x", "goal": ' + deep(65) + "}", 422, "nested more than 64 levels deep"),
    ("POST", "/v1/plan", '{"task": "x", "goal": ' + deep(100_000) + "}", 422, "nested more than 64 levels deep"),
    ("POST", "/v1/chat/completions", json.dumps({"messages": [{"role": "user", "content": "hi"}],
                                                 "tools": ["t"] * 10_000}), 413, "more than 10000 values"),
    ("PATCH", "/v1/environment/state", json.dumps({"said": list(range(10_000))}), 413, "more than 10000 values"),
    ("PUT", "/v1/environment", json.dumps({"name": "h", "rooms": [{"name": "r"}] * 5000}), 413, "the limit is 10000"),
    ("PUT", "/v1/environment", '{"name": "h", "text": "a \\ud800 flat"}', 422, "no lone surrogates"),
])
def test_bodies_over_a_limit_are_refused_naming_it_before_any_model_sees_them(method, path, body, status, words):
    worker = StubWorker()
    app, state = make_app(worker)
    try:
        r = call(app, method, path, content=body.encode(), headers={"Content-Type": "application/json"})
    finally:
        state.bodies.close()
    assert r.status_code == status and words in r.json()["error"]["message"], r.text
    assert worker.jobs == []


def test_homes_are_read_in_the_body_process_under_its_limits():
    worker = StubWorker(lambda job: ("done", {"version": 4, "name": "n", "prefix_tokens": 9}))
    app, state = make_app(worker)
    yaml_type = {"Content-Type": "application/yaml"}
    try:
        r = call(app, "PUT", "/v1/environment", content=EXAMPLE_HOME_PATH.read_bytes(), headers=yaml_type)
        assert r.status_code == 200 and state.bodies._proc is not None  # parsed there
        r = call(app, "PUT", "/v1/environment", content=b"a: &x [1]\nname: h\ntext: *x\n", headers=yaml_type)
        assert r.status_code == 422 and "YAML aliases (*name) are not accepted" in r.json()["error"]["message"]
        r = call(app, "PUT", "/v1/environment", content=deep(65).encode(), headers=yaml_type)
        assert r.status_code == 422 and "nested more than 64 levels deep" in r.json()["error"]["message"]
        # JSON too, and what the home's check finds is said there (1,000 errors here: the 9,990 the liveness
        # test sends can pass the 2 s limit on a loaded 2-core machine, where the niced body process waits)
        r = call(app, "PUT", "/v1/environment", json={"name": "h", "rooms": ["a"] * 1000})
        message = r.json()["error"]["message"]
        assert r.status_code == 422 and message.startswith("environment: rooms.0: Input should be a valid dictionary")
        r = call(app, "PUT", "/v1/environment", content=b"name: h\n")
        assert r.status_code == 422 and "a YAML home needs Content-Type: application/yaml" in r.text
        assert len(worker.jobs) == 1 and requests_counted(state, "environment", "invalid") == 4
    finally:
        state.bodies.close()


def test_state_routes_read_the_planners_state_and_send_changes_to_the_worker_in_order():
    change = {"state": {"robot_at": "kitchen"}, "environment_version": 3, "computed_tokens": 21}
    worker = StubWorker(lambda job: ("done", change))
    worker.planner.homes["attic"] = SimpleNamespace(prefix=worker.planner.prefix)  # declares no state
    app, state = make_app(worker)
    r = call(app, "GET", "/v1/environment/state")
    assert r.status_code == 200 and r.headers["etag"] == '"3"'
    assert (r.json()["robot_at"], r.json()["open"], r.json()["holding"]) == ("hallway", {"fridge": False}, None)
    assert call(app, "GET", "/v1/environments/attic/state").json() == HomeState().model_dump(mode="json")
    r = call(app, "GET", "/v1/environments/cellar/state")
    assert r.status_code == 404 and "no environment named 'cellar'" in r.text
    for body, words in ((["robot_at", "kitchen"], "Input should be a valid dictionary"),
                        ({"robot_at": "\ud800"}, "no lone surrogates")):
        r = call(app, "PATCH", "/v1/environment/state", content=json_text(body))
        assert r.status_code == 422 and words in r.json()["error"]["message"], r.text
    assert worker.jobs == []
    for path in ("/v1/environment/state", "/v1/environments/attic/state"):
        r = call(app, "PATCH", path, json={"robot_at": "kitchen"})
        assert r.status_code == 200 and r.json() == change
    assert [(j.endpoint, j.exclusive) for j in worker.jobs] == [("state", True)] * 2  # one at a time, in order
    assert requests_counted(state, "state", "ok") == 0  # the stub worker counts nothing; the app counts refusals
    assert requests_counted(state, "state", "invalid") == 2


def json_text(body) -> str:
    import json

    return json.dumps(body)


def test_the_worker_constructor_returns_while_the_planner_loads():
    """A real Worker whose make_planner is slow: constructed at once, /health says loading, then ok."""
    release = threading.Event()

    def make_planner():
        assert release.wait(30)
        return stub_planner()

    t0 = time.monotonic()
    worker = Worker(make_planner, queue_size=2)
    try:
        assert time.monotonic() - t0 < 1 and not worker.loaded and not worker.wait_loaded(0)
        app, _ = make_app(worker, open_it=False)
        worker.start()
        h = call(app, "GET", "/health")
        assert h.status_code == 503 and h.json()["status"] == "loading"
        release.set()
        assert worker.wait_loaded(30) and worker.loaded
        open_app(app)
        h = call(app, "GET", "/health").json()
        assert h["status"] == "ok" and h["engine"] == "stub-engine" and h["queue"]["capacity"] == 2
    finally:
        release.set()
        worker.stop()


def test_the_feasibility_modes_are_the_planners_everywhere():
    from typing import get_args

    from orin_llm.planning.planner import FEASIBILITY
    from orin_llm.server import cli
    from orin_llm.server.schemas import ChatRequest, PlanRequest

    assert cli.FEASIBILITY == FEASIBILITY
    for model in (PlanRequest, ChatRequest):
        assert get_args(model.model_fields["feasibility"].annotation) == FEASIBILITY
        assert model.model_fields["feasibility"].default == FEASIBILITY[0] == "enforce"
