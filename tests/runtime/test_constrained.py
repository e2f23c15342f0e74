"""Constrained plans with the real model, on held-out homes the tests have not seen: every line is a
step of the home, speculation stays lossless under the grammar (narrowed by the home's state, the
default "enforce", and the grammar alone, "report"), and jump-forward changes nothing."""

import pytest

from orin_llm.planning.calibration_data import load_home, load_split
from orin_llm.planning.planner import Planner
from orin_llm.runtime.constraint import Constraint
from orin_llm.runtime.sampling import SamplingParams
from tests.conftest import tiny_fixture

tiny_engine = tiny_fixture("engine")  # random weights do here (tests/conftest.py)
# full tier: every generation runs to max_tokens under a grammar mask or a drafter; tens of minutes on 2 cores
pytestmark = pytest.mark.full

HELD_OUT = load_split("heldout")[1::5][:12]  # a different slice from test_speculative's
GREEDY = SamplingParams(max_tokens=48)


@pytest.fixture(scope="module")
def runs(engine):
    """(planner, item) per held-out task; the planners' pins are dropped afterwards."""
    planners = {}
    out = []
    for it in HELD_OUT:
        if it.home not in planners:
            planners[it.home] = Planner(engine, load_home(it.home))
        out.append((planners[it.home], it))
    yield out
    for p in planners.values():
        engine.unpin(p.pin)


def _only_steps(plan) -> bool:
    """Every line is a step; a plan cut by max_tokens ends at its last whole step, never inside one."""
    lines = [ln for ln in plan.text.splitlines() if ln.strip()]
    return not plan.rejected and len(plan.steps) == len(lines) > 0


def test_every_constrained_line_is_a_step_of_the_home(runs):
    unconstrained_rejected = 0
    for planner, it in runs:
        plan = planner.plan(it.task, GREEDY, speculation="none")
        assert plan.constrained and _only_steps(plan), (it.id, plan.text, plan.rejected)
        sampled = planner.plan(it.task, SamplingParams(max_tokens=48, temperature=1.0, seed=3), speculation="none")
        assert _only_steps(sampled), (it.id, sampled.text, sampled.rejected)
        unconstrained_rejected += len(planner.plan(it.task, GREEDY, speculation="none", constrained=False).rejected)
    assert unconstrained_rejected > 0  # the same model, unconstrained, writes lines the home cannot execute


@pytest.mark.parametrize("mode,feasibility", [("lookup", "enforce"), ("lookup", "report"),
                                              ("draft_model", "enforce"), ("combined", "enforce")])
def test_greedy_constrained_output_is_the_same_with_each_drafter(runs, mode, feasibility):
    subset = runs if mode == "lookup" else runs[:4]  # the draft model is slow on a CPU (issue #17)
    drafted = 0
    for planner, it in subset:
        plain = planner.plan(it.task, GREEDY, speculation="none", feasibility=feasibility).result
        spec = planner.plan(it.task, GREEDY, speculation=mode, feasibility=feasibility).result
        assert spec.token_ids == plain.token_ids, (mode, it.id)
        drafted += spec.speculation.drafted
    assert drafted > 0


def test_jump_forward_emits_forced_tokens_and_changes_nothing(runs, monkeypatch):
    planner, it = runs[0]
    fast = planner.plan(it.task, GREEDY, speculation="none").result
    assert 0 < fast.timings.forced_tokens < fast.timings.completion_tokens
    monkeypatch.setattr(Constraint, "forced", lambda self: None)  # never jump forward
    slow = planner.plan(it.task, GREEDY, speculation="none").result
    assert slow.timings.forced_tokens == 0 and slow.token_ids == fast.token_ids
