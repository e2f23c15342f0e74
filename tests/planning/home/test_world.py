"""The simulator, rule by rule (docs/HOMES.md): what each kind of step needs, what it changes, how a
step that cannot run is sorted, and feasible() / key as the decoder uses them."""

from __future__ import annotations

import itertools

import pytest

from orin_llm.errors import OrinError
from orin_llm.planning.calibration_data import home_names, load_home, load_split
from orin_llm.planning.home import HomeState, World, environment_from_dict, simulate
from orin_llm.planning.home.steps import check_steps

from .homes import flat_dict


@pytest.fixture
def flat():
    return environment_from_dict(flat_dict())


def at(env, **state) -> World:
    return World.start(env, HomeState(**state))


def why(world: World, action: str, *args: str):
    v = world.check(action, list(args))
    return None if v is None else (v.kind, v.reason)


def test_navigate_puts_the_robot_at_a_place_or_a_room(flat) -> None:
    w = at(flat, robot_at="sofa")
    assert why(w, "walk_to", "fridge") is None
    assert w.apply("walk_to", ["fridge"]).robot_at == "fridge"
    assert w.apply("walk_to", ["kitchen"]).robot_at == "kitchen"


def test_pick_needs_an_empty_hand(flat) -> None:
    w = at(flat, robot_at="kitchen", holding="mug")
    assert why(w, "grab", "milk") == ("precondition", "the robot holds mug: place it before picking up milk")
    assert why(w, "grab", "mug") == ("precondition", "the robot already holds mug")


def test_pick_of_an_object_somewhere_in_its_room_needs_the_robot_in_that_room(flat) -> None:
    for where in ("kitchen", "sink", "counter"):
        assert why(at(flat, robot_at=where), "grab", "mug") is None
    assert why(at(flat, robot_at="sofa"), "grab", "mug") == (
        "precondition", "the robot is at sofa, not at kitchen: go there first")
    w = at(flat, robot_at="sink").apply("grab", ["mug"])
    assert w.holding == "mug" and w.location("mug") is None


def test_pick_of_an_object_at_a_known_place_needs_the_robot_there(flat) -> None:
    state = {"object_at": {"mug": "counter"}}
    assert why(at(flat, robot_at="counter", **state), "grab", "mug") is None
    assert why(at(flat, robot_at="sink", **state), "grab", "mug") == (
        "precondition", "the robot is at sink, not at counter: go there first")


def test_pick_from_a_closed_place_needs_it_opened_first(flat) -> None:
    closed = at(flat, robot_at="fridge", object_at={"milk": "fridge"}, open={"fridge": False})
    assert why(closed, "grab", "milk") == ("precondition", "milk is inside fridge, which is closed: open it first")
    assert why(closed.apply("open_up", ["fridge"]), "grab", "milk") is None
    unknown = at(flat, robot_at="fridge", object_at={"milk": "fridge"})
    assert why(unknown, "grab", "milk") is None  # not known to be closed: never blocks


def test_unknown_facts_never_block(flat) -> None:
    w = World.start(flat)  # nothing known but the empty hand
    for action, args in [("grab", ["mug"]), ("open_up", ["fridge"]), ("shut", ["fridge"]), ("wipe", ["sofa"]),
                         ("power_on", ["tv_stand"]), ("power_off", ["ceiling_light"])]:
        assert why(w, action, *args) is None, action
    assert why(w, "put", "mug", "sink") is not None  # the hand is always known


def test_an_unknown_start_is_fixed_by_the_first_step_that_needs_a_place(flat) -> None:
    """Rule 1, no teleporting (docs/HOMES.md): from an unknown start each kind of step runs, and the robot
    is then where the step was done, so a step in another room needs a navigate first."""
    start = World.start(flat)
    assert start.robot_at is None
    cases = [  # the step from the unknown start, where the robot is after it, a step it now needs a move for
        (("grab", ["mug"]), "kitchen", ("wipe", ["sofa"])),  # mug: somewhere in the kitchen
        (("open_up", ["cupboard"]), "cupboard", ("grab", ["mug"])),
        (("shut", ["fridge"]), "fridge", ("wipe", ["tv_stand"])),
        (("power_on", ["tv_stand"]), "tv_stand", ("open_up", ["fridge"])),
        (("power_off", ["ceiling_light"]), "kitchen", ("wipe", ["sofa"])),  # a device of its own: its room
        (("wipe", ["sofa"]), "sofa", ("grab", ["milk"])),
    ]
    for (action, args), where, elsewhere in cases:
        w = start.apply(action, args)
        assert w.robot_at == where, (action, args)
        v = why(w, *[elsewhere[0], *elsewhere[1]])
        assert v is not None and v[0] == "precondition" and "go there first" in v[1], (action, elsewhere, v)


