"""Goals: each predicate parsed and checked against a world, every refusal, and the goal a reference
plan makes true (what the plan-quality bench scores against)."""

from __future__ import annotations

import pytest

from orin_llm.errors import OrinError
from orin_llm.planning.home import HomeState, World, environment_from_dict
from orin_llm.planning.home.goals import Fact, consistent, goal_of_plan, parse_goal
from orin_llm.planning.home.steps import check_steps

from .homes import flat_dict


@pytest.fixture
def flat():
    return environment_from_dict(flat_dict())


def test_every_predicate_parses(flat) -> None:
    goal = parse_goal(["at(mug, sink)", "holding(book)", "robot_at(lounge)", "open(fridge)", "closed(cupboard)",
                       "on(tv_stand)", "off(ceiling_light)", "done(wipe, sofa)", "done(give)", "said"], flat)
    assert [str(f) for f in goal.facts] == ["at(mug, sink)", "holding(book)", "robot_at(lounge)", "open(fridge)",
                                            "closed(cupboard)", "on(tv_stand)", "off(ceiling_light)",
                                            "done(wipe, sofa)", "done(give)", "said"]
    assert parse_goal(["said()", "said"], flat).facts == (Fact("said"),)  # the same fact once


@pytest.mark.parametrize("fact, message", [
    ("inside(mug, fridge)", r"'inside' is not a goal predicate; use one of at\(object, place\)"),
    ("the mug is clean", r"is not written like a step; write e.g. at\(mug, sink\)"),
    ("at(mug)", r"write it as at\(object, place\)"),
    ("at(sofa, kitchen)", r"'sofa' is not an object of this home"),
    ("at(mug, garage)", r"'garage' is not a room or place of this home"),
    ("holding(cat)", r"'cat' is not an object of this home"),
    ("robot_at(moon)", r"'moon' is not a room or place of this home"),
    ("on(unicorn)", r"'unicorn' is not a thing of this home"),
    ("done(fly, sofa)", r"'fly' is not an action of this home"),
    ("done(wipe, moon)", r"'moon' is not a thing of this home"),
    ("said(loudly)", r"write it as said"),
])
def test_a_fact_that_does_not_fit_the_home_is_refused(flat, fact, message) -> None:
    with pytest.raises(OrinError, match=message):
        parse_goal([fact], flat)


def test_an_empty_goal_and_a_text_home_are_refused(flat) -> None:
    with pytest.raises(OrinError, match="the goal is empty"):
        parse_goal([], flat)
    with pytest.raises(OrinError, match="plain text"):
        parse_goal(["said"], environment_from_dict({"name": "t", "text": "a flat"}))


def test_missing_and_reached_follow_the_world(flat) -> None:
    goal = parse_goal(["at(mug, sink)", "robot_at(kitchen)", "closed(fridge)", "said"], flat)
    w = World.start(flat, HomeState(robot_at="counter", open={"fridge": True}))
    assert goal.missing(w) == ["at(mug, sink)", "closed(fridge)", "said"]  # counter is in the kitchen
    for action, args in [("grab", ["mug"]), ("walk_to", ["sink"]), ("put", ["mug", "sink"]),
                         ("walk_to", ["fridge"]), ("shut", ["fridge"])]:
        w = w.apply(action, args)
    assert goal.missing(w) == ["said"] and not goal.reached(w)
    assert goal.reached(w.apply("announce", ["done"]))


def test_an_unknown_fact_is_missing(flat) -> None:
    goal = parse_goal(["off(tv_stand)", "closed(fridge)"], flat)
    assert goal.missing(World.start(flat)) == ["off(tv_stand)", "closed(fridge)"]


def test_at_a_room_holds_anywhere_in_it(flat) -> None:
    w = World.start(flat, HomeState(object_at={"book": "sofa"}))
    assert parse_goal(["at(book, lounge)"], flat).reached(w)
    assert not parse_goal(["at(book, kitchen)"], flat).reached(w)
    assert not parse_goal(["at(book, lounge)"], flat).reached(World.start(flat, HomeState(holding="book")))


def _goal(env, plan: str, state: HomeState | None = None) -> list[str]:
    steps, rejected = check_steps(plan, env)
    assert not rejected
    return goal_of_plan(env, steps, state)


