"""Tool calls that are the home's actions, narrowed while decoded (server/call_narrowing.py): the
grammar of the calls and the simulated state together, with the engine's real tokenizer."""

from __future__ import annotations

import pytest

from orin_llm.planning.feasibility import narrowed
from orin_llm.planning.home import EXAMPLE_HOME_PATH, load_environment
from orin_llm.planning.home.world import World
from orin_llm.server.call_narrowing import CallSets
from orin_llm.server.schemas import ChatRequest
from orin_llm.server.structured import GrammarCache, answer_of
from orin_llm.server.tool_calls import call_text

from ..conftest import tiny_fixture

tiny_engine = tiny_fixture("engine")  # the tokenizer is what matters here (tests/conftest.py)

HOME = load_environment(EXAMPLE_HOME_PATH)  # robot_at hallway; the milk in the fridge, which is closed


def tool(name: str, param: str, kind: str) -> dict:
    values = {"type": "string"} if kind == "text" else {"type": "string", "enum": HOME.names(kind)}
    return {"type": "function", "function": {"name": name, "parameters": {
        "type": "object", "properties": {param: values}, "required": [param], "additionalProperties": False}}}


TOOLS = [tool("go_to", "place", "place"), tool("pick", "object", "object"), tool("open", "place", "place"),
         tool("say", "text", "text")]


@pytest.fixture(scope="module")
def calls_grammar(engine):
    answer = answer_of(ChatRequest.model_validate({"messages": [{"role": "user", "content": "Get the milk."}],
                                                   "tools": TOOLS, "tool_choice": "required"}))
    return answer, GrammarCache().for_answer(answer, engine)


def accepted(engine, answer, grammar, text: str, narrow: bool = True) -> bool:
    """Whether the answer's constraint (narrowed by the home's start state) takes `text` whole."""
    c = grammar.constraint()
    if narrow:
        c = narrowed(c, CallSets(HOME, answer), World.start(HOME), engine.vocabulary())
    ids = engine.encode(text)
    if c.valid_prefix(ids) != len(ids):
        return False
    for tok in ids:
        assert c.allowed()[tok]  # each token was allowed where it was written
        c.accept(tok)
    return bool(c.allowed()[engine.tokenizer.eos_token_id])


def calls(*steps: tuple[str, str, str]) -> str:
    return "\n".join(call_text(name, f'{{"{param}": "{value}"}}') for name, param, value in steps)


def test_only_calls_that_can_run_in_order_are_decoded(engine, calls_grammar):
    answer, grammar = calls_grammar
    pick_first = calls(("pick", "object", "milk"))
    assert accepted(engine, answer, grammar, pick_first, narrow=False)  # the grammar alone takes it
    assert not accepted(engine, answer, grammar, pick_first)  # the milk is in the closed fridge
    closed = calls(("go_to", "place", "fridge"), ("pick", "object", "milk"))
    assert not accepted(engine, answer, grammar, closed)
    opened = calls(("go_to", "place", "fridge"), ("open", "place", "fridge"), ("pick", "object", "milk"))
    assert accepted(engine, answer, grammar, opened)
    assert not accepted(engine, answer, grammar, calls(("open", "place", "fridge")))  # not at the fridge


def test_a_text_argument_is_the_grammars_and_the_call_is_still_checked(engine, calls_grammar):
    answer, grammar = calls_grammar
    assert accepted(engine, answer, grammar, calls(("say", "text", "I am on my way"), ("go_to", "place", "kitchen")))
