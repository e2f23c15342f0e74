"""GET/PUT /v1/environment: versions, ETag/If-Match, and switches that land between requests."""

from __future__ import annotations

import copy
import threading

import pytest

from orin_llm.client import PlannerError

pytestmark = pytest.mark.full

TASK = "Bring the mug to the sofa."


@pytest.fixture
def planner(capped_daemon):
    with capped_daemon.client() as c:
        yield c


def bigger(home: dict) -> dict:
    """The same home with a garage: a longer prefix, so prompt_tokens tells the versions apart."""
    other = copy.deepcopy(home)
    other["name"] = "home_with_garage"
    other["rooms"].append({"name": "garage", "places": ["workbench", "garage_door"], "objects": ["drill", "bike"]})
    return other


def test_get_and_put_with_versions_and_if_match(planner):
    got = planner.get_environment()
    home, v = got["environment"], got["version"]
    assert planner.health()["environment"] == {"name": home["name"], "version": v}
    put = planner.put_environment(bigger(home), if_match=v)
    assert put["version"] == v + 1 and put["name"] == "home_with_garage"
    health = planner.health()
    assert health["environment"] == {"name": "home_with_garage", "version": v + 1}
    assert health["prefix_tokens"] == put["prefix_tokens"] == health["kv_cache"]["tokens"]  # pinned at once
    assert planner.get_environment() == {"version": v + 1, "environment": bigger(home)}
    with pytest.raises(PlannerError, match=f"at version {v + 1}, not {v}") as err:  # a stale ETag
        planner.put_environment(home, if_match=v)
    assert err.value.status == 412
    with pytest.raises(PlannerError, match="rooms.0.places") as err:
        broken = copy.deepcopy(home)
        broken["rooms"][0]["places"] = ["front door"]
        planner.put_environment(broken)
    assert err.value.status == 422
    assert planner.put_environment(home)["version"] == v + 2  # no If-Match: whatever is there
    assert planner.plan(TASK, max_tokens=4)["environment_version"] == v + 2


def test_switches_land_between_requests_and_answers_match_their_version(capped_daemon, planner):
    home = planner.get_environment()["environment"]
    homes = {"small": home, "big": bigger(home)}

    def reference(name: str) -> tuple:
        planner.put_environment(homes[name])
        r = planner.plan(TASK, max_tokens=6, goal="none")  # the model's own plan: one decode, its prompt
        return r["plan"], r["timings"]["prompt_tokens"]

    expected = {name: reference(name) for name in homes}
    assert expected["small"][1] != expected["big"][1]

    version_home: dict[int, str] = {}
    answers: list[dict] = []
    lock = threading.Lock()

    def ask(n: int) -> None:
        with capped_daemon.client() as c:
            for _ in range(n):
                r = c.plan(TASK, max_tokens=6, goal="none")
                with lock:
                    answers.append(r)

    threads = [threading.Thread(target=ask, args=(6,)) for _ in range(3)]
    for t in threads:
        t.start()
    for name in ["small", "big", "small", "big"]:  # switch while the plans run
        version_home[planner.put_environment(homes[name])["version"]] = name
    for t in threads:
        t.join(120)

    assert len(answers) == 18
    seen = set()
    for r in answers:
        v = r["environment_version"]
        # before the first switch of the storm the reference's last home ("big") was current
        name = version_home.get(v, "big")
        seen.add(v)
        t = r["timings"]
        assert (r["plan"], t["prompt_tokens"]) == expected[name], (v, name, r)
        assert t["cached_prompt_tokens"] + t["computed_prompt_tokens"] == t["prompt_tokens"]
    assert len(seen) >= 2  # the switches really happened between the requests


def test_a_yaml_home_goes_in_as_is(capped_daemon, planner):
    """PUT with Content-Type: application/yaml takes the home file itself."""
    import httpx
    import yaml

    from orin_llm.planning.home import EXAMPLE_HOME_PATH, load_environment

    text = EXAMPLE_HOME_PATH.read_text()
    with httpx.Client(transport=httpx.HTTPTransport(uds=str(capped_daemon.socket)), base_url="http://x",
                      timeout=120) as h:  # each PUT prefills the home: seconds on a busy machine
        v = planner.get_environment()["version"]
        for media in ("application/yaml", "application/x-yaml; charset=utf-8", "text/yaml"):
            r = h.put("/v1/environment", content=text.encode(), headers={"Content-Type": media, "If-Match": f'"{v}"'})
            assert r.status_code == 200, r.text
            assert r.json()["version"] == v + 1 and r.json()["name"] == "example_home"
            v += 1
        expected = load_environment(EXAMPLE_HOME_PATH).model_dump(mode="json", exclude_none=True)
        assert planner.get_environment() == {"version": v, "environment": expected}
        assert yaml.safe_load(text)["name"] == expected["name"]
        r = h.put("/v1/environment", content=b"name: [broken\n", headers={"Content-Type": "application/yaml"})
        assert r.status_code == 422 and "not valid YAML at line 2, column 1" in r.json()["error"]["message"]
        r = h.put("/v1/environment", content=b"name: h\nrooms: 3\n", headers={"Content-Type": "application/yaml"})
        assert r.status_code == 422 and "rooms" in r.json()["error"]["message"]
    assert planner.get_environment()["version"] == v  # refused ones change nothing


