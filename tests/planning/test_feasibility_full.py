"""Plans that respect the home's state with the real embedded engine, on held-out homes (issue #32):
every greedy "enforce" plan can be carried out step by step where the grammar alone ("report")
writes steps that cannot; with the goal of each item's reference plan, the planner returns a plan
that reaches it. What the state's narrowing costs is measured by the plan_quality benchmark, not here
(docs/BENCHMARKS.md: its share of a decode step and of the decode time)."""

import pytest

from orin_llm.planning.calibration_data import load_home, load_split
from orin_llm.planning.home.calls import Step, parse_call
from orin_llm.planning.home.goals import goal_of_plan
from orin_llm.planning.home.world import simulate
from orin_llm.planning.planner import Planner
from orin_llm.runtime.sampling import SamplingParams

pytestmark = pytest.mark.full  # the real model: tens of plans on 2 cores

HELD_OUT = load_split("heldout")[2::5][:10]  # a different slice from test_constrained's
GREEDY = SamplingParams(max_tokens=64)


@pytest.fixture(scope="module")
def planners(engine):
    made: dict = {}

    def get(home: str) -> Planner:
        if home not in made:
            made[home] = Planner(engine, load_home(home))
        return made[home]
    yield get
    for p in made.values():
        engine.unpin(p.pin)


def test_enforced_greedy_plans_can_be_carried_out(planners):
    reported = 0
    for it in HELD_OUT:
        planner = planners(it.home)
        env = planner.prefix.environment
        # goal "none": the model's own plan, the state narrowing each step (the plain request reads a goal)
        plan = planner.plan(it.task, GREEDY, speculation="none", goal="none")
        _, violations = simulate(env, plan.steps, env.state)
        assert plan.steps and violations == [] and plan.violations == [], (it.id, plan.text, violations)
        assert not plan.rejected, (it.id, plan.rejected)
        assert plan.result.timings.feasibility_s > 0  # the state narrowed this plan's grammar
        report = planner.plan(it.task, GREEDY, speculation="none", feasibility="report", goal="none")
        reported += len(report.violations)
    assert reported > 0  # the grammar alone lets the same model write steps the robot cannot run


def test_the_goal_of_a_reference_plan_is_reached(planners):
    for it in HELD_OUT[:4]:
        planner = planners(it.home)
        env = planner.prefix.environment
        steps = [Step(*parse_call(line)) for line in it.reference_plan]
        goal = goal_of_plan(env, steps, env.state)
        if not goal:
            continue
        plan = planner.plan(it.task, GREEDY, speculation="none", goal=goal, deadline_s=60)
        assert plan.goal_reached is True and plan.goal_missing == [], (it.id, goal, plan.text, plan.search)
        _, violations = simulate(env, plan.steps, env.state)
        assert violations == [], (it.id, plan.text)
        assert plan.search["source"] in ("model", "search")


def test_a_goal_read_from_a_simple_tasks_text_is_the_reference_goal_and_is_reached(planners):
    """From the task text alone (goal "infer"): on simple calibration tasks (not held-out), the
    model's goal is the one the reference plan makes true, and the plan reaches it."""
    calib = {it.id: it for it in load_split("calib")}
    for item_id in ("row_house-013", "loft-013"):  # a switch, and an object carried to a place
        it = calib[item_id]
        planner = planners(it.home)
        env = planner.prefix.environment
        steps = [Step(*parse_call(s)) for s in it.reference_plan]
        want = goal_of_plan(env, steps, env.state)
        plan = planner.plan(it.task, GREEDY, speculation="none", goal="infer", deadline_s=60)
        assert sorted(plan.goal_inferred or []) == sorted(want), (it.id, plan.goal_inferred, want)
        assert plan.goal_reached is True and plan.goal_missing == [], (it.id, plan.text, plan.search)
        _, violations = simulate(env, plan.steps, env.state)
        assert violations == [], (it.id, plan.text, violations)