def test_an_unknown_start_is_fixed_by_a_pick_at_a_known_place_and_by_a_place(flat) -> None:
    w = at(flat, object_at={"book": "tv_stand"}).apply("grab", ["book"])
    assert w.robot_at == "tv_stand"
    assert why(w, "put", "book", "counter") == (
        "precondition", "the robot is at tv_stand, not at counter: go there first")
    held = at(flat, holding="mug").apply("put", ["mug", "sofa"])
    assert held.robot_at == "sofa"
    assert why(held, "grab", "milk") == ("precondition", "the robot is at sofa, not at kitchen: go there first")


def test_steps_that_tell_nothing_of_where_leave_the_start_unknown(flat) -> None:
    w = at(flat, holding="mug")
    assert w.apply("give", ["mug"]).robot_at is None  # done with the object in hand, wherever it is
    assert w.apply("announce", ['"hi"']).robot_at is None


def test_a_teleporting_plan_is_not_executable_from_an_unknown_start(flat) -> None:
    steps, _ = check_steps("grab(book)\nput(book, sink)", flat)
    _, violations = simulate(flat, steps)
    assert [(v.index, v.kind) for v in violations] == [(1, "precondition")]
    steps, _ = check_steps("grab(book)\nwalk_to(sink)\nput(book, sink)", flat)
    assert simulate(flat, steps)[1] == []


def test_place_needs_the_object_in_hand_and_the_robot_there(flat) -> None:
    empty = at(flat, robot_at="sink")
    assert why(empty, "put", "mug", "sink") == (
        "precondition", "the robot does not hold mug (the hand is empty): pick it up first")
    other = at(flat, robot_at="sink", holding="milk")
    assert why(other, "put", "mug", "sink") == (
        "precondition", "the robot does not hold mug (it holds milk): pick it up first")
    held = at(flat, robot_at="counter", holding="mug")
    assert why(held, "put", "mug", "sink") == ("precondition", "the robot is at counter, not at sink: go there first")
    done = held.apply("put", ["mug", "counter"])
    assert done.holding is None and done.location("mug") == "counter"
    assert why(held, "put", "mug", "kitchen") is None  # at a room: anywhere in it


def test_place_into_a_closed_place_needs_it_opened_first(flat) -> None:
    w = at(flat, robot_at="fridge", holding="milk", open={"fridge": False})
    assert why(w, "put", "milk", "fridge") == ("precondition", "fridge is closed: open it first")
    assert w.apply("open_up", ["fridge"]).apply("put", ["milk", "fridge"]).location("milk") == "fridge"


def test_open_and_close_need_the_robot_there_and_the_other_state(flat) -> None:
    w = at(flat, robot_at="fridge", open={"fridge": True})
    assert why(w, "open_up", "fridge") == ("precondition", "fridge is already open")
    shut = w.apply("shut", ["fridge"])
    assert shut.is_open("fridge") is False and shut.done == (("shut", "fridge"),)
    assert why(shut, "shut", "fridge") == ("precondition", "fridge is already closed")
    assert why(at(flat, robot_at="sink"), "open_up", "fridge") == (
        "precondition", "the robot is at sink, not at fridge: go there first")


def test_only_openable_places_open(flat) -> None:
    assert why(at(flat, robot_at="sofa"), "open_up", "sofa") == ("affordance", "sofa does not open and close")


def test_switching_needs_a_device_the_robot_is_at_in_the_other_state(flat) -> None:
    w = at(flat, robot_at="tv_stand", on={"tv_stand": False})
    on = w.apply("power_on", ["tv_stand"])
    assert on.is_on("tv_stand") is True and on.done == (("power_on", "tv_stand"),)
    assert why(on, "power_on", "tv_stand") == ("precondition", "tv_stand is already on")
    assert why(w, "power_off", "tv_stand") == ("precondition", "tv_stand is already off")
    assert why(at(flat, robot_at="sofa"), "power_on", "tv_stand") == (
        "precondition", "the robot is at sofa, not at tv_stand: go there first")


