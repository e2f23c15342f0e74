"""The classical search: plans that reach reachable goals (checked by simulation), the facts no step
can make true named, a state from which nothing reaches the goal, and the deadline kept."""

from __future__ import annotations

import time

import pytest

from orin_llm.planning.calibration_data import load_home, load_split
from orin_llm.planning.home import HomeState, Step, World, environment_from_dict, simulate
from orin_llm.planning.home.goals import goal_of_plan, parse_goal
from orin_llm.planning.home.search import SearchResult, search
from orin_llm.planning.home.steps import check_steps

from .homes import flat_dict


@pytest.fixture
def flat():
    return environment_from_dict(flat_dict())


def _runs_to(env, world: World, result: SearchResult, goal) -> None:
    assert result.steps is not None, result.reason
    steps = [Step(a, list(args)) for a, args in result.steps]
    end, violations = simulate(env, steps, world.state)
    assert violations == [] and goal.reached(end)


def test_a_reachable_goal_is_reached(flat) -> None:
    world = World.start(flat, HomeState(robot_at="sofa", holding="book", object_at={"milk": "fridge"},
                                        open={"fridge": False}, on={"tv_stand": False}))
    goal = parse_goal(["at(milk, sofa)", "closed(fridge)", "on(tv_stand)", "done(wipe, sink)", "said"], flat)
    result = search(flat, world, goal, deadline_s=10)
    _runs_to(flat, world, result, goal)
    assert result.reason == f"found a plan of {len(result.steps)} steps" and result.expanded > 0
    assert result.as_dict()["steps"][0] == [result.steps[0][0], list(result.steps[0][1])]


def test_a_goal_that_already_holds_needs_no_steps(flat) -> None:
    world = World.start(flat, HomeState(robot_at="sofa"))
    assert search(flat, world, parse_goal(["robot_at(lounge)"], flat), 1).steps == []


@pytest.mark.parametrize("fact, why", [
    ("on(sofa)", "sofa is not a device: nothing switches it"),
    ("open(sofa)", "sofa does not open and close"),
    ("done(walk_to, sofa)", "walk_to is not an action that done() records"),
])
def test_a_fact_no_step_can_make_true_is_named(flat, fact, why) -> None:
    result = search(flat, World.start(flat), parse_goal(["at(mug, sink)", fact], flat), 10)
    assert result.steps is None and result.unreachable == [fact]
    assert result.reason == f"no step can make these facts true: {fact}: {why}" + (
        " (it is not listed as openable)" if fact.startswith("open") else
        " (kinds other, open, close, switch_on, switch_off)" if fact.startswith("done") else "")


def test_an_object_no_action_moves_is_named() -> None:
    d = flat_dict()
    d["actions"] = [a for a in d["actions"] if a.get("kind") not in ("pick",)]
    env = environment_from_dict(d)
    result = search(env, World.start(env), parse_goal(["at(mug, sofa)", "said"], env), 10)
    assert result.unreachable == ["at(mug, sofa)"] and "no action of kind pick picks up mug" in result.reason


def test_a_goal_no_sequence_reaches_from_this_state_is_said_so() -> None:
    d = flat_dict()
    d["actions"] = [a for a in d["actions"] if a.get("kind") != "navigate"]  # the robot cannot move
    env = environment_from_dict(d)
    world = World.start(env, HomeState(robot_at="sofa"))
    result = search(env, world, parse_goal(["at(mug, sofa)"], env), 30)
    assert result.steps is None and result.unreachable == []
    assert result.reason.startswith("no sequence of steps reaches the goal from this state")


def test_the_deadline_is_kept() -> None:
    env = load_home("villa")
    facts = [f"at({o}, {p})" for o, p in zip(env.names("object")[:8], reversed(env.names("place")), strict=False)]
    goal = parse_goal(facts, env)
    start = time.monotonic()
    # a deadline no search can meet on any machine: the weighted A* finds this 8-object goal within
    # tens of milliseconds on an idle machine, so a small positive deadline made the test a race
    result = search(env, World.start(env), goal, deadline_s=0.0)
    took = time.monotonic() - start
    assert result.steps is None and result.reason.startswith("no plan found within the deadline of 0 s")
    assert took < 0.5  # one expansion past the deadline at most


def test_every_held_out_reference_goal_is_found_no_longer_than_the_reference() -> None:
    homes: dict = {}
    for item in load_split("heldout"):
        env = homes.setdefault(item.home, load_home(item.home))
        steps, _ = check_steps("\n".join(item.reference_plan), env)
        goal = parse_goal(goal_of_plan(env, steps), env)
        world = World.start(env)
        result = search(env, world, goal, deadline_s=10)
        _runs_to(env, world, result, goal)
        assert len(result.steps) <= len(steps), item.id


def test_from_an_unknown_start_the_search_moves_the_robot(flat) -> None:
    """Rule 1 in the search: the robot's start unknown, a goal in two rooms is reached with a navigate
    between them (the simulator refuses the plan that teleports)."""
    world = World.start(flat)
    goal = parse_goal(["at(book, sink)"], flat)
    result = search(flat, world, goal, deadline_s=10)
    _runs_to(flat, world, result, goal)
    kinds = [flat.action(a).effective_kind for a, _ in result.steps]
    assert kinds.index("navigate") < kinds.index("place"), result.steps
