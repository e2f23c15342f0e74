"""The home model: what a valid home is (identifiers, unique names, examples that call declared
actions with the right arity, argument types and devices) and its version key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from orin_llm.errors import OrinError
from orin_llm.planning.home import (
    EXAMPLE_HOME_PATH,
    Environment,
    environment_from_dict,
    load_environment,
    prefix_messages,
    version_key,
)
from tests.planning.home.homes import home_dict, write


def test_example_home_loads(home: Environment) -> None:
    assert EXAMPLE_HOME_PATH.parts[-4:] == ("orin_llm", "data", "homes", "example_home.yaml")
    assert home.name == "example_home"
    assert not home.is_text
    assert 4 <= len(home.rooms) <= 5
    assert 6 <= len(home.actions) <= 8
    assert len(home.examples) == 3
    assert [a.name for a in home.actions][:3] == ["go_to", "pick", "place"]
    assert home.action("place") is not None and home.action("place").args == ["object", "place"]
    kitchen = next(r for r in home.rooms if r.name == "kitchen")
    assert "fridge" in kitchen.places and "mug" in kitchen.objects


def test_version_key_changes_with_content(home: Environment) -> None:
    d = home_dict()
    d["rooms"][0]["objects"].append("torch")
    other = environment_from_dict(d)
    assert len(version_key(home)) == 64
    assert version_key(other) != version_key(home)
    assert prefix_messages(other) != prefix_messages(home)


def test_example_calling_undeclared_action(tmp_path: Path) -> None:
    d = home_dict()
    d["examples"][1]["plan"].insert(2, "teleport(kitchen)")
    p = write(tmp_path, "home.yaml", yaml.safe_dump(d, sort_keys=False))
    with pytest.raises(OrinError) as exc:
        load_environment(p)
    msg = str(exc.value)
    assert "examples.1.plan.2" in msg
    assert "teleport" in msg and "undeclared" in msg


def test_example_wrong_arg_count() -> None:
    d = home_dict()
    d["examples"][0]["plan"][5] = "place(milk)"
    with pytest.raises(OrinError, match=r"examples\.0\.plan\.5: 'place\(milk\)' passes 1 argument"):
        environment_from_dict(d)


def test_example_step_not_a_call() -> None:
    d = home_dict()
    d["examples"][2]["plan"][0] = "walk to the tv"
    with pytest.raises(OrinError, match=r"examples\.2\.plan\.0: .* not an action call"):
        environment_from_dict(d)


def test_examples_run_in_the_home_as_plans_do() -> None:
    """An example is checked as a plan is: the things it names exist, they can do what it does, and each
    step can run in the home's state after the steps before it; else the error names the line and why."""
    d = home_dict()
    d["examples"][1]["plan"][1] = "pick(cat)"
    with pytest.raises(OrinError, match=r"examples\.1\.plan\.1: 'pick\(cat\)': 'cat' is not an object of this "
                                        r"home; an example names only the home's things"):
        environment_from_dict(d)
    d = home_dict()
    d["examples"][2]["plan"].insert(1, "open(tv)")
    with pytest.raises(OrinError, match=r"examples\.2\.plan\.1: 'open\(tv\)': tv does not open and close"):
        environment_from_dict(d)
    d = home_dict()
    d["examples"][1]["plan"].remove("pick(socks)")
    with pytest.raises(OrinError, match=r"examples\.1\.plan\.2: 'place\(socks, laundry_basket\)' cannot run in "
                                        r"the home's state after the example's steps before it: the robot does not "
                                        r"hold socks \(the hand is empty\)"):
        environment_from_dict(d)
    # the home's state: the milk is in the closed fridge, so an example that does not open it first fails ...
    d = home_dict()
    d["examples"][0]["plan"].remove("open(fridge)")
    assert d["state"]["open"] == {"fridge": False} and d["state"]["object_at"]["milk"] == "fridge"
    with pytest.raises(OrinError, match=r"examples\.0\.plan\.1: 'pick\(milk\)' cannot run .*milk is inside "
                                        r"fridge, which is closed: open it first"):
        environment_from_dict(d)
    # ... and passes in a home that does not say so (a fact not known never blocks a step)
    del d["state"]
    assert environment_from_dict(d).examples[0].plan[1] == "pick(milk)"


def test_identifiers_and_uniqueness_are_checked() -> None:
    d = home_dict()
    d["rooms"][2]["name"] = "living room"
    with pytest.raises(OrinError, match=r"rooms\.2\.name: .*must be an identifier"):
        environment_from_dict(d)
    d = home_dict()
    d["actions"][0]["name"] = "go-to"
    with pytest.raises(OrinError, match=r"actions\.0\.name"):
        environment_from_dict(d)
    d = home_dict()
    d["rooms"][3]["places"].append("sink")
    with pytest.raises(OrinError, match=r"rooms\.3\.places: 'sink' is already used at rooms\.1\.places"):
        environment_from_dict(d)


def test_structured_or_text_required() -> None:
    with pytest.raises(OrinError, match="give rooms and actions"):
        environment_from_dict({"name": "empty"})
    with pytest.raises(OrinError, match="not both"):
        environment_from_dict({**home_dict(), "text": "a flat"})
    with pytest.raises(OrinError, match="must be a mapping"):
        environment_from_dict(["not", "a", "dict"], source="x.yaml")


def test_devices_and_argument_types(tmp_path: Path) -> None:
    home = load_environment(EXAMPLE_HOME_PATH)
    assert home.names("device") == ["hallway_light", "kettle", "tv", "floor_lamp", "bedside_lamp"]
    assert "kitchen" in home.names("place") and "fridge" in home.names("place")
    assert "Devices: tv, floor_lamp." in prefix_messages(home)[0]["content"]
    legacy = home_dict()
    for room in legacy["rooms"]:
        room.pop("devices", None)
    old = environment_from_dict(legacy)  # a home that names no devices still loads:
    assert old.names("device") == [n for r in old.rooms for n in r.places + r.objects]  # any place or object
    bad = home_dict()
    bad["actions"][0]["args"] = ["surface"]
    with pytest.raises(OrinError, match="'surface' is not an argument type; .* place, object, device, text"):
        environment_from_dict(bad)
    elsewhere = home_dict()
    elsewhere["rooms"][0]["devices"] = ["tv"]  # the tv is in the living room
    with pytest.raises(OrinError, match="rooms.0.devices: 'tv' is used at rooms.2.places"):
        environment_from_dict(elsewhere)
    own = home_dict()
    own["rooms"][1]["devices"] = ["kettle", "ceiling_light"]  # a device of its own name
    assert "ceiling_light" in environment_from_dict(own).names("device")
