"""Plans that respect the home's state (issue #32), on the tiny random-weight engine: its weights
propose nonsense, so every feasible plan it writes is the mask's doing. "enforce" plans simulate
without a violation where "report" lists them; speculation stays lossless under the narrowed
constraint; max_tokens ends a plan at a step boundary; a goal is reached by the model's candidates
or the search, and a fact no step can make true is named."""

import random
import time

import pytest

from orin_llm.errors import OrinError
from orin_llm.planning import planner as planner_module
from orin_llm.planning.feasibility import StepSets, narrowed
from orin_llm.planning.goal_infer import InferredGoal
from orin_llm.planning.home import EXAMPLE_HOME_PATH, environment_from_dict, load_environment
from orin_llm.planning.home.calls import parse_call
from orin_llm.planning.home.grammar import plan_grammar
from orin_llm.planning.home.state import HomeState
from orin_llm.planning.home.world import World, simulate
from orin_llm.planning.planner import Planner
from orin_llm.runtime.constraint import Grammar
from orin_llm.runtime.sampling import SamplingParams
from tests.conftest import tiny_fixture

tiny_engine = tiny_fixture("engine")  # random weights do here (tests/conftest.py)

STATE = {"robot_at": "hallway", "holding": None, "object_at": {"milk": "fridge", "mug": "counter"},
         "open": {"fridge": False}, "on": {"tv": False}}
TASKS = ["Bring the milk to the coffee table.", "Turn on the tv."]
GREEDY = SamplingParams(max_tokens=32)


def home(**changes):
    d = load_environment(EXAMPLE_HOME_PATH).model_dump(mode="json", exclude_none=True)
    d["state"] = STATE
    # examples run in the home's state: the one that switches off the tv cannot here, where it is off
    d["examples"] = [ex for ex in d["examples"] if "switch_off(tv)" not in ex["plan"]]
    d.update(changes)
    return environment_from_dict(d)


@pytest.fixture(scope="module")
def planner(engine):
    p = Planner(engine, home())
    yield p
    engine.unpin(p.pin)


@pytest.fixture(scope="module")
def greedy(planner):
    """The greedy enforce plan of each task, plainly decoded (goal "none": the model's plan as it decodes it)."""
    return {task: planner.plan(task, GREEDY, speculation="none", goal="none") for task in TASKS}


def test_enforced_plans_are_feasible_where_report_lists_violations(planner, greedy):
    env = planner.prefix.environment
    reported = 0
    for i, task in enumerate(TASKS):
        sampled = SamplingParams(max_tokens=32, temperature=1.0, seed=i)
        for plan in (greedy[task], planner.plan(task, sampled, speculation="none", goal="none")):
            assert plan.feasibility == "enforce" and plan.steps, plan.text
            _, violations = simulate(env, plan.steps, env.state)
            assert violations == [] and plan.violations == [], (task, plan.text, violations)
            assert plan.final_state is not None
            assert not plan.rejected, plan.rejected
        report = planner.plan(task, GREEDY, speculation="none", feasibility="report", goal="none")
        _, violations = simulate(env, report.steps, env.state)
        assert report.violations == violations  # report lists exactly what the simulator finds
        reported += len(violations)
        off = planner.plan(task, GREEDY, speculation="none", feasibility="off")
        assert off.violations == [] and off.final_state is None and off.text == report.text
    assert reported > 0  # the same weights under the grammar alone write steps that cannot run


# the draft model drafts a forward per token: slow on 2 cores, so in the full tier (test_constrained
# compares every drafter under the narrowed constraint with the real model there too)
@pytest.mark.parametrize("mode", ["lookup", pytest.param("draft_model", marks=pytest.mark.full)])
def test_speculation_is_lossless_under_the_narrowed_constraint(planner, greedy, mode):
    drafted = 0
    for task in TASKS:
        plain = greedy[task].result
        spec = planner.plan(task, GREEDY, speculation=mode, goal="none").result
        assert spec.token_ids == plain.token_ids, (mode, task)
        drafted += spec.speculation.drafted
    assert drafted > 0


