"""The homes a daemon was sent come back after a restart (server/home_store.py): named homes with
their version and state, the default home's state; a file that cannot come back is reported and
skipped, never the others; a save killed at any point leaves the old homes or the new ones.

A real Planner on the tiny engine (tests/conftest.py): the homes are really pinned again."""

from __future__ import annotations

import json

import pytest

from orin_llm.planning.home import HomeState, environment_from_dict
from orin_llm.planning.planner import Planner
from orin_llm.server.home_store import HomeStore

from ..conftest import tiny_fixture
from ..test_atomic_file import POINTS, RENAMED, killed_at

engine = tiny_fixture("engine")


def small_home(name: str = "lab", extra: str = "teapot"):
    """A home of few tokens: every restore prefills it again (seconds on a busy 2-core machine)."""
    return environment_from_dict({
        "name": name, "rooms": [{"name": "kitchen", "places": ["fridge", "counter"], "objects": ["mug", extra],
                                 "openable": ["fridge"]}, {"name": "bedroom", "places": ["bed"], "objects": []}],
        "actions": [{"name": "go_to", "args": ["place"]}, {"name": "pick", "args": ["object"]},
                    {"name": "open", "args": ["place"]}]})


@pytest.fixture
def planners(engine):
    """planners() -> a fresh Planner on a small default home (a daemon's start); all unpinned at the end."""
    made: list[Planner] = []

    def make(env=None) -> Planner:
        made.append(Planner(engine, env or small_home("home", extra="milk")))
        return made[-1]

    yield make
    for p in made:  # the shared engine as it was: no pins left behind
        for home in p.homes.values():
            for pin in (home.pin, home.state_pin):
                if pin is not None:
                    engine.unpin(pin)


def before_restart(planner: Planner) -> None:
    """What a robot sent: a named home PUT twice (version 2), its state and the default's reported."""
    planner.set_environment(small_home(), "lab")
    planner.set_environment(small_home(), "lab")
    planner.set_state({"robot_at": "kitchen", "holding": "teapot"}, "lab", run=True)
    planner.set_state({"robot_at": "bedroom", "open": {"fridge": True}, "object_at": {"milk": "fridge"}}, None,
                      run=True)


def test_named_homes_and_the_states_come_back_after_a_restart(tmp_path, planners):
    first = planners()
    before_restart(first)
    store = HomeStore(tmp_path)
    assert store.save(first) == 2 and store.save(first) == 0  # written once; unchanged: not again
    assert sorted(p.name for p in tmp_path.iterdir()) == ["default.json", "named-lab.json"]

    again = planners()
    restored = HomeStore(tmp_path)
    restored.restore(again)
    lab = again.home("lab")
    assert lab.prefix.environment == small_home() and lab.prefix.version == 2  # its ETag means the same
    assert lab.state == first.home("lab").state and lab.state.holding == "teapot" and lab.state_pin is not None
    assert again.home(None).state == first.home(None).state == HomeState(
        robot_at="bedroom", object_at={"milk": "fridge"}, open={"fridge": True})
    assert again.home(None).prefix.version == 1  # the default home is --environment's, as at every start
    assert restored.report() == {"homes_restored": [{"environment": "lab", "version": 2, "state": True},
                                                    {"environment": "default", "version": 1, "state": True}],
                                 "homes_skipped": []}
    assert restored.save(again) == 0  # what came back is what is on disk


def test_removing_a_home_or_its_last_state_removes_its_file(tmp_path, planners):
    p = planners()
    before_restart(p)
    store = HomeStore(tmp_path)
    store.save(p)
    p.remove("lab")
    p.set_environment(small_home("home", extra="milk"))  # a new default version starts from its own state
    assert store.save(p) == 2 and list(tmp_path.iterdir()) == []
    HomeStore(tmp_path).restore(fresh := planners())
    assert list(fresh.homes) == [None] and fresh.home(None).state is None


