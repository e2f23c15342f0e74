"""Plans that work in the home, through a real daemon on the real engine (issue #32): the
feasibility modes, goals, the home's state over time, streamed steps, and the refusals, each
answered with what to fix while the daemon keeps serving."""

from __future__ import annotations

import copy
import json
import time

import pytest

from orin_llm.client import PlannerError
from orin_llm.planning.home import EXAMPLE_HOME_PATH, Step, load_environment
from orin_llm.planning.home.state import HomeState
from orin_llm.planning.home.world import simulate

pytestmark = pytest.mark.full

HOME = load_environment(EXAMPLE_HOME_PATH)  # robot_at hallway; the milk in the fridge, which is closed
TASK = "Bring the milk from the kitchen to the coffee table."
NEW_FIELDS = ("feasibility", "violations", "final_state", "goal_reached", "goal_missing", "search")


@pytest.fixture(scope="module")
def home_daemon(start_daemon):
    """Its own daemon: these tests change its home's state."""
    return start_daemon()


@pytest.fixture
def planner(home_daemon):
    with home_daemon.client(timeout_s=300) as c:
        yield c


def steps_of(answer: dict) -> list[Step]:
    return [Step(s["action"], s["args"]) for s in answer["steps"]]


def replay(answer: dict, state: dict) -> tuple[dict, list]:
    """The answer's steps simulated here from `state`: (final state, violations)."""
    world, violations = simulate(HOME, steps_of(answer), HomeState.model_validate(state))
    return world.state.model_dump(mode="json"), violations


def test_an_enforced_plan_runs_step_by_step_and_says_where_it_ends(planner):
    start = planner.get_state()
    answer = planner.plan(TASK, max_tokens=64, goal="none")  # the model's own plan, no goal to reach
    assert set(NEW_FIELDS) <= set(answer) and answer["feasibility"] == "enforce"
    assert answer["violations"] == [] and answer["goal_reached"] is None and answer["search"] is None
    final, violations = replay(answer, start)
    assert violations == [] and answer["final_state"] == final


def test_report_lists_each_violation_with_its_step(planner):
    start = planner.get_state()
    answer = planner.plan(TASK, max_tokens=64, feasibility="report")
    assert answer["feasibility"] == "report"
    final, violations = replay(answer, start)
    assert answer["violations"] == [v.as_dict() for v in violations] and answer["final_state"] == final
    off = planner.plan(TASK, max_tokens=16, feasibility="off")
    assert off["feasibility"] == "off" and off["violations"] == [] and off["final_state"] is None


def test_a_goal_is_reached_by_the_model_or_the_search(planner):
    start = planner.get_state()
    answer = planner.plan(TASK, max_tokens=96, goal=["at(milk, coffee_table)"], deadline_ms=120_000)
    assert answer["goal_reached"] is True and answer["goal_missing"] == []
    assert answer["search"]["source"] in ("model", "search") and answer["search"]["candidates"] >= 1
    final, violations = replay(answer, start)
    assert violations == [] and final["object_at"].get("milk") == "coffee_table"


def test_an_inferred_goal_is_said_and_the_plan_checked_against_it(planner):
    start = planner.get_state()
    answer = planner.plan("Switch on the tv.", max_tokens=32, goal="infer", deadline_ms=120_000)
    inferred = answer["goal_inferred"]
    assert inferred and all(isinstance(f, str) for f in inferred), answer
    assert set(answer["goal_missing"]) <= set(inferred) and answer["goal_reached"] is (answer["goal_missing"] == [])
    _, violations = replay(answer, start)
    assert violations == []
    given = planner.plan("Switch on the tv.", max_tokens=16, goal=["said"])
    assert given["goal_inferred"] is None


def test_a_one_off_state_is_this_plans_only(planner):
    before = planner.get_state()
    answer = planner.plan("Switch off the floor lamp.", max_tokens=48, state={"robot_at": "floor_lamp"},
                          goal=["off(floor_lamp)"], deadline_ms=120_000)
    assert answer["goal_reached"] is True
    final, violations = replay(answer, {**before, "robot_at": "floor_lamp"})
    assert violations == [] and answer["final_state"] == final
    assert planner.get_state() == before  # the home's own state did not move