def test_an_environment_over_the_limit_gets_413_with_its_numbers(planner):
    before = planner.get_environment()
    with pytest.raises(PlannerError) as err:
        planner.put_environment({"name": "mansion", "text": "a room with a door. " * 2000})
    assert err.value.status == 413
    message = err.value.message
    assert "the environment 'mansion' renders to" in message and "prefix tokens" in message
    assert "max_input_len is 6144, which leaves 0 tokens for a task" in message
    assert "task, observations or messages" not in message  # not the message for a long request
    assert planner.get_environment() == before


def test_named_environments_are_pinned_next_to_the_default_one(capped_daemon, planner):
    """A fleet sharing one planner: a second home is PUT under a name, plans choose it, both stay pinned
    (each plan finds its own home's blocks cached), and DELETE unpins it."""
    import httpx

    home = planner.get_environment()["environment"]
    transport = httpx.HTTPTransport(uds=str(capped_daemon.socket))
    with httpx.Client(transport=transport, base_url="http://localhost", timeout=300) as http:
        put = http.put("/v1/environments/flat-2", json=bigger(home))
        assert put.status_code == 200 and put.json()["version"] == 1 and put.headers["etag"] == '"1"'
        listed = http.get("/v1/environments").json()
        assert listed["flat-2"]["name"] == "home_with_garage" and listed["default"]["name"] == home["name"]
        there = planner.plan("Put the drill on the workbench.", max_tokens=8, environment="flat-2")
        here = planner.plan("Put the mug on the counter.", max_tokens=8)
        assert there["environment"] == "flat-2" and "environment" not in here
        for r, key in ((there, "flat-2"), (here, "default")):
            assert r["timings"]["cached_prompt_tokens"] >= listed[key]["prefix_tokens"] // 16 * 16
        names = {n for r in bigger(home)["rooms"] for n in [r["name"], *r["places"], *r["objects"]]}
        text_actions = {a["name"] for a in home["actions"] if a["args"] == ["text"]}
        typed = [s for s in there["steps"] if s["action"] not in text_actions]
        assert there["steps"] and all(set(s["args"]) <= names for s in typed)  # things of the second home
        stale = http.put("/v1/environments/flat-2", json=bigger(home), headers={"If-Match": '"7"'})
        assert stale.status_code == 412 and "environment 'flat-2' is at version 1, not 7" in stale.text
        assert http.get("/v1/environments/flat-2").json()["name"] == "home_with_garage"
        assert http.delete("/v1/environments/flat-2").json() == {"removed": "flat-2"}
        gone = http.delete("/v1/environments/flat-2")
        assert gone.status_code == 404 and "no environment named 'flat-2'" in gone.text
        assert http.put("/v1/environments/bad name", json=home).status_code == 422
    with pytest.raises(PlannerError, match="no home named 'flat-2'") as err:
        planner.plan("Open the fridge.", max_tokens=2, goal="none", environment="flat-2")
    assert err.value.status == 422


def test_a_pin_that_does_not_fit_is_a_507():
    from orin_llm.runtime.cache import PinTooLarge
    from orin_llm.server.worker import Job, Worker

    outcome, error = Worker._error(None, Job("environment", None, None), PinTooLarge("pinning 6000 tokens ..."))
    assert (outcome, error.status, error.message) == ("invalid", 507, "pinning 6000 tokens ...")


def test_constrained_plans_on_held_out_homes_are_steps_of_those_homes(daemon):
    """Issue #14's check through the daemon: homes and tasks the tests have not seen (the held-out
    split's), each PUT under a name; every line of every constrained plan is a step of that home (an
    action it declares, with things of the right types), and the response's typed steps are those lines."""
    import httpx

    from orin_llm.planning.calibration_data import load_home, load_split
    from orin_llm.planning.home import Step
    from orin_llm.planning.home.steps import UNFINISHED, check_line

    items = load_split("heldout")[3::7][:6]  # a slice no other test uses
    homes = sorted({it.home for it in items})
    transport = httpx.HTTPTransport(uds=str(daemon.socket))
    with httpx.Client(transport=transport, base_url="http://localhost", timeout=300) as http, \
            daemon.client() as planner:
        for name in homes:
            put = http.put(f"/v1/environments/{name}", json=load_home(name).model_dump(exclude_none=True))
            assert put.status_code == 200, put.text
        try:
            for it in items:
                env = load_home(it.home)
                r = planner.plan(it.task, max_tokens=48, environment=it.home, speculation="lookup")
                assert r["constrained"] and r["environment"] == it.home
                lines = [ln for ln in r["plan"].splitlines() if ln.strip()]
                if r["finish_reason"] == "length" and r["rejected_lines"]:  # cut inside its last line
                    assert [x["reason"] for x in r["rejected_lines"]] == [UNFINISHED]
                    lines = lines[:-1]
                else:
                    assert r["rejected_lines"] == [], (it.id, r["plan"])
                checked = [check_line(ln, env) for ln in lines]
                assert checked and all(isinstance(s, Step) for s in checked), (it.id, r["plan"])
                assert [{"action": s.action, "args": list(s.args)} for s in checked] == \
                    [{"action": s["action"], "args": s["args"]} for s in r["steps"]]
        finally:
            for name in homes:
                http.delete(f"/v1/environments/{name}")
