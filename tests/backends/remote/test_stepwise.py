"""Plans under the home's state asked of the remote one step per request (backends/remote/stepwise.py),
on the robot's real (tiny) engine against a real HTTP peer on loopback (conftest.py): each request carries
the grammar of the steps feasible in the state after the steps before it, its prompt is the plan's
prompt and those steps, and the grammars themselves admit exactly the feasible lines (llguidance)."""

from __future__ import annotations

import pytest

from orin_llm.backends.remote.settings import RemoteSettings
from orin_llm.planning.feasibility import StepSets
from orin_llm.planning.home import EXAMPLE_HOME_PATH, load_environment
from orin_llm.planning.home.grammar import step_lark
from orin_llm.planning.home.world import World
from orin_llm.runtime.constraint import Grammar

from .test_hedged import run


def grammars(peer, n: int) -> list[str]:
    return [r["body"]["structured_outputs"]["grammar"] for r in peer.requests[-n:]]


def test_each_step_is_asked_with_the_steps_feasible_now(peer, planners):
    peer.texts = ["go_to(fridge)\n", "open(fridge)\n", "pick(milk)"]
    planner = planners(peer.url, plans="stepwise")
    plan, gen, _ = run(planner)
    assert gen.report["served_by"] == "remote" and gen.report["remote"]["requests"] == 3
    assert [str(s) for s in plan.steps] == ["go_to(fridge)", "open(fridge)", "pick(milk)"] and not plan.violations
    first, second, third = grammars(peer, 3)
    # the milk is in the closed fridge: not pickable until the fridge is opened, which needs the robot there
    assert '"pick(keys)"' in first and '"pick(milk)"' not in first and '"open(fridge)"' not in first
    assert '"open(fridge)"' in second and '"pick(milk)"' not in second
    assert '"pick(milk)"' in third and '"open(fridge)"' not in third  # open already
    assert first.startswith('start: step "\\n"?') and second.startswith('start: (step "\\n"?)?')
    encode = planner.engine.encode
    prompts = [r["body"]["prompt"] for r in peer.requests[-3:]]
    assert prompts[0] == gen.prompt_ids
    assert prompts[1] == gen.prompt_ids + encode("go_to(fridge)\n")
    assert prompts[2] == gen.prompt_ids + encode("go_to(fridge)\nopen(fridge)\n")
    # the usage is the three requests' sum (the peer counts its 5-character pieces as tokens)
    assert plan.result.timings.prompt_tokens == sum(len(p) for p in prompts)


def test_the_remote_ends_the_plan_after_a_step(peer, planners):
    peer.texts = ["go_to(kitchen)\n", ""]
    plan, gen, _ = run(planners(peer.url, plans="stepwise"))
    assert gen.report["served_by"] == "remote" and gen.report["remote"]["requests"] == 2
    assert [str(s) for s in plan.steps] == ["go_to(kitchen)"]


def test_a_step_outside_its_grammar_falls_back_without_resting(peer, planners):
    """A peer that ignores the step's grammar (answers a step the state does not allow): refused here."""
    peer.texts = ["pick(milk)\n"]
    planner = planners(peer.url, plans="stepwise", backoff_s=300)
    _, gen, _ = run(planner)
    assert gen.report["served_by"] == "local" and gen.report["fallback_reason"] == "infeasible"
    assert planner.engine.breaker.failures == 0


def test_the_whole_mode_sends_the_home_grammar_once(peer, planners):
    planner = planners(peer.url, plans="whole")
    _, gen, _ = run(planner)
    assert gen.report["served_by"] == "remote" and gen.report["remote"]["requests"] == 1
    assert 'step: "go_to("' in grammars(peer, 1)[0]


@pytest.mark.parametrize("line,first,ok", [
    ("go_to(fridge)\n", True, True), ("go_to(fridge)", True, True), ("pick(milk)\n", True, False),
    ("go_to(the moon)\n", True, False), ('say("hello")\n', True, True), ("", True, False), ("", False, True),
    ("go_to(fridge)\ngo_to(sink)", True, False),
])
def test_a_step_grammar_admits_exactly_one_feasible_step(tiny_engine, line, first, ok):
    env = load_environment(EXAMPLE_HOME_PATH)
    sets = StepSets(env)
    s = sets.of(World.start(env))
    text = step_lark(env, s.lines, s.open_heads, first=first, last=False)
    c = Grammar.lark(tiny_engine.vocabulary(), text).constraint()
    ids = tiny_engine.encode(line) if line else []
    complete = any(c.valid_prefix(ids + [e]) == len(ids) + 1 for e in tiny_engine.eos_ids)
    assert (c.m.validate_tokens(ids) == len(ids) and complete) is ok, text


def test_settings_refuse_an_unknown_mode_or_flavor():
    from orin_llm.errors import OrinError
    with pytest.raises(OrinError, match="--remote-plans"):
        RemoteSettings("http://127.0.0.1:1", plans="each")
    with pytest.raises(OrinError, match="--remote-flavor"):
        RemoteSettings("http://127.0.0.1:1", flavor="tgi")
