"""The home format's additions (action kinds, openable places, the `state:` block) and HomeState:
what loads, every refusal with what to fix, and partial updates from the robot."""

from __future__ import annotations

import json

import pytest

from orin_llm.errors import OrinError
from orin_llm.planning.home import (
    KINDS,
    HomeState,
    apply_update,
    environment_from_dict,
    load_environment,
    state_from_dict,
)

from .homes import flat_dict, home_dict, write


def test_kinds_default_from_the_built_in_names(home) -> None:
    kinds = {a.name: a.effective_kind for a in home.actions}
    assert kinds == {"go_to": "navigate", "pick": "pick", "place": "place", "open": "open", "close": "close",
                     "switch_on": "switch_on", "switch_off": "switch_off", "say": "say"}
    assert all(a.kind is None for a in home.actions)  # nothing written back that the file did not say


def test_own_action_names_take_their_kind_and_the_rest_are_other() -> None:
    env = environment_from_dict(flat_dict())
    kinds = {a.name: a.effective_kind for a in env.actions}
    assert kinds["walk_to"] == "navigate" and kinds["shut"] == "close" and kinds["announce"] == "say"
    assert kinds["wipe"] == "other" and kinds["give"] == "other"
    assert set(kinds.values()) == set(KINDS)


def test_a_built_in_name_with_other_arguments_is_other() -> None:
    d = home_dict()
    d["actions"][1]["args"] = ["place"]  # pick(place): not the pick rule's object
    d["examples"] = []  # they pick objects, which pick(place) cannot name
    env = environment_from_dict(d)
    assert env.action("pick").effective_kind == "other"


def test_an_unknown_kind_is_refused_with_the_kinds() -> None:
    d = flat_dict()
    d["actions"][0]["kind"] = "teleport"
    with pytest.raises(OrinError, match=r"actions\.0\.kind: kind 'teleport' is not a kind of action; use one of "
                                        r"navigate, pick, place"):
        environment_from_dict(d)


def test_a_kind_whose_arguments_do_not_fit_is_refused() -> None:
    d = flat_dict()
    d["actions"][2]["args"] = ["place", "object"]
    with pytest.raises(OrinError, match=r"action 'put' of kind place takes \(object, place\) first, not \(place, "
                                        r"object\); fix its args or its kind"):
        environment_from_dict(d)


def test_openable_names_places_of_its_room() -> None:
    d = flat_dict()
    d["rooms"][0]["openable"] = ["cupboard"]
    with pytest.raises(OrinError, match=r"rooms\.0.*'cupboard' is not a place of room 'kitchen'"):
        environment_from_dict(d)


def test_a_home_that_names_no_openable_places_opens_any(home) -> None:
    d = home_dict()
    for room in d["rooms"]:
        room.pop("openable", None)
    d.pop("state")
    env = environment_from_dict(d)
    assert env.openable_places() == set(env.names("place")) - {r.name for r in env.rooms}
    assert home.openable_places() == {"front_door", "fridge", "kitchen_cabinet", "wardrobe", "bathroom_cabinet"}


def test_the_state_block_loads_from_yaml(tmp_path) -> None:
    p = write(tmp_path, "h.yaml", """
name: h
rooms:
  - {name: kitchen, places: [fridge, sink], objects: [milk, mug], openable: [fridge], devices: [kettle]}
actions:
  - {name: go_to, args: [place]}
state:
  robot_at: sink
  holding: mug
  object_at: {milk: fridge}
  open: {fridge: false}
  on: {kettle: true}
""")
    env = load_environment(p)
    assert env.state == HomeState(robot_at="sink", holding="mug", object_at={"milk": "fridge"},
                                  open={"fridge": False}, on={"kettle": True})
    assert json.loads(env.state.model_dump_json())["object_at"] == {"milk": "fridge"}


