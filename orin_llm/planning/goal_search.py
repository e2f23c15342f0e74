"""A plan that reaches a goal: the model's candidates checked by the simulator, then a classical
search over the home's steps when none of them reaches it (LLM+P's division of labour), all within
the request's deadline.

The first candidate is the request as asked (greedy by default); the next ones are sampled (other
seeds, temperature SAMPLE_TEMPERATURE when the request was greedy), each checked by simulation
(planning/home/world.py) against the goal (planning/home/goals.py); one starts only when the last one's
time fits before the quarter of the budget kept for the search. When they fail, the search
(planning/home/search.py) runs from the same state for the time that is left (SEARCH_MIN_S at least:
a model candidate cannot be cut short). The answer is the first plan that reaches the goal, or the
first candidate with why none was found (a fact no step can make true is named).

`reach_goal` is a task (runtime/tasks.py): it asks for each later candidate as a request and is
resumed once it is done, so whoever steps the engine runs it next to every other request.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any, Optional

from ..runtime.backend import Request
from ..runtime.sampling import SamplingParams
from ..runtime.tasks import Steps
from .feasibility import plan_lines
from .home.goals import parse_goal as parse_facts
from .home.search import search
from .home.state import HomeState
from .home.steps import check_steps
from .home.world import World, simulate
from .plans import Plan, Prefix

# this module is below planner.py (it calls back into the Planner for more candidates), so it names
# the Planner by what it uses, not by its type
Planner = Any

GOAL_BUDGET_S = 10.0  # a goal's search when the request names no deadline
# plans asked of the model before the classical search: the request's own and one sampled. On a small
# model a failed candidate is the cost of a goal plan (each a full decode) and a third rarely reached
# what two did not; the search then takes milliseconds
MODEL_CANDIDATES = 2
SEARCH_RESERVE = 0.25  # of the budget kept for the classical search: no new model candidate in it
# the search runs even when a model candidate overran the deadline (a model step cannot be cut short
# here): it takes milliseconds on a home, and a plan a little late beats none
SEARCH_MIN_S = 0.5
SAMPLE_TEMPERATURE = 0.7


@dataclass
class PlanRun:
    """A plan request beyond its tokens, held by its task: the engine request it asked for (which
    carries nothing of the planner), and what finish() checks its plan against and searches with."""

    task: str
    observations: Optional[list[str]]
    params: SamplingParams
    speculation: str
    constrained: bool
    home: Optional[str]
    feasibility: str
    state: Optional[HomeState]  # the state the plan starts in
    world: Optional[World]  # the same, simulated (None: "off" or a plain-text home)
    goal: Optional[Any] = None  # planning/home/goals.py Goal
    deadline: float = 0.0  # perf_counter() by which a goal search ends
    started: float = 0.0  # perf_counter() when the request began
    inferred: Optional[Any] = None  # goal_infer.InferredGoal when the goal was read from the task text
    request: Optional[Request] = None  # the engine request of this candidate (built, not yet submitted)
    conversation: Optional[Any] = None  # plans.Conversation this request is the next turn of (finish records it)

    @property
    def goal_s(self) -> float:
        """How long reading the goal in the task text took, before the plan's request began (0: none read)."""
        return self.inferred.ms / 1e3 if self.inferred is not None else 0.0


def parse_goal(facts: list[str], env):
    """The goal's facts against the home (OrinError naming a fact the home cannot have)."""
    return parse_facts(list(facts), env)


def check_plan(plan: Plan, run: PlanRun, prefix: Prefix) -> World:
    """Simulate `plan` from the run's state: its violations, final state, and the goal's facts."""
    world, violations = simulate(prefix.environment, plan.steps, run.state)
    plan.violations = violations
    plan.final_state = world.state
    # an unconstrained plan is simulated but was never narrowed: at most "report"
    plan.feasibility = run.feasibility if plan.constrained else "report"
    if run.inferred is not None:
        plan.goal_inferred = list(run.inferred.facts)
        plan.goal_dropped = list(run.inferred.dropped)
        plan.goal_doubts = list(run.inferred.doubts)
    if run.goal is not None:
        plan.goal, plan.goal_source = [str(f) for f in run.goal.facts], "inferred" if run.inferred else "given"
        plan.goal_reached = run.goal.reached(world)
        plan.goal_missing = list(run.goal.missing(world)) if not plan.goal_reached else []
    return world


def reach_goal(planner: Planner, first: Plan, run: PlanRun, prefix: Prefix) -> Steps[Plan]:
    """`first` if it reaches the goal; else the next model candidate or the search's plan that does;
    else `first`, its search saying why none was found. A task: each candidate is a request it yields."""
    tried = 1
    # a plan that breaks a precondition ("report") does not count, even when its final state has the facts
    if first.goal_reached and not first.violations:
        first.search = {"candidates": tried, "source": "model", "reason": "the model's plan reaches the goal"}
        return first
    reserve = SEARCH_RESERVE * (run.deadline - run.started)
    took = time.perf_counter() - run.started  # what a candidate costs: the last one's time
    while tried < MODEL_CANDIDATES and time.perf_counter() + took < run.deadline - reserve:
        began = time.perf_counter()
        if planner.home(run.home).prefix is not prefix:
            break  # the home changed meanwhile: its new version is another request's
        params = run.params
        params = replace(params, temperature=params.temperature or SAMPLE_TEMPERATURE,
                         seed=(params.seed or 0) + tried)
        later = yield from planner.start_task(run.task, params, run.observations, run.speculation, run.constrained,
                                              home=run.home, feasibility=run.feasibility,
                                              goal=[str(f) for f in run.goal.facts], state=run.state)
        later = replace(later, goal=run.goal, inferred=run.inferred)  # the same goal, not re-read
        yield later.request
        cand = planner.finish_one(later, prefix)
        tried += 1
        took = time.perf_counter() - began
        if cand.goal_reached and not cand.violations:
            cand.search = {"candidates": tried, "source": "model",
                           "reason": f"model candidate {tried} (sampled) reaches the goal"}
            return cand
    left = run.deadline - time.perf_counter()
    late = "" if left >= SEARCH_MIN_S else (f" (the deadline passed during {tried} model candidate(s): the search "
                                            f"had its minimum {SEARCH_MIN_S:g} s)")
    env = prefix.environment
    found = search(env, World.start(env, run.state), run.goal, max(left, SEARCH_MIN_S))
    if found.steps is not None:
        text = plan_lines(found.steps, env)
        steps, rejected = check_steps(text, env)
        # a whole plan, whatever cut the model's candidate: it did not end at max_tokens
        plan = replace(first, text=text, steps=steps, rejected=rejected,
                       result=replace(first.result, finish_reason="stop"))
        check_plan(plan, run, prefix)
        plan.search = {"candidates": tried, "source": "search", "expanded": found.expanded,
                       "reason": f"no model candidate of {tried} reached the goal; the search found "
                                 f"{len(steps)} step(s)" + (f" ({found.reason})" if found.reason else "") + late}
        return plan
    reason, expanded, unreachable = found.reason + late, found.expanded, list(found.unreachable)
    first.search = {"candidates": tried, "source": "none", "reason": reason, "expanded": expanded,
                    "unreachable": unreachable}
    return first
