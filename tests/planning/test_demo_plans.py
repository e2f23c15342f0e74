"""The plans `make demo` and the README's tour show, on the real embedded engine, are ones a person would
accept (issue #43 item 5): each reaches what its task asks, can run in the home from its state, revisits no
state and ends by itself, both as the plain request plans it (the goal read in the task) and as the model
writes it alone (goal "none": what the few-shot turns teach)."""

from __future__ import annotations

import pytest

from orin_llm.planning.home import EXAMPLE_HOME_PATH, load_environment, loops, simulate
from orin_llm.planning.home.goals import parse_goal
from orin_llm.planning.planner import Planner
from orin_llm.runtime.sampling import SamplingParams

pytestmark = pytest.mark.full
# the tasks of `orin-llm demo` (cli.py) and the README's tour, with what a person would check of the plan
TASKS = {
    "Bring the mug from the kitchen to the coffee table.": ["at(mug, coffee_table)"],
    "Switch off the floor lamp and tell me when you are done.": ["off(floor_lamp)", "said"],
    "Bring the glasses from the bedroom to the sofa.": ["at(glasses, sofa)"],
    "Turn off the floor lamp.": ["off(floor_lamp)"],
    "Bring the milk from the kitchen to the coffee table.": ["at(milk, coffee_table)"],
}


@pytest.fixture(scope="module")
def planner(engine):
    p = Planner(engine, load_environment(EXAMPLE_HOME_PATH))
    yield p
    engine.unpin(p.pin)


@pytest.mark.parametrize("goal", [None, "none"], ids=["plain request", "the model alone"])
@pytest.mark.parametrize("task", list(TASKS))
def test_the_demo_plans_are_ones_a_person_would_accept(planner, task, goal):
    env = planner.prefix.environment
    plan = planner.plan(task, SamplingParams(max_tokens=96), goal=goal, deadline_s=120)
    world, violations = simulate(env, plan.steps, env.state)
    assert plan.steps and not plan.rejected and not violations, plan.text
    assert plan.result.finish_reason == "stop", f"cut at max_tokens: {plan.text}"
    assert loops(env, plan.steps, env.state) == [], plan.text
    assert parse_goal(TASKS[task], env).missing(world) == [], plan.text
    if goal is None:  # the plain request says what it aimed for
        assert plan.goal_source == "inferred" and plan.goal_reached