def test_a_damaged_file_is_reported_and_skipped_and_the_others_come_back(tmp_path, planners, caplog):
    first = planners()
    before_restart(first)
    HomeStore(tmp_path).save(first)
    good = json.loads((tmp_path / "named-lab.json").read_text())
    (tmp_path / "named-cut.json").write_text((tmp_path / "named-lab.json").read_text()[:200])  # cut short
    (tmp_path / "named-odd.json").write_text(json.dumps({**good, "name": "odd", "environment": {"name": "x"}}))
    (tmp_path / "named-swap.json").write_text(json.dumps(good))  # lab's record under another name
    (tmp_path / "named-old.json").write_text(json.dumps({**good, "name": "old", "format": 0}))

    again = planners()
    store = HomeStore(tmp_path)
    with caplog.at_level("WARNING"):
        store.restore(again)  # never raises
    assert sorted(n for n in again.homes if n) == ["lab"] and again.home(None).state is not None
    why = {s["file"].rsplit("/", 1)[1]: s["why"] for s in store.report()["homes_skipped"]}
    assert sorted(why) == ["named-cut.json", "named-odd.json", "named-old.json", "named-swap.json"]
    assert why["named-cut.json"].startswith("not JSON")
    assert "its environment: give rooms and actions" in why["named-odd.json"]
    assert why["named-swap.json"] == ("it holds the home 'lab', not the one its name says "
                                      "(kept as named-swap.json.unreadable)")
    assert why["named-old.json"].startswith("not a format-1 home file")
    assert all(f"home file {tmp_path / name} skipped" in caplog.text for name in why)
    # kept for a look, not read again: the next start reports nothing
    assert sorted(p.name for p in tmp_path.glob("*.unreadable")) == sorted(f"{n}.unreadable" for n in why)
    HomeStore(tmp_path).restore(third := planners())
    assert sorted(n for n in third.homes if n) == ["lab"]


def test_a_state_for_another_default_home_is_dropped_not_applied(tmp_path, planners):
    first = planners()
    before_restart(first)
    HomeStore(tmp_path).save(first)
    other = planners(small_home("home", extra="apple"))  # started with another --environment
    store = HomeStore(tmp_path)
    store.restore(other)
    assert other.home(None).state is None and other.home("lab").state is not None
    [skipped] = store.report()["homes_skipped"]
    assert skipped["file"].endswith("default.json") and "another default home" in skipped["why"]
    assert not (tmp_path / "default.json").exists()


def test_a_home_that_no_longer_fits_is_skipped_and_its_file_kept(tmp_path, planners, monkeypatch):
    first = planners()
    before_restart(first)
    HomeStore(tmp_path).save(first)
    again = planners()
    from orin_llm.runtime.cache import PinTooLarge

    def full(self, *args, **kw):
        raise PinTooLarge("the pins would leave no room for a request")

    monkeypatch.setattr(Planner, "set_environment", full)
    store = HomeStore(tmp_path)
    store.restore(again)
    assert "lab" not in again.homes and again.home(None).state is not None  # the default's state still came
    assert store.report()["homes_skipped"][0]["why"] == "cannot pin it: the pins would leave no room for a request"
    assert (tmp_path / "named-lab.json").exists()  # tried again at the next start
    assert store.save(again) == 0 and (tmp_path / "named-lab.json").exists()  # not removed as "gone"


@pytest.mark.parametrize("point", POINTS)
def test_a_save_killed_at_any_point_leaves_the_old_homes_or_the_new(tmp_path, planners, point):
    p = planners()
    before_restart(p)
    store = HomeStore(tmp_path)
    store.save(p)
    p.set_state({"robot_at": "counter"}, "lab", run=True)  # the change being saved when killed
    assert killed_at(point, lambda: store.save(p)) == (point != "not killed")

    restored = HomeStore(tmp_path)  # the next start: it clears what the killed write left
    restored.restore(again := planners())
    assert restored.report()["homes_skipped"] == [] and not list(tmp_path.glob(".*"))
    new = POINTS.index(point) >= RENAMED
    assert again.home("lab").state.robot_at == ("counter" if new else "kitchen")
    assert again.home("lab").state.holding == "teapot"
