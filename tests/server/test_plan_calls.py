"""A plan returned as OpenAI tool calls (server/plan_calls.py): calls of the home's actions are
simulated from its state, whole answers and streamed ones alike. No model: the answers' text is
written here in the grammar's format (server/tool_calls.py)."""

from __future__ import annotations

import copy

import pytest

from orin_llm.planning.home import EXAMPLE_HOME_PATH, load_environment
from orin_llm.planning.home.world import World
from orin_llm.server.jobs import PlanCheck, answer_message
from orin_llm.server.plan_calls import CheckedCalls, checked_message, plan_tools
from orin_llm.server.routes.chat import HeldCalls
from orin_llm.server.schemas import ChatRequest
from orin_llm.server.structured import answer_of
from orin_llm.server.tool_calls import CallParser, call_text, parse_answer

HOME = load_environment(EXAMPLE_HOME_PATH)  # robot_at hallway; the milk in the fridge, which is closed


def tool(name: str, *params: str) -> dict:
    props = {p: {"type": "string"} for p in params}
    return {"type": "function", "function": {"name": name, "parameters": {
        "type": "object", "properties": props, "required": list(params), "additionalProperties": False}}}


HOME_TOOLS = [tool("go_to", "place"), tool("pick", "object"), tool("open", "place"), tool("say", "text")]
USER = [{"role": "user", "content": "Get the milk."}]


def answer(tools=HOME_TOOLS, **body):
    return answer_of(ChatRequest.model_validate({"messages": USER, "tools": tools, **body}))


def calls(*steps: tuple[str, str, str]) -> str:
    return "\n".join(call_text(name, f'{{"{param}": "{value}"}}') for name, param, value in steps)


GET_MILK_BADLY = calls(("go_to", "place", "kitchen"), ("pick", "object", "milk"), ("go_to", "place", "sofa"))


def test_only_tools_that_are_the_homes_actions_make_a_plan():
    assert plan_tools(answer(), HOME)
    assert not plan_tools(answer(tools=[*HOME_TOOLS, tool("dock")]), HOME)  # not an action of the home
    assert not plan_tools(answer(tools=[tool("go_to", "place", "speed")]), HOME)  # go_to takes one argument
    assert not plan_tools(answer(tool_choice="none"), HOME)  # no call possible
    other_home = {"type": "function", "function": {"name": "go_to", "parameters": {
        "type": "object", "properties": {"room": {"type": "string", "enum": ["kitchen", "living room"]}}}}}
    assert not plan_tools(answer(tools=[other_home]), HOME)  # "living room" is not a place of this home
    this_home = copy.deepcopy(other_home)
    this_home["function"]["parameters"]["properties"]["room"]["enum"] = ["kitchen", "living_room"]
    assert plan_tools(answer(tools=[this_home]), HOME)


@pytest.mark.parametrize("feasibility, kept, finish", [
    ("enforce", ["go_to"], "tool_calls"),  # the calls end at the first that cannot run
    ("report", ["go_to", "pick", "go_to"], "tool_calls"),  # all of them, and the violation listed
])
def test_whole_answers_keep_the_feasible_calls_and_list_the_violations(feasibility, kept, finish):
    parsed = parse_answer(GET_MILK_BADLY, "calls")
    message, reason = answer_message(parsed, "stop")
    checker = CheckedCalls(World.start(HOME), feasibility)
    out, reason, violations = checked_message(message, reason, parsed.complete_calls, checker)
    assert [c["function"]["name"] for c in out["tool_calls"]] == kept and reason == finish
    (v,) = violations
    assert (v["index"], v["step"], v["kind"]) == (1, "pick(milk)", "precondition") and "fridge" in v["reason"]


def test_an_answer_whose_first_call_cannot_run_has_no_calls_left():
    parsed = parse_answer(calls(("pick", "object", "milk")), "calls")
    message, reason = answer_message(parsed, "stop")
    out, reason, violations = checked_message(message, reason, parsed.complete_calls,
                                              CheckedCalls(World.start(HOME), "enforce"))
    assert "tool_calls" not in out and out["content"] is None and reason == "stop" and len(violations) == 1


def test_a_feasible_plan_passes_whole():
    text = calls(("go_to", "place", "fridge"), ("open", "place", "fridge"), ("pick", "object", "milk"))
    parsed = parse_answer(text, "calls")
    message, reason = answer_message(parsed, "stop")
    out, reason, violations = checked_message(message, reason, parsed.complete_calls,
                                              CheckedCalls(World.start(HOME), "enforce"))
    assert len(out["tool_calls"]) == 3 and reason == "tool_calls" and violations == []


def test_a_stream_sends_each_call_whole_once_checked_and_none_after_a_violation():
    check = PlanCheck("enforce", World.start(HOME))
    held, parser = HeldCalls(check), CallParser("calls")
    sent = []
    for i in range(0, len(GET_MILK_BADLY), 7):  # pieces that cut calls anywhere
        parser.feed(GET_MILK_BADLY[i:i + 7])
        delta = held.complete(parser)
        if delta:
            sent += delta["tool_calls"]
    assert [(e["index"], e["function"]["name"], e["function"]["arguments"]) for e in sent] == [
        (0, "go_to", '{"place": "kitchen"}')]
    assert held.checker is not None and [v.step for v in held.checker.violations] == ["pick(milk)"]


def test_a_check_without_a_world_is_not_active():
    assert not HeldCalls(PlanCheck("enforce")).active and not HeldCalls(None).active
    assert PlanCheck("enforce").checker() is None
