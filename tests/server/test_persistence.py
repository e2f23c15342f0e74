"""State that survives, on real daemons (the tiny engine): an idle daemon has saved its lookup
histories and homes before a SIGKILL, and the next one pins the homes again and says so in /health;
SIGTERM saves what the idle save had not; the default state directory is on.

(A kill at every point of a write: tests/test_atomic_file.py and tests/server/test_home_store.py.)
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import httpx
import pytest

from ..conftest import tiny_fixture
from .conftest import short_dir, start_daemon  # noqa: F401 (a fixture, resolved with this module's engine)
from .test_home_store import small_home

pytestmark = pytest.mark.full  # daemon processes (the fast tier runs the routes in-process)

engine_dir = tiny_fixture("engine_dir")
LIVENESS_S = 60.0  # a bound for "it happens" on a busy 2-core machine, far above --save-idle-s


def http(daemon) -> httpx.Client:
    return httpx.Client(transport=httpx.HTTPTransport(uds=str(daemon.socket)), base_url="http://orin-llm",
                        timeout=120)


def histories(state: Path) -> dict[str, int]:
    """The lookup history files under a state directory: key -> outputs held."""
    out = {}
    for path in state.glob("lookup/*/lookup-*.json"):
        data = json.loads(path.read_text())
        out[data["key"]] = len(data["outputs"])
    return out


def wait_for(what, timeout_s: float = LIVENESS_S):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        got = what()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout_s} s")


def seed_plans(engine_dir: Path) -> int:
    """The plans a history starts from (the engine's lookup seed), before any plan adds to it."""
    return len(json.loads((engine_dir / "lookup_seed.json").read_text())["outputs"])


def plan(c) -> None:
    """One request (goal "none": no goal read first), which adds one plan to the home's history."""
    c.post("/v1/plan", json={"task": "Bring the mug to the sofa.", "max_tokens": 6, "goal": "none"}).raise_for_status()


def test_an_idle_daemon_has_saved_before_a_sigkill_and_the_next_pins_the_homes_again(start_daemon,  # noqa: F811
                                                                                     engine_dir):
    state = short_dir() / "state"
    first = start_daemon("--state-dir", str(state), "--save-idle-s", "0.3")
    lab = small_home().model_dump(mode="json", exclude_none=True)
    with http(first) as c:
        assert c.put("/v1/environments/lab", json=lab).json()["version"] == 1
        assert c.put("/v1/environments/lab", json=lab).json()["version"] == 2
        c.patch("/v1/environments/lab/state", json={"robot_at": "kitchen", "holding": "mug"}).raise_for_status()
        c.patch("/v1/environment/state", json={"robot_at": "kitchen"}).raise_for_status()
        lab_state = c.get("/v1/environments/lab/state").json()
        default_state = c.get("/v1/environment/state").json()
        plan(c)
        key, after_one = next(iter(wait_for(lambda: histories(state)).items()))
        assert key == "env:example_home" and after_one == seed_plans(engine_dir) + 1
        plan(c)
        plan(c)
    # the daemon is idle: within --save-idle-s everything is on disk, with no request after the plans
    wait_for(lambda: histories(state).get(key) == after_one + 2)
    wait_for(lambda: (state / "homes" / "default.json").exists())
    assert first.stop(signal.SIGKILL) == -signal.SIGKILL
    assert histories(state)[key] == after_one + 2  # nothing of the 3 plans lost

    (state / "homes" / "named-broken.json").write_text('{"format": 1, "name": "bro')  # a damaged one beside
    second = start_daemon("--state-dir", str(state))
    with http(second) as c:
        kept = c.get("/health").json()["persistence"]
        assert kept["dir"] == str(state) and kept["kept"] and kept["histories"].startswith(str(state / "lookup"))
        assert kept["homes_restored"] == [{"environment": "lab", "version": 2, "state": True},
                                          {"environment": "default", "version": 1, "state": True}]
        [skipped] = kept["homes_skipped"]
        assert skipped["file"] == str(state / "homes" / "named-broken.json") and skipped["why"].startswith("not JSON")
        assert c.get("/v1/environments/lab").json() == lab and c.get("/v1/environments/lab").headers["etag"] == '"2"'
        assert c.get("/v1/environments/lab/state").json() == lab_state
        assert c.get("/v1/environment/state").json() == default_state
        plan(c)  # it drafts from the history it found, and adds to it
    assert second.stop() == 0
    assert histories(state)[key] == after_one + 3
    assert "home file" in second.log() and "named-broken.json skipped: not JSON" in second.log()


def test_sigterm_saves_what_the_idle_save_had_not_in_the_default_directory(start_daemon, tmp_path,  # noqa: F811
                                                                          engine_dir):
    # --state-dir "" is the default directory (a unit's unset variable): $XDG_STATE_HOME/orin-llm here
    d = start_daemon("--state-dir", "", "--save-idle-s", "600", env={"XDG_STATE_HOME": str(tmp_path)})
    state = tmp_path / "orin-llm"
    with http(d) as c:
        assert c.get("/health").json()["persistence"]["dir"] == str(state)
        plan(c)
        plan(c)
        c.patch("/v1/environment/state", json={"robot_at": "kitchen"}).raise_for_status()
    assert histories(state) == {} and not (state / "homes" / "default.json").exists()  # not idle long enough
    assert d.stop(signal.SIGTERM) == 0
    assert histories(state) == {"env:example_home": seed_plans(engine_dir) + 2}
    assert json.loads((state / "homes" / "default.json").read_text())["state"]["robot_at"] == "kitchen"