@pytest.mark.parametrize("state, message", [
    ({"robot_at": "garage"}, r"state: robot_at: 'garage' is not a room or place of this home \(kitchen, counter"),
    ({"holding": ["mug", "milk"]}, r"holding: the robot holds one object at a time; give one object name \(or "
                                   r"null for an empty hand\), not 2 items"),
    ({"holding": "sofa"}, r"holding: 'sofa' is not an object of this home"),
    ({"holding": "mug", "object_at": {"mug": "sink"}}, r"'mug' is both held and at 'sink': an object is in one "
                                                       r"place at a time"),
    ({"object_at": {"mug": ["sink", "counter"]}}, r"object_at\.mug: an object lies in one place at a time"),
    ({"object_at": {"mug": "garage"}}, r"object_at\.mug: 'garage' is not a room or place of this home"),
    ({"object_at": {"cat": "sink"}}, r"object_at: 'cat' is not an object of this home"),
    ({"open": {"sofa": True}}, r"open: 'sofa' is not a place that opens and closes \(cupboard, fridge\); declare "
                               r"it under its room's openable list"),
    ({"on": {"book": True}}, r"on: 'book' is not a device of this home \(fridge, ceiling_light, tv_stand\)"),
    ({"done": [["fly", "sofa"]]}, r"done\.0: 'fly' is not an action of this home"),
    ({"where": "sofa"}, r"unknown key 'where' \(allowed keys: robot_at, holding, object_at, open, on, said, done\)"),
    ({"open": ["fridge"]}, r"open: must be a mapping, e.g. open: \{fridge: false\}"),
    ({"said": "yes"}, r"said"),
])
def test_a_state_that_does_not_fit_the_home_is_refused(state, message) -> None:
    d = flat_dict()
    d["state"] = state
    with pytest.raises(OrinError, match=message):
        environment_from_dict(d)
    env = environment_from_dict(flat_dict())
    with pytest.raises(OrinError, match=message):
        state_from_dict(state, env)


def test_a_plain_text_home_has_no_state() -> None:
    with pytest.raises(OrinError, match="give either text or rooms/actions/examples, not both"):
        environment_from_dict({"name": "t", "text": "a flat", "state": {"said": True}})


def test_a_partial_update_merges_and_null_forgets() -> None:
    env = environment_from_dict(flat_dict())
    before = HomeState(robot_at="sofa", object_at={"mug": "sink", "book": "sofa"}, open={"fridge": False},
                       on={"tv_stand": True})
    after = apply_update(before, {"robot_at": "counter", "object_at": {"book": None, "milk": "counter"},
                                  "open": {"fridge": True}}, env)
    assert after.robot_at == "counter"
    assert after.object_at == {"mug": "sink", "milk": "counter"}
    assert after.open == {"fridge": True} and after.on == {"tv_stand": True}
    assert before.robot_at == "sofa" and before.object_at["book"] == "sofa"  # the old state is kept as it was


def test_an_update_about_the_hand_moves_the_object() -> None:
    env = environment_from_dict(flat_dict())
    start = HomeState(object_at={"mug": "sink"})
    held = apply_update(start, {"holding": "mug"}, env)
    assert held.holding == "mug" and "mug" not in held.object_at
    put = apply_update(held, {"object_at": {"mug": "counter"}}, env)
    assert put.holding is None and put.object_at["mug"] == "counter"


def test_an_update_that_does_not_fit_raises_and_changes_nothing() -> None:
    env = environment_from_dict(flat_dict())
    start = HomeState(robot_at="sofa")
    with pytest.raises(OrinError, match=r"state update: robot_at: 'moon' is not a room or place"):
        apply_update(start, {"robot_at": "moon"}, env)
    with pytest.raises(OrinError, match=r"state update: holding: the robot holds one object at a time"):
        apply_update(start, {"holding": ["mug", "book"]}, env)
    with pytest.raises(OrinError, match=r"'mug' is both held and at 'sink'"):
        apply_update(start, {"holding": "mug", "object_at": {"mug": "sink"}}, env)
    assert start == HomeState(robot_at="sofa")