def test_drafts_and_verify_masks_follow_the_simulated_state(planner):
    """Without a model: masks(draft) row i is the mask after the first i drafts, valid_prefix cuts a
    draft at its first infeasible token, and rollback restores the world."""
    engine, env = planner.engine, planner.prefix.environment
    vocab = engine.vocabulary()
    grammar = Grammar.lark(vocab, plan_grammar(env))
    sets = StepSets(env)
    start = World.start(env, env.state)
    # the hand is empty: a place step cannot begin, though the grammar allows it
    c = narrowed(grammar.constraint(), sets, start, vocab)
    draft = engine.encode("place(mug, counter)\n")
    assert grammar.constraint().valid_prefix(draft) == len(draft)
    assert c.valid_prefix(draft) < len(draft)
    ok = engine.encode("go_to(fridge)\nopen(fridge)\npick(milk)\n")
    wrong = engine.encode("go_to(kitchen)\nopen(fridge)\n")  # in the kitchen, not at the fridge
    assert len(engine.encode("go_to(kitchen)\n")) <= c.valid_prefix(wrong) < len(wrong)
    assert c.valid_prefix(ok) == len(ok)
    rng = random.Random(0)
    for _ in range(8):  # random feasible walks: each draft's masks against one token at a time
        c = narrowed(grammar.constraint(), sets, start, vocab)
        for _ in range(6):
            walk = []
            for _ in range(rng.randint(1, 4)):
                allowed = c.allowed().nonzero().flatten().tolist()
                tok = rng.choice(allowed)
                if tok in vocab.special_ids():
                    break
                walk.append(tok)
                c.accept(tok)
            c.rollback(len(walk))
            world, partial = c.world, c.partial
            masks = c.masks(walk)
            assert (c.world, c.partial) == (world, partial)
            for i, tok in enumerate(walk):
                assert bool(masks[i, tok])
                c.accept(tok)
            assert (masks[len(walk)] == c.allowed()).all()
            if c.finished:
                break


def test_max_tokens_ends_a_plan_at_a_step_boundary(planner):
    cut = 0
    for n in (5, 9, 13):
        plan = planner.plan(TASKS[0], SamplingParams(max_tokens=n), speculation="none", goal="none")
        lines = plan.text.splitlines()
        assert all(parse_call(line) is not None for line in lines), (n, plan.text)
        assert len(plan.steps) == len(lines) and not plan.rejected
        text = planner.engine.tokenizer.decode(plan.result.token_ids, skip_special_tokens=True)
        assert plan.text.startswith(text.strip()) or text.strip() == ""
        cut += plan.result.finish_reason == "length"
    assert cut > 0


def test_a_goal_is_reached_and_an_unreachable_fact_is_named(planner, engine):
    env = planner.prefix.environment
    short = SamplingParams(max_tokens=16)
    plan = planner.plan(TASKS[0], short, speculation="none", goal=["at(milk, coffee_table)"], deadline_s=60)
    assert plan.goal_reached is True and plan.goal_missing == []
    assert plan.search["source"] in ("model", "search")
    if plan.search["source"] == "search":  # 16 tokens cut the model's candidates; the search's plan is whole
        assert plan.result.finish_reason == "stop"
    world, violations = simulate(env, plan.steps, env.state)
    assert violations == [] and world.location("milk") == "coffee_table"
    assert plan.final_state.object_at["milk"] == "coffee_table"
    # a home whose robot cannot put things down: no step makes at(mug, sink) true
    no_place = home(actions=[a.model_dump(exclude_none=True) for a in env.actions if a.name != "place"],
                    examples=[])
    other = Planner(engine, no_place)
    try:
        miss = other.plan(TASKS[0], short, speculation="none", goal=["at(mug, sink)"], deadline_s=60)
        assert miss.goal_reached is False and miss.goal_missing == ["at(mug, sink)"]
        assert miss.search["source"] == "none" and miss.search["unreachable"] == ["at(mug, sink)"]
        assert "at(mug, sink)" in miss.search["reason"]
    finally:
        engine.unpin(other.pin)
    with pytest.raises(OrinError, match="sofa"):
        planner.plan(TASKS[0], GREEDY, goal=["at(sofa, kitchen)"])
    with pytest.raises(OrinError, match="off"):
        planner.plan(TASKS[0], GREEDY, goal=["at(mug, sink)"], feasibility="off")
    with pytest.raises(OrinError, match="feasibility"):
        planner.plan(TASKS[0], GREEDY, feasibility="strict")


def test_reading_the_goal_is_not_counted_as_waiting_for_the_engine(planner, monkeypatch):
    """goal "infer" has the model read the goal first, a request of its own (faked here, slow as the real
    engine's can be: an idle daemon said `queued 3409 ms`): the plan's queue_s stays the wait for the
    engine, and PlanRun.goal_s (the daemon's goal_reading_ms) is how long the reading took."""
    def slow_reading(engine, home, task):  # a task (runtime/tasks.py) that asks the engine for nothing
        t0 = time.perf_counter()
        time.sleep(1.0)
        return InferredGoal(["on(tv)"], "on(tv)\n", ["tv"], (time.perf_counter() - t0) * 1e3, 3)
        yield

    monkeypatch.setattr(planner_module, "infer_goal_task", slow_reading)
    run = planner.start(TASKS[1], GREEDY, speculation="none", goal="infer", deadline_s=60)
    plan = planner.finish(run, planner.prefix)
    assert plan.goal_inferred == ["on(tv)"] and plan.goal_reached is True
    assert run.goal_s >= 1.0
    assert 0 <= run.request.timings.queue_s < 0.5  # an idle engine: rendering and tokenizing the prompt only