def test_the_goal_of_a_plan_is_what_it_changes(flat) -> None:
    plan = "\n".join(["walk_to(fridge)", "open_up(fridge)", "grab(milk)", "shut(fridge)", "walk_to(sofa)",
                      "put(milk, sofa)", "walk_to(tv_stand)", "power_off(tv_stand)", "walk_to(sofa)",
                      "wipe(sofa)", 'announce("done")'])
    # the fridge was closed before (the plan opens it first) and closed after: no change to ask for
    assert _goal(flat, plan) == ["at(milk, sofa)", "off(tv_stand)", "done(wipe, sofa)", "said"]


def test_the_goal_of_a_plan_keeps_what_it_leaves_changed(flat) -> None:
    assert _goal(flat, "walk_to(cupboard)\nopen_up(cupboard)\ngrab(book)") == ["holding(book)", "open(cupboard)"]
    known = HomeState(open={"cupboard": True})
    assert _goal(flat, "walk_to(cupboard)\nshut(cupboard)", known) == ["closed(cupboard)"]
    assert _goal(flat, "walk_to(sink)\ngrab(mug)\nput(mug, kitchen)") == []  # back where it was


@pytest.mark.parametrize("facts, words", [
    (["holding(mug)", "at(mug, sink)"], r"holding\(mug\) and at\(mug, sink\) contradict each other \(mug cannot be "
                                         r"held and lie somewhere at once\)"),
    (["at(mug, sink)", "holding(mug)"], r"at\(mug, sink\) and holding\(mug\) contradict"),
    (["holding(mug)", "holding(book)"], r"holding\(mug\) and holding\(book\) contradict each other \(the robot "
                                         r"holds one object at a time\)"),
    (["at(mug, sink)", "at(mug, counter)"], r"mug cannot be at sink and at counter at once"),
    (["at(mug, kitchen)", "at(mug, sofa)"], r"mug cannot be at kitchen and at sofa at once"),  # sofa: the lounge
    (["at(mug, kitchen)", "at(mug, lounge)"], r"mug cannot be at kitchen and at lounge"),
    (["robot_at(sofa)", "robot_at(sink)"], r"the robot cannot be at sofa and at sink at once"),
    (["robot_at(lounge)", "robot_at(counter)"], r"the robot cannot be at lounge and at counter"),
    (["open(fridge)", "closed(fridge)"], r"fridge cannot be open and closed at once"),
    (["on(tv_stand)", "said", "off(tv_stand)"], r"on\(tv_stand\) and off\(tv_stand\) contradict each other "
                                                r"\(tv_stand cannot be on and off at once\)"),
])
def test_a_goal_whose_facts_contradict_is_refused_naming_both(flat, facts, words) -> None:
    with pytest.raises(OrinError, match=words + r".*no plan can reach the goal: keep one of them"):
        parse_goal(facts, flat)


def test_facts_that_can_hold_together_are_no_contradiction(flat) -> None:
    """Different things, or the same thing somewhere and in the room around it, fit together."""
    fine = [["at(mug, kitchen)", "at(mug, sink)"], ["at(mug, sink)", "at(mug, kitchen)"],
            ["robot_at(kitchen)", "robot_at(counter)"], ["holding(mug)", "at(milk, sink)"],
            ["open(fridge)", "closed(cupboard)"], ["on(fridge)", "off(tv_stand)", "closed(fridge)"],
            ["holding(mug)", "robot_at(sofa)", "done(give, mug)"]]
    for facts in fine:
        assert [str(f) for f in parse_goal(facts, flat).facts] == facts


def test_consistent_keeps_the_first_of_two_facts_that_contradict(flat) -> None:
    kept, dropped = consistent(["at(mug, sink)", "holding(mug)", "off(tv_stand)", "on(tv_stand)", "said"], flat)
    assert kept == ["at(mug, sink)", "off(tv_stand)", "said"]
    assert dropped == ["holding(mug): contradicts at(mug, sink) (mug cannot be held and lie somewhere at once), "
                       "left out",
                       "on(tv_stand): contradicts off(tv_stand) (tv_stand cannot be on and off at once), left out"]
    assert consistent(["holding(mug)", "robot_at(sink)"], flat) == (["holding(mug)", "robot_at(sink)"], [])