def test_a_device_of_its_own_is_switched_from_its_room(flat) -> None:
    assert why(at(flat, robot_at="sink"), "power_on", "ceiling_light") is None
    assert why(at(flat, robot_at="sofa"), "power_on", "ceiling_light") == (
        "precondition", "the robot is at sofa, not at ceiling_light: go there first")


def test_switching_a_thing_that_is_not_a_device_is_an_affordance_error() -> None:
    d = flat_dict()
    d["actions"][5]["args"] = ["place"]  # power_on(place): a place that is not a device can be named
    env = environment_from_dict(d)
    assert why(at(env, robot_at="sofa"), "power_on", "sofa") == (
        "affordance", "sofa is not a device: it cannot be switched on or off")


def test_other_needs_the_robot_at_its_first_argument_when_that_is_a_place(flat) -> None:
    assert why(at(flat, robot_at="sink"), "wipe", "sofa") == (
        "precondition", "the robot is at sink, not at sofa: go there first")
    w = at(flat, robot_at="sofa").apply("wipe", ["sofa"])
    assert w.done == (("wipe", "sofa"),)



def test_other_on_an_object_needs_it_in_hand(flat) -> None:
    assert why(at(flat, robot_at="sink"), "give", "book") == (
        "precondition", "the robot does not hold book (the hand is empty): pick it up first")
    assert why(at(flat, robot_at="sink", holding="mug"), "give", "book") == (
        "precondition", "the robot does not hold book (it holds mug): pick it up first")
    w = at(flat, robot_at="sink", holding="book")
    assert why(w, "give", "book") is None  # anywhere: an object is no place to be at
    assert w.apply("give", ["book"]).done == (("give", "book"),)
    assert w.feasible("give") == [("book",)] and at(flat, robot_at="sink").feasible("give") == []


def test_say_always_runs(flat) -> None:
    w = at(flat, robot_at="sofa", holding="book")
    assert why(w, "announce", "hello") is None and w.apply("announce", ["hello"]).said


def test_steps_the_home_does_not_have_are_unknown(flat) -> None:
    w = World.start(flat)
    assert why(w, "fly", "sofa") == ("unknown", "'fly' is not an action of this home")
    assert why(w, "walk_to", "garage") == ("unknown", "'garage' is not a place of this home")
    assert why(w, "walk_to") == ("unknown", "walk_to takes 1 argument(s), not 0")


def test_apply_refuses_a_step_that_cannot_run(flat) -> None:
    with pytest.raises(OrinError, match=r"put\(mug, sink\) cannot run: the robot does not hold mug"):
        World.start(flat).apply("put", ["mug", "sink"])


def test_start_refuses_a_state_naming_what_the_home_does_not_have(flat) -> None:
    with pytest.raises(OrinError, match="state of 'flat': robot_at: 'garage' is not a room or place"):
        World.start(flat, HomeState(robot_at="garage"))
    with pytest.raises(OrinError, match="plain text"):
        World.start(environment_from_dict({"name": "t", "text": "a flat"}))


def test_the_world_is_immutable(flat) -> None:
    w = at(flat, robot_at="sink")
    w.apply("grab", ["mug"])
    assert w.holding is None and w.state == HomeState(robot_at="sink", object_at=World.start(flat).state.object_at)


def test_simulate_lists_each_step_that_cannot_run_and_skips_it(flat) -> None:
    steps, _ = check_steps('put(mug, sink)\nwalk_to(sink)\ngrab(mug)\ngrab(mug)\nannounce("done")', flat)
    world, violations = simulate(flat, steps, HomeState(robot_at="sofa"))
    assert [(v.index, v.step, v.kind) for v in violations] == [(0, "put(mug, sink)", "precondition"),
                                                               (3, "grab(mug)", "precondition")]
    assert violations[0].as_dict()["reason"].startswith("the robot does not hold mug")
    assert world.holding == "mug" and world.said and world.robot_at == "sink"


def test_every_reference_plan_and_example_runs_in_its_home() -> None:
    homes = {n: load_home(n) for n in home_names()}
    for item in load_split("calib") + load_split("heldout"):
        steps, rejected = check_steps("\n".join(item.reference_plan), homes[item.home])
        assert not rejected and simulate(homes[item.home], steps)[1] == [], item.id
    for env in homes.values():
        for ex in env.examples:
            assert simulate(env, check_steps("\n".join(ex.plan), env)[0])[1] == [], ex.task


