"""Rule 2 of docs/HOMES.md, no loops: a step that brings the world back to a state the plan has already
been in cannot be decoded, and a plan with nothing left that changes the world ends. Step by step on
the constraint (no model), then on the tiny random-weight engine, whose weights propose nonsense: every
plan it writes that neither loops nor runs to max_tokens is the mask's doing."""

import random

import pytest

from orin_llm.planning.feasibility import StateSteps, StepSets, narrowed
from orin_llm.planning.home import World, environment_from_dict, loops
from orin_llm.planning.home.grammar import plan_grammar
from orin_llm.planning.home.steps import check_steps
from orin_llm.planning.planner import Planner
from orin_llm.runtime.constraint import Grammar
from orin_llm.runtime.sampling import SamplingParams
from tests.conftest import tiny_fixture

from .home.homes import flat_dict

tiny_engine = tiny_fixture("engine")  # random weights do here (tests/conftest.py)
START = {"robot_at": "counter", "holding": None, "object_at": {"mug": "counter", "milk": "fridge"},
         "open": {"fridge": False, "cupboard": False}, "on": {"ceiling_light": False, "tv_stand": False}}


@pytest.fixture(scope="module")
def flat():
    return environment_from_dict({**flat_dict(), "state": START})


@pytest.fixture(scope="module")
def vocab(engine):
    return engine.vocabulary()


def writable(engine, flat, vocab, plan: str, state=None) -> int:
    """How many tokens of `plan` the narrowed constraint lets through from the home's state."""
    grammar = Grammar.lark(vocab, plan_grammar(flat))
    c = narrowed(grammar.constraint(), StepSets(flat), World.start(flat, state), vocab)
    return c.valid_prefix(engine.encode(plan))


@pytest.mark.parametrize("plan, looping", [
    ("grab(mug)\nput(mug, counter)", "put(mug, counter)"),  # picked up, put back where it lay
    ("walk_to(sofa)\nwalk_to(counter)", "walk_to(counter)"),  # went and came back, nothing done
    # two places wiped in turn: the second round changes nothing that was not done already
    ("wipe(counter)\nwalk_to(sink)\nwipe(sink)\nwalk_to(counter)\nwipe(counter)", "wipe(counter)"),
    ("walk_to(fridge)\nopen_up(fridge)\nshut(fridge)", "shut(fridge)"),  # opened, closed: as it was
    ("power_on(ceiling_light)\npower_off(ceiling_light)", "power_off(ceiling_light)"),
    ('announce("hello")\nannounce("done")', 'announce("done")'),  # nothing new is said
])
def test_a_step_back_to_a_state_the_plan_was_in_cannot_be_written(engine, flat, vocab, plan, looping):
    head = plan[:plan.rindex(looping)]
    steps, _ = check_steps(plan, flat)
    assert loops(flat, steps) == [len(steps) - 1]  # the simulator sees it too (what plan_quality scores)
    n_head = len(engine.encode(head))
    assert writable(engine, flat, vocab, head) == n_head  # the steps before it run, and go somewhere new
    assert n_head <= writable(engine, flat, vocab, plan) < len(engine.encode(plan))


def test_the_same_steps_in_another_order_are_written(engine, flat, vocab):
    """Not a loop: each step leaves the world in a state it was never in (the mug ends at the sink)."""
    plan = "grab(mug)\nwalk_to(sink)\nput(mug, sink)\nwalk_to(counter)\nwipe(counter)"
    steps, _ = check_steps(plan, flat)
    assert loops(flat, steps) == []
    assert writable(engine, flat, vocab, plan) == len(engine.encode(plan))


def test_a_plan_with_nothing_new_left_can_only_end(engine, vocab):
    """One room, one place, one cup, no way to move: the cup in hand, then put down in the room (not on
    its shelf: that is where it started); picking it up again is being back in hand. Nothing new is
    left, so only the end of the plan can be written, and a remote engine is asked no further step."""
    cell = environment_from_dict({
        "name": "cell", "rooms": [{"name": "cell", "places": ["shelf"], "objects": ["cup"]}],
        "actions": [{"name": "grab", "args": ["object"], "kind": "pick"},
                    {"name": "put", "args": ["object", "place"], "kind": "place"}],
        "state": {"robot_at": "shelf", "holding": None, "object_at": {"cup": "shelf"}}})
    back = "grab(cup)\nput(cup, shelf)\n"
    assert writable(engine, cell, vocab, back) < len(engine.encode(back))
    grammar = Grammar.lark(vocab, plan_grammar(cell))
    sets = StepSets(cell)
    c = narrowed(grammar.constraint(), sets, World.start(cell), vocab)
    for tok in engine.encode("grab(cup)\nput(cup, cell)\n"):
        assert c.allowed()[tok]
        c.accept(tok)
    allowed = set(c.allowed().nonzero().flatten().tolist())
    assert allowed and allowed <= set(vocab.special_ids())
    # one step per request (a remote engine): the same steps, then none left to ask for
    steps = StateSteps(sets, World.start(cell))
    assert steps.advance("grab(cup)")
    assert "put(cup, shelf)" not in steps.grammar(first=False, last=False)
    assert not steps.advance("put(cup, shelf)")
    assert steps.advance("put(cup, cell)")
    assert steps.grammar(first=False, last=False) is None


def test_random_walks_under_the_constraint_never_loop_and_end(engine, flat, vocab):
    """Any token the mask allows, at random: no plan revisits a state, and each ends by itself."""
    grammar = Grammar.lark(vocab, plan_grammar(flat))
    sets = StepSets(flat)
    rng = random.Random(0)
    special = vocab.special_ids()
    ended = 0
    for _ in range(12):
        c = narrowed(grammar.constraint(), sets, World.start(flat), vocab)
        written: list[int] = []
        for _ in range(400):
            allowed = c.allowed().nonzero().flatten().tolist()
            ends = [t for t in allowed if t in special]
            # lean away from the end so that walks go deep; take it one time in eight
            tok = rng.choice(ends) if ends and rng.random() < 0.125 else rng.choice([t for t in allowed
                                                                                   if t not in special] or ends)
            if tok in special:
                ended += 1
                break
            c.accept(tok)
            written.append(tok)
        text = engine.tokenizer.decode(written, skip_special_tokens=True)
        steps, rejected = check_steps(text, flat, truncated=True)
        assert loops(flat, steps) == [], text
        assert not [r for r in rejected if not r.reason.startswith("unfinished")], text
    assert ended == 12


def test_the_planner_s_plans_end_by_themselves_without_loops(engine):
    """The random-weight model under enforce, given far more tokens than a small home has states to visit
    (a robot at two places, a cup in four: twelve), ends every plan itself, none of them looping."""
    room = environment_from_dict({
        "name": "den", "rooms": [{"name": "den", "places": ["shelf", "desk"], "objects": ["cup"]}],
        "actions": [{"name": "go_to", "args": ["place"], "kind": "navigate"},
                    {"name": "grab", "args": ["object"], "kind": "pick"},
                    {"name": "put", "args": ["object", "place"], "kind": "place"}],
        "state": {"robot_at": "shelf", "holding": None, "object_at": {"cup": "shelf"}}})
    planner = Planner(engine, room)
    try:
        for task in ("Put the cup on the desk.", "Tidy up."):
            plan = planner.plan(task, SamplingParams(max_tokens=400), speculation="none", goal="none")
            assert plan.result.finish_reason == "stop" and plan.steps, plan.text
            assert loops(room, plan.steps) == [] and not plan.violations, plan.text
    finally:
        engine.unpin(planner.pin)