def test_a_state_change_computes_only_the_state_part(planner, engine):
    prefix, bs = planner.prefix, engine.cache.block_size
    change = planner.set_state({"robot_at": "kitchen", "holding": "mug"}, run=True)
    state, version = change
    assert state.robot_at == "kitchen" and state.holding == "mug" and version == prefix.version
    part = planner.home().part
    assert part is not None and "the robot holds mug" in engine.tokenizer.decode(list(part.ids))
    # the static prefix comes from the cache (whole blocks); only the state's tokens and the prefix's
    # last, partly filled block are computed, where a re-pin computes everything
    cached = change.generation.timings.cached_prompt_tokens
    assert change.computed_tokens + cached == len(prefix.ids) + len(part.ids)
    assert cached >= len(prefix.ids) // bs * bs  # every whole block of the static prefix
    assert change.computed_tokens <= len(part.ids) + len(prefix.ids) % bs < len(prefix.ids) // 4
    plan = planner.plan(TASKS[1], GREEDY, speculation="none")
    t = plan.result.timings
    assert t.cached_prompt_tokens >= len(prefix.ids) + len(part.ids) - bs
    assert _holds_mug_first(plan)
    with pytest.raises(OrinError, match="sofa"):
        planner.set_state({"holding": "sofa"})
    assert planner.current_state().holding == "mug"  # a refused update changes nothing
    planner.set_state(HomeState.model_validate(STATE), run=True)


def test_a_plan_request_carries_nothing_of_the_planner(planner):
    """The engine's request holds ids, sampling, constraint and its outputs; the plan's world, goal and
    conversation stay with its task (PlanRun), which finish() reads."""
    run = planner.start(TASKS[1], GREEDY, speculation="none", goal=["robot_at(kitchen)"],
                        conversation=planner.conversation("robot-9"))
    assert run.world is not None and run.goal is not None and run.conversation is not None
    assert not {"planning", "world", "conversation", "on_done", "goal"} & set(vars(run.request))
    assert planner.finish(run, planner.prefix).goal is not None and run.conversation.turns == 1


def test_a_state_pin_made_before_its_task_was_closed_is_kept(planner, engine):
    """The worker closes a task whose client went; a state's pin already made is still the home's."""
    from orin_llm.runtime.tasks import Task

    change = planner.set_state({"robot_at": "kitchen"})
    request = change.task.advance()
    engine.submit(request)
    while not request.done:
        engine.step()
    change.task.close()  # as the worker does when the job is cancelled before the task is resumed
    h = planner.home()
    assert request.pin is not None and h.state_pin is request.pin
    before = engine.cache.stats()["pinned"]
    change = planner.set_state(HomeState.model_validate(STATE))  # and one closed before it ran pins nothing
    assert isinstance(change.task, Task) and change.task.advance() is change.generation
    change.task.close()
    assert h.state_pin is not None and engine.cache.stats()["pinned"] == before
    planner.set_state(HomeState.model_validate(STATE), run=True)


def _holds_mug_first(plan) -> bool:
    """With the mug in hand, no plan may pick anything before it puts the mug down."""
    for step in plan.steps:
        if step.action == "place":
            return True
        if step.action == "pick":
            return False
    return True


def test_timings_record_the_mask_cost(greedy):
    t = greedy[TASKS[0]].result.timings
    d = t.as_dict()
    assert t.masks > 0 and 0 < t.feasibility_s <= t.mask_s
    assert d["feasibility_ms"] > 0 and d["masks"] == t.masks


def test_every_turn_of_a_conversation_carries_the_state_it_starts_in(engine):
    """An agent loop: the robot reports where it got to between turns; each turn's user message is
    headed by the state then current (not only the first's), and the earlier turns stay as they were,
    so the next turn's ids still continue the last turn's (only the new turn is computed)."""
    p = Planner(engine, home())
    try:
        conv = p.conversation("robot-1")
        seen: list[int] = []
        for where in ("hallway", "kitchen", "sofa"):
            p.set_state({"robot_at": where}, run=True)
            run = p.start("Turn on the tv.", SamplingParams(max_tokens=8), None, "none", conversation=conv)
            before = list(conv.ids)
            plan = p.finish(run, p.prefix)
            turn = conv.messages[-2]
            assert turn["role"] == "user" and turn["content"].startswith("State:"), turn
            assert f"- the robot is at {where}\n" in turn["content"] and "Task: Turn on the tv." in turn["content"]
            assert before[:len(seen)] == seen  # token identity with the last turn
            seen = before + plan.result.token_ids
        users = [m["content"] for m in conv.messages if m["role"] == "user" and "State:" in m["content"]]
        assert ["- the robot is at hallway" in users[-3], "- the robot is at sofa" in users[-1]] == [True, True]
    finally:
        engine.unpin(p.pin)
        if p.homes[None].state_pin is not None:
            engine.unpin(p.homes[None].state_pin)
