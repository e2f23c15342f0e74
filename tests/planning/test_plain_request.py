"""The plain request is the best one (issue #43): a plan that names no goal has the model read one in
its task and plans to it; `goal: "none"` keeps the model's plan as it decodes it; a goal that holds
already is answered with an empty plan that says so; a plan with a goal ends once the goal holds. On the
tiny random-weight engine: what is checked is the path each request takes, not the quality of its goal."""

from __future__ import annotations

import json

import pytest

from orin_llm.errors import OrinError
from orin_llm.planning import planner as planner_module
from orin_llm.planning.feasibility import StepSets, narrowed
from orin_llm.planning.home import EXAMPLE_HOME_PATH, World, load_environment
from orin_llm.planning.home.goals import parse_goal
from orin_llm.planning.home.grammar import plan_grammar
from orin_llm.planning.planner import Planner
from orin_llm.runtime.constraint import Grammar
from orin_llm.runtime.sampling import SamplingParams
from tests.conftest import tiny_fixture
from tests.server.inproc import serve

tiny_engine = tiny_fixture("engine")  # random weights do here (tests/conftest.py)
TASK = "Bring the milk from the fridge to the coffee table."
SHORT = SamplingParams(max_tokens=24)


@pytest.fixture(scope="module")
def planner(engine):
    p = Planner(engine, load_environment(EXAMPLE_HOME_PATH))
    yield p
    engine.unpin(p.pin)


@pytest.fixture
def reads(monkeypatch) -> list[str]:
    """The tasks whose goal the planner asked the model to read."""
    seen: list[str] = []
    real = planner_module.infer_goal_task

    def spy(engine, home, task, *a, **kw):
        seen.append(task)
        return (yield from real(engine, home, task, *a, **kw))
    monkeypatch.setattr(planner_module, "infer_goal_task", spy)
    return seen


def test_a_request_without_a_goal_reads_one_and_says_what_it_aimed_for(planner, reads):
    plan = planner.plan(TASK, SHORT, speculation="none", deadline_s=60)
    assert reads == [TASK]
    assert plan.goal_inferred and plan.goal_reached is not None and plan.search is not None
    same = planner.plan(TASK, SHORT, speculation="none", goal="infer", deadline_s=60)
    assert (same.goal_inferred, same.text) == (plan.goal_inferred, plan.text)  # the same path as asking for it


@pytest.mark.parametrize("options", [{"goal": "none"}, {"feasibility": "off"}, {"constrained": False}])
def test_no_goal_is_read_where_none_is_asked_for_or_none_can_be_checked(planner, reads, options):
    plan = planner.plan(TASK, SHORT, speculation="none", **options)
    assert reads == [] and plan.goal_inferred is None and plan.goal_reached is None and plan.search is None


def test_a_goal_the_model_cannot_write_leaves_the_plain_request_without_one(planner, monkeypatch):
    def cannot(engine, home, task, *a, **kw):
        raise OrinError("no goal could be inferred")
        yield  # a task (a generator), as the real one is
    monkeypatch.setattr(planner_module, "infer_goal_task", cannot)
    plan = planner.plan(TASK, SHORT, speculation="none")
    assert plan.goal_inferred is None and plan.goal_reached is None and plan.steps
    with pytest.raises(OrinError, match="no goal could be inferred"):  # asked for: the caller hears why
        planner.plan(TASK, SHORT, speculation="none", goal="infer")


def test_a_goal_that_holds_already_is_an_empty_plan_and_nothing_is_decoded(planner, monkeypatch):
    start = planner.current_state()
    asked: list = []
    real = planner.engine.generate
    monkeypatch.setattr(planner.engine, "generate", lambda *a, **kw: asked.append(a) or real(*a, **kw))
    plan = planner.plan(TASK, SHORT, goal=[f"robot_at({start.robot_at})"])
    assert asked == [] and plan.text == "" and plan.steps == []
    assert plan.goal_reached is True and plan.goal_missing == [] and plan.search["source"] == "start"
    assert "holds in the state the plan starts in" in plan.search["reason"]
    assert plan.final_state == World.start(planner.prefix.environment, start).state