@pytest.mark.parametrize("body, words", [
    ({"goal": ["at(mug, garage)"]}, "garage"),
    ({"goal": ["fly(mug)"]}, "is not a goal predicate"),
    ({"goal": ["said"], "feasibility": "off"}, 'feasibility "off" simulates nothing'),
    ({"state": {"holding": "unicorn"}}, "holding: 'unicorn' is not an object of this home"),
    ({"state": {"holding": ["mug", "milk"]}}, "one object at a time"),
    # goals that can never be reached: refused before any search (which would run to the deadline)
    ({"goal": ["holding(milk)", "at(milk, coffee_table)"]},
     r"holding\(milk\) and at\(milk, coffee_table\) contradict each other \(milk cannot be held"),
    ({"goal": ["on(tv)", "off(tv)"]}, r"on\(tv\) and off\(tv\) contradict each other \(tv cannot be on and off"),
    ({"goal": ["open(fridge)", "closed(fridge)"]}, r"open\(fridge\) and closed\(fridge\) contradict"),
    ({"goal": ["robot_at(sofa)", "robot_at(kitchen)"]}, "the robot cannot be at sofa and at kitchen at once"),
    ({"goal": ["holding(milk)", "holding(mug)"]}, r"holds one object at a time\), so no plan can reach the goal: "
                                                 "keep one of them"),
    ({"goal": ["at(mug, sink)", "at(mug, sofa)"]}, "mug cannot be at sink and at sofa at once"),
])
def test_bad_goals_and_states_get_422_saying_what_to_fix_and_the_daemon_goes_on(planner, body, words):
    began = time.monotonic()
    with pytest.raises(PlannerError, match=words) as e:
        planner.plan(TASK, max_tokens=4, deadline_ms=120_000, **body)
    assert e.value.status == 422
    assert time.monotonic() - began < 30  # checked on arrival, not after a search to the deadline
    assert planner.health()["ready"] and planner.plan(TASK, max_tokens=2)["plan"] is not None


def test_a_state_change_computes_only_the_state_and_plans_start_from_it(planner):
    prefix_tokens = planner.health()["prefix_tokens"]
    change = planner.update_state({"robot_at": "kitchen", "open": {"fridge": True}})
    assert change["state"]["robot_at"] == "kitchen" and change["state"]["open"]["fridge"] is True
    assert 0 < change["computed_tokens"] < prefix_tokens  # the state's part, not the home again
    assert planner.get_state() == change["state"]
    answer = planner.plan(TASK, max_tokens=48)
    t = answer["timings"]
    assert t["cached_prompt_tokens"] > prefix_tokens  # the state's part came from the cache too
    final, violations = replay(answer, change["state"])
    assert violations == [] and answer["final_state"] == final
    with pytest.raises(PlannerError, match="object_at: 'unicorn' is not an object of this home") as e:
        planner.update_state({"object_at": {"unicorn": "sofa"}})
    assert e.value.status == 422 and planner.get_state() == change["state"]  # nothing changed
    planner.update_state({"robot_at": "hallway", "open": {"fridge": False}})


def test_streamed_steps_are_each_feasible_and_the_last_event_has_the_new_fields(planner):
    start = planner.get_state()
    events = list(planner.plan_stream(TASK, max_tokens=64, feasibility="report"))
    final = events[-1]
    streamed = [e["step"] for e in events if "step" in e]
    _, violations = replay({"steps": streamed}, start)
    assert violations == [] and set(NEW_FIELDS) <= set(final)
    first_bad = min((v["index"] for v in final["violations"]), default=len(final["steps"]))
    assert [{"action": s["action"], "args": s["args"]} for s in streamed] == final["steps"][:first_bad]


def test_with_a_goal_the_chosen_plans_steps_come_before_the_answer(planner):
    events = list(planner.plan_stream(TASK, max_tokens=96, goal=["at(milk, coffee_table)"], deadline_ms=120_000))
    kinds = ["delta" if "delta" in e else "step" if "step" in e else "answer" for e in events]
    last_delta = max(i for i, k in enumerate(kinds) if k == "delta")
    assert kinds[-1] == "answer" and "step" not in kinds[:last_delta]  # none while the candidate is decoded
    steps = [{"action": e["step"]["action"], "args": e["step"]["args"]} for e in events if "step" in e]
    assert steps == events[-1]["steps"] and events[-1]["goal_reached"] is True


