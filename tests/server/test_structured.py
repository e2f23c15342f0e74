"""What a chat answer must be (server/structured.py): the request's rules, the grammar with the real
tokenizer, the cache of compiled grammars, and constrained chats that stay lossless with every drafter."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest

from orin_llm.errors import OrinError
from orin_llm.runtime.constraint import GrammarError
from orin_llm.runtime.sampling import SamplingParams
from orin_llm.server.errors import RequestError
from orin_llm.server.schemas import ChatRequest
from orin_llm.server.structured import Answer, GrammarCache, answer_of
from orin_llm.server.tool_calls import call_text, chat_messages, parse_answer

ROOMS = ["kitchen", "bedroom", "living room"]
GO_TO = {"type": "function", "function": {
    "name": "go_to", "description": "Drive the robot to a room.",
    "parameters": {"type": "object", "properties": {"room": {"type": "string", "enum": ROOMS}},
                   "required": ["room"], "additionalProperties": False}}}
SAY = {"type": "function", "function": {
    "name": "say", "description": "Say something out loud.",
    "parameters": {"type": "object", "properties": {"text": {"type": "string", "maxLength": 40}},
                   "required": ["text"], "additionalProperties": False}}}
DOCK = {"type": "function", "function": {"name": "dock", "description": "Go back to the charger."}}
PERSON = {"type": "object", "additionalProperties": False, "required": ["name", "age"],
          "properties": {"name": {"type": "string", "maxLength": 24}, "age": {"type": "integer", "minimum": 0,
                                                                               "maximum": 120}}}
USER = [{"role": "user", "content": "Go to the kitchen, then say hello."}]


def answer(**body) -> Answer:
    return answer_of(ChatRequest.model_validate({"messages": USER, **body}))


def json_format(schema=PERSON) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "person", "schema": schema, "strict": True}}


@pytest.mark.parametrize("body, words", [
    ({"tool_choice": "auto"}, "tool_choice: only with tools"),
    ({"parallel_tool_calls": False}, "parallel_tool_calls: only with tools"),
    ({"tools": [GO_TO, GO_TO]}, "two functions are named 'go_to'"),
    ({"tools": [GO_TO], "tool_choice": {"type": "function", "function": {"name": "fly"}}},
     "tool_choice names function 'fly', which is not in tools (go_to)"),
    ({"tools": [GO_TO], "tool_choice": "required", "response_format": {"type": "json_object"}},
     'response_format json_object and tool_choice "required" together'),
    ({"tools": [GO_TO], "tool_choice": {"type": "function", "function": {"name": "go_to"}},
      "response_format": json_format()}, "a named tool_choice together"),
])
def test_combinations_that_make_no_sense_are_refused(body, words):
    with pytest.raises(RequestError, match=re.escape(words)) as e:
        answer(**body)
    assert e.value.status == 422


def test_what_each_request_asks_for():
    assert not answer().constrained and answer(response_format={"type": "text"}).lark() is None
    assert answer(response_format={"type": "json_object"}).content == {"type": "object"}
    assert answer(tools=[GO_TO]).calls == "may"  # OpenAI's default with tools: auto
    none = answer(tools=[GO_TO], tool_choice="none")
    assert none.calls == "never" and not none.constrained and none.schemas()  # shown, checked, not callable
    named = answer(tools=[GO_TO, SAY], tool_choice={"type": "function", "function": {"name": "say"}})
    assert named.calls == "must" and [fn.name for _, fn in named.functions] == ["say"]
    assert [w for w, _ in named.schemas()] == ["tools.0.function.parameters", "tools.1.function.parameters"]
    assert answer(tools=[GO_TO], response_format=json_format()).lark().startswith("start: content | calls")


@pytest.fixture(scope="module")
def vocab(engine):
    return engine.vocabulary()


def accepted(engine, grammar, text: str) -> bool:
    """Whether the grammar accepts `text` whole (its tokens, then the end of the answer)."""
    c = grammar.constraint()
    ids = engine.encode(text)
    if c.valid_prefix(ids) != len(ids):
        return False
    for tok in ids:
        c.accept(tok)
    return bool(c.allowed()[engine.tokenizer.eos_token_id])


def compiled(engine, **body):
    return GrammarCache().for_answer(answer(**body), engine)


@pytest.mark.full
def test_a_forced_call_is_a_call_of_a_given_function_with_valid_arguments(engine):
    g = compiled(engine, tools=[GO_TO, SAY, DOCK], tool_choice="required")
    go, hello = call_text("go_to", '{"room": "kitchen"}'), call_text("say", '{"text": "hello"}')
    assert accepted(engine, g, go) and accepted(engine, g, f"{go}\n{hello}")  # parallel calls by default
    assert accepted(engine, g, call_text("dock", "{}"))  # no parameters: no arguments
    assert not accepted(engine, g, "I will go to the kitchen.")  # text is not a call
    assert not accepted(engine, g, call_text("go_to", '{"room": "garage"}'))  # not in the enum
    assert not accepted(engine, g, call_text("go_to", '{"room": "kitchen", "speed": 2}'))  # no other keys
    assert not accepted(engine, g, call_text("fly", '{"room": "kitchen"}'))  # not a given function
    assert not accepted(engine, g, call_text("go_to", '{ "room":"kitchen"}'))  # one layout: compact JSON
    one = compiled(engine, tools=[GO_TO, SAY], tool_choice={"type": "function", "function": {"name": "say"}},
                   parallel_tool_calls=False)
    assert accepted(engine, one, hello) and not accepted(engine, one, go)
    assert not accepted(engine, one, f"{hello}\n{hello}")  # parallel_tool_calls false: one call


@pytest.mark.full
def test_auto_is_text_or_calls_and_a_call_is_held_to_its_grammar(engine):
    g = compiled(engine, tools=[GO_TO])
    assert accepted(engine, g, "The kitchen is to the left.") and accepted(engine, g, "")
    assert accepted(engine, g, call_text("go_to", '{"room": "bedroom"}'))
    assert not accepted(engine, g, "<tool_call>\nplease go")  # once it begins a call, it is a call
    assert not accepted(engine, g, "Sure. <tool_call>")  # text never carries the tag
    with_json = compiled(engine, tools=[GO_TO], response_format=json_format())
    assert accepted(engine, with_json, '{"name": "Ada", "age": 36}')
    assert accepted(engine, with_json, call_text("go_to", '{"room": "bedroom"}'))
    assert not accepted(engine, with_json, "Ada, 36")


@pytest.mark.full
def test_json_schema_content(engine):
    g = compiled(engine, response_format=json_format())
    assert accepted(engine, g, '{"name": "Ada", "age": 36}')
    assert not accepted(engine, g, '{"name": "Ada", "age": 360}')  # maximum
    assert not accepted(engine, g, '{"name": "Ada"}')  # required
    obj = compiled(engine, response_format={"type": "json_object"})
    assert accepted(engine, obj, '{"any": ["thing", 1, null]}') and not accepted(engine, obj, "[1, 2]")


@pytest.mark.full
def test_each_distinct_grammar_is_compiled_once(engine):
    cache = GrammarCache(size=4)
    first = cache.for_answer(answer(tools=[GO_TO, SAY], tool_choice="required"), engine)
    assert cache.compiled == 3 and cache.hits == 0  # each schema alone (for its errors), then the answer's
    again = cache.for_answer(answer(tools=[GO_TO, SAY], tool_choice="required"), engine)
    assert again is first and cache.compiled == 3 and cache.hits == 3
    reordered = cache.for_answer(answer(tools=[SAY, GO_TO], tool_choice="required"), engine)
    assert reordered is not first and cache.compiled == 4  # same schemas, another grammar
    content = cache.for_answer(answer(response_format=json_format()), engine)
    assert cache.for_answer(answer(response_format=json_format()), engine) is content  # the schema's own
    for i in range(4):  # least recently used first out
        cache.for_answer(answer(response_format=json_format({"type": "object", "maxProperties": i})), engine)
    assert len(cache._lru) == 4 and cache.for_answer(answer(response_format=json_format()), engine) is not content


@pytest.mark.full
@pytest.mark.parametrize("body, words", [
    ({"response_format": json_format({"type": "objekt"})},
     "response_format.json_schema.schema does not compile: Invalid type: objekt"),
    ({"tools": [GO_TO, {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"n": {"type": "integer", "minimum": "zero"}}}}}], "tool_choice": "none"},
     "tools.1.function.parameters does not compile"),
])
def test_a_schema_that_does_not_compile_is_named(engine, body, words):
    with pytest.raises(GrammarError, match=re.escape(words)):
        GrammarCache().for_answer(answer(**body), engine)


def test_an_engine_without_grammars_says_so():
    # a backend whose capabilities say it has no grammars (both of ours have them: TrtllmEngine masks
    # by post-processor)
    trtllm = SimpleNamespace(manifest=SimpleNamespace(backend="trtllm"), capabilities=SimpleNamespace(grammars=False))
    with pytest.raises(OrinError, match="this trtllm engine cannot constrain a chat answer yet"):
        GrammarCache().for_answer(answer(tools=[GO_TO], tool_choice="required"), trtllm)
    assert GrammarCache().for_answer(answer(tools=[GO_TO], tool_choice="none"), trtllm) is None
    assert GrammarCache().for_answer(answer(), trtllm) is None


GREEDY = SamplingParams(max_tokens=40)
CHATS = [  # (request body, what the answer is)
    ({"tools": [GO_TO, SAY], "tool_choice": "required"}, "calls"),
    ({"messages": [{"role": "user", "content": "Make up a person: name and age, as JSON."}],
      "response_format": json_format()}, "json"),
    ({"messages": [{"role": "user", "content": "Say hello to Ada, please."}], "tools": [SAY],
      "tool_choice": {"type": "function", "function": {"name": "say"}}}, "calls"),
]


@pytest.mark.full
@pytest.mark.parametrize("mode", ["lookup", "draft_model"])
def test_constrained_chats_are_the_same_with_each_drafter(engine, mode):
    """Greedy constrained output with a drafter is token for token the output without one (the draft is
    cut where the grammar forbids it, then verified as usual)."""
    cache, drafted = GrammarCache(), 0
    for body, kind in CHATS if mode == "lookup" else CHATS[:1]:  # the draft model is slow on a CPU
        req = ChatRequest.model_validate({"messages": USER, **body})
        a = answer_of(req)
        ids = engine.chat_ids(chat_messages(req.messages, req.tools, native=False)[0])
        runs = [engine.run(engine.generate(ids, GREEDY, spec, constraint=cache.for_answer(a, engine).constraint()))
                for spec in ("none", mode, mode)]  # the second drafted run also draws on the first's history
        assert runs[0].token_ids == runs[1].token_ids == runs[2].token_ids, (mode, body)
        drafted += runs[1].speculation.drafted + runs[2].speculation.drafted
        if kind == "json":
            assert runs[0].finish_reason == "stop" and set(json.loads(runs[0].text)) == {"name", "age"}
        else:
            calls = parse_answer(runs[0].text, "calls").complete_calls
            assert calls and all(c.name in ("go_to", "say") for c in calls)
    assert drafted > 0