def test_a_plan_ends_once_its_goal_holds(engine):
    """The narrowed constraint with a goal: after the step that reaches it, only the end is left."""
    env = load_environment(EXAMPLE_HOME_PATH)
    vocab = engine.vocabulary()
    goal = parse_goal(["robot_at(fridge)"], env)
    c = narrowed(Grammar.lark(vocab, plan_grammar(env)).constraint(), StepSets(env), World.start(env), vocab, goal)
    free = narrowed(Grammar.lark(vocab, plan_grammar(env)).constraint(), StepSets(env), World.start(env), vocab)
    for tok in engine.encode("go_to(fridge)\n"):
        c.accept(tok)
        free.accept(tok)
    allowed = set(c.allowed().nonzero().flatten().tolist())
    assert allowed and allowed <= set(vocab.special_ids())
    assert set(free.allowed().nonzero().flatten().tolist()) - set(vocab.special_ids())  # without one it goes on


def sse(response) -> list[dict]:
    return [json.loads(line[5:]) for line in response.text.splitlines()
            if line.startswith("data:") and line[5:].strip() != "[DONE]"]


def test_the_daemon_answers_a_goal_that_holds_with_an_empty_plan_streamed_or_not(tiny_engine):
    goal = ["robot_at(hallway)"]  # the example home's robot starts there
    plain, streamed, read = serve(tiny_engine, [
        {"task": "Stay where you are.", "goal": goal},
        {"task": "Stay where you are.", "goal": goal, "stream": True},
        {"task": TASK, "max_tokens": 8, "speculation": "none"}])
    assert plain.status_code == streamed.status_code == read.status_code == 200
    body = plain.json()
    assert body["plan"] == "" and body["steps"] == [] and body["goal_reached"] is True
    assert body["search"]["source"] == "start" and body["timings"]["completion_tokens"] == 0
    events = sse(streamed)
    assert streamed.headers["content-type"].startswith("text/event-stream")
    assert events[-1]["search"]["source"] == "start" and not any("delta" in e for e in events)
    assert read.json()["goal_inferred"], read.json()  # no goal given: one was read in the task


def test_a_streamed_goal_plan_sends_the_plan_chosen_not_a_candidate_dropped(tiny_engine):
    """4 tokens write no whole step: the request's own candidate misses the goal and the search's plan is the
    answer. The stream's text is that plan's (its deltas joined), its steps come after the text, and they are
    the answer's steps: nothing of the dropped candidate reaches the client."""
    (streamed,) = serve(tiny_engine, [{"task": TASK, "goal": ["at(milk, coffee_table)"], "max_tokens": 4,
                                       "speculation": "none", "stream": True}])
    assert streamed.status_code == 200
    events = sse(streamed)
    answer = events[-1]
    assert answer["search"]["source"] == "search" and answer["goal_reached"] is True, answer["search"]
    kinds = ["delta" if "delta" in e else "step" if "step" in e else "answer" for e in events]
    assert "".join(e["delta"] for e in events if "delta" in e) == answer["plan"] != ""
    assert kinds == ["delta"] + ["step"] * len(answer["steps"]) + ["answer"], kinds
    assert [{"action": e["step"]["action"], "args": e["step"]["args"]} for e in events if "step" in e] \
        == answer["steps"]


def test_a_pronoun_that_names_nothing_makes_the_answer_say_its_goal_is_in_doubt(planner):
    """"Turn it off." names no thing: whatever goal is read, the answer says it may be another's (the plan
    still aims at it); a pronoun after the thing it stands for raises no doubt."""
    from orin_llm.planning.home.goal_words import unresolved_pronouns

    env = planner.prefix.environment
    assert unresolved_pronouns(env, "Turn it off.") == ["it"]
    assert unresolved_pronouns(env, "Bring them here, please.") == ["them"]
    assert unresolved_pronouns(env, "Take the mug and put it on the sofa.") == []
    assert unresolved_pronouns(env, "I left my glasses in the bedroom; bring them to the sofa.") == []
    doubtful = planner.plan("Turn it off.", SHORT, speculation="none", deadline_s=60)
    assert doubtful.goal_source == "inferred" and len(doubtful.goal_doubts) == 1
    assert "'it'" in doubtful.goal_doubts[0] and "name it" in doubtful.goal_doubts[0]
    sure = planner.plan("Take the mug and put it on the sofa.", SHORT, speculation="none", deadline_s=60)
    assert sure.goal_source == "inferred" and sure.goal_doubts == []