def test_a_home_that_breaks_the_rules_is_refused_and_nothing_changes(planner):
    version = planner.get_environment()["version"]
    home = HOME.model_dump(mode="json", exclude_none=True)
    for change, words in ((lambda h: h["actions"][0].update(kind="teleport"), "kind 'teleport' is not a kind"),
                          (lambda h: h["state"].update(holding="milk"), "both held and at"),
                          (lambda h: h["state"].update(robot_at="garage"), "robot_at: 'garage'")):
        broken = copy.deepcopy(home)
        change(broken)
        with pytest.raises(PlannerError, match=words) as e:
            planner.put_environment(broken)
        assert e.value.status == 422
    assert planner.get_environment()["version"] == version


def test_chat_tool_calls_of_the_homes_actions_are_checked_against_its_state(planner):
    tools = [{"type": "function", "function": {"name": name, "parameters": {
        "type": "object", "properties": {arg: {"type": "string", "enum": HOME.names(kind)}},
        "required": [arg], "additionalProperties": False}}} for name, arg, kind in (
        ("go_to", "place", "place"), ("pick", "object", "object"), ("open", "place", "place"))]
    body = {"messages": [{"role": "user", "content": "Get the milk from the fridge."}], "tools": tools,
            "tool_choice": "required", "max_tokens": 96}
    start = HomeState.model_validate(planner.get_state())

    def calls_of(answer: dict) -> list[Step]:
        calls = answer["choices"][0]["message"].get("tool_calls", [])
        return [Step(c["function"]["name"], list(json.loads(c["function"]["arguments"]).values())) for c in calls]

    enforced = planner.chat(**body)
    assert simulate(HOME, calls_of(enforced), start)[1] == []  # the calls returned all run, in order
    assert len(enforced["violations"]) <= 1  # the call that ended them, if one did
    reported = planner.chat(**body, feasibility="report")
    assert reported["violations"] == [v.as_dict() for v in simulate(HOME, calls_of(reported), start)[1]]


def test_a_streamed_answers_calls_of_the_homes_actions_come_whole_and_checked(planner):
    tools = [{"type": "function", "function": {"name": name, "parameters": {
        "type": "object", "properties": {arg: {"type": "string", "enum": HOME.names(kind)}},
        "required": [arg], "additionalProperties": False}}} for name, arg, kind in (
        ("go_to", "place", "place"), ("pick", "object", "object"), ("open", "place", "place"))]
    body = {"messages": [{"role": "user", "content": "Get the milk from the fridge."}], "tools": tools,
            "tool_choice": "required", "max_tokens": 96}
    whole = planner.chat(**body)
    chunks = list(planner._stream("/v1/chat/completions", {**body, "stream": True}))
    entries = [e for c in chunks for ch in c["choices"] for e in ch["delta"].get("tool_calls", [])]
    assert all(json.loads(e["function"]["arguments"]) for e in entries)  # each call whole, never a piece
    assert [e["index"] for e in entries] == list(range(len(entries)))
    expected = [(c["function"]["name"], c["function"]["arguments"])
                for c in whole["choices"][0]["message"].get("tool_calls", [])]
    assert [(e["function"]["name"], e["function"]["arguments"]) for e in entries] == expected  # greedy: the same
    finish = [ch["finish_reason"] for c in chunks for ch in c["choices"] if ch["finish_reason"]]
    assert finish == [whole["choices"][0]["finish_reason"]]


@pytest.mark.parametrize("speculation", ["lookup", "draft_model"])
def test_narrowed_calls_are_the_same_with_each_drafter(planner, speculation):
    """Drafts are cut at the first token the narrowed constraint forbids: greedy answers do not move."""
    tools = [{"type": "function", "function": {"name": name, "parameters": {
        "type": "object", "properties": {arg: {"type": "string", "enum": HOME.names(kind)}},
        "required": [arg], "additionalProperties": False}}} for name, arg, kind in (
        ("go_to", "place", "place"), ("pick", "object", "object"), ("open", "place", "place"))]
    body = {"messages": [{"role": "user", "content": "Open the fridge and take the milk."}], "tools": tools,
            "tool_choice": "required", "max_tokens": 96}
    plain = planner.chat(**body, speculation="none")
    drafted = planner.chat(**body, speculation=speculation)
    assert drafted["choices"][0]["message"].get("tool_calls", []) and plain["speculation"]["drafter"] == "none"
    strip = [(c["function"]["name"], c["function"]["arguments"]) for c in plain["choices"][0]["message"]["tool_calls"]]
    assert [(c["function"]["name"], c["function"]["arguments"])
            for c in drafted["choices"][0]["message"]["tool_calls"]] == strip