def test_the_example_home_starts_in_its_state(home) -> None:
    w = World.start(home)
    assert w.robot_at == "hallway" and w.location("milk") == "fridge" and w.is_open("fridge") is False
    assert why(w, "pick", "milk")[0] == "precondition"


def _brute(world: World, env, action: str):
    types = env.action(action).args
    pools = [env.names(t) for t in types]
    return [args for args in itertools.product(*pools) if world.check(action, list(args)) is None]


@pytest.mark.parametrize("state", [
    {}, {"robot_at": "kitchen"}, {"robot_at": "fridge", "holding": "milk", "open": {"fridge": False}},
    {"robot_at": "cupboard", "object_at": {"book": "cupboard"}, "open": {"cupboard": False}, "on": {"tv_stand": True}},
])
def test_feasible_lists_exactly_the_steps_that_check(flat, state) -> None:
    w = World.start(flat, HomeState(**state))
    for a in flat.actions:
        got = w.feasible(a.name)
        if "text" in a.args:
            assert got is None
            continue
        every = list(itertools.product(*[flat.names(t) for t in a.args]))
        want = _brute(w, flat, a.name)
        assert (got if got is not None else every) == want, a.name
        assert got is None or len(got) < len(every)  # None only when nothing is to be narrowed
        assert w.feasible(a.name) is got  # asked again: the same answer, not recomputed
    assert w.feasible("fly") == []


def test_key_is_equal_for_equal_worlds_and_differs_where_steps_differ(flat) -> None:
    a = at(flat, robot_at="sink").apply("grab", ["mug"]).apply("put", ["mug", "sink"])
    b = at(flat, robot_at="counter").apply("walk_to", ["sink"]).apply("grab", ["mug"]).apply("put", ["mug", "sink"])
    assert a.key == b.key and hash(a.key) == hash(b.key)
    assert a.key != at(flat, robot_at="sink").key  # the mug moved
    back = at(flat, robot_at="sink").apply("grab", ["mug"]).apply("put", ["mug", "kitchen"])
    assert back.key == at(flat, robot_at="sink").key  # put back in its room: the same world as before


def test_steps_lists_every_ground_step_that_can_run(flat) -> None:
    w = at(flat, robot_at="sofa", holding="book", open={"cupboard": False})
    got = set(w.steps("hi"))
    assert ("put", ("book", "sofa")) in got and ("announce", ("hi",)) in got
    assert ("put", ("book", "sink")) not in got and ("grab", ("remote",)) not in got
    assert all(w.check(a, list(args)) is None for a, args in got)


def test_a_navigate_or_other_step_right_after_itself_is_refused(flat) -> None:
    w = at(flat, robot_at="sofa")
    moved = w.apply("walk_to", ["sink"])
    assert why(moved, "walk_to", "sink") == ("precondition", "walk_to(sink) was just done: again changes nothing")
    assert ("sink",) not in moved.feasible("walk_to") and ("sofa",) in moved.feasible("walk_to")
    wiped = moved.apply("wipe", ["sink"])
    assert why(wiped, "wipe", "sink") == ("precondition", "wipe(sink) was just done: again changes nothing")
    assert why(wiped.apply("grab", ["mug"]), "wipe", "sink") is None  # after another step: again
    assert why(w, "walk_to", "sofa") is None  # going where the robot is, as a first step: allowed
    assert wiped.key != wiped.apply("grab", ["mug"]).apply("put", ["mug", "kitchen"]).key


def test_feasible_steps_after_an_unknown_start_are_those_of_where_the_robot_now_is(flat) -> None:
    """Rule 1 in what the decoder may write next (the mask, the remote step loop: World.feasible)."""
    w = World.start(flat).apply("grab", ["book"])  # the book: somewhere in the lounge
    # in the lounge, at none of its places: the room itself (a walk to the sofa first for the sofa)
    assert w.feasible("put") == [("book", "lounge")]
    before = World.start(flat, HomeState(holding="book")).feasible("put")  # unknown: anywhere
    assert before == [("book", p) for p in dict.fromkeys(flat.names("place"))]
