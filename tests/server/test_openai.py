"""The official `openai` client talks to the daemon over its Unix socket, as is."""

from __future__ import annotations

import importlib
import json
from typing import Literal

import pytest

from .test_structured import GO_TO, ROOMS, SAY  # the same tools, checked there without a model

pytestmark = pytest.mark.full

openai = pytest.importorskip("openai")


def http_module():
    """openai's http_client must be its own HTTP library's Client: httpx2 from openai 3 on, httpx before."""
    base = next(c for c in openai.DefaultHttpxClient.__mro__[1:] if c.__name__ == "Client")
    return importlib.import_module(base.__module__.split(".")[0])


@pytest.fixture(scope="module")
def oai(daemon):
    http = http_module()
    client = openai.OpenAI(base_url="http://localhost/v1", api_key="x", max_retries=0,
                           http_client=http.Client(transport=http.HTTPTransport(uds=str(daemon.socket))))
    yield client
    client.close()


MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name a fruit."}]


def test_chat_completion(oai, client):
    r = oai.chat.completions.create(model="gpt-4o", messages=MESSAGES, max_tokens=8, seed=1, user="robot")
    assert r.model == client.health()["engine"]  # whatever the request named
    assert r.object == "chat.completion" and len(r.choices) == 1
    assert r.choices[0].message.role == "assistant" and r.choices[0].message.content
    assert r.choices[0].finish_reason in ("stop", "length")
    assert 0 < r.usage.completion_tokens <= 8
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_streaming_chat_completion_matches(oai):
    whole = oai.chat.completions.create(model="x", messages=MESSAGES, max_tokens=8)
    chunks = list(oai.chat.completions.create(model="x", messages=MESSAGES, max_tokens=8, stream=True,
                                              stream_options={"include_usage": True}))
    assert all(c.object == "chat.completion.chunk" and c.id == chunks[0].id for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content  # greedy: the same answer
    assert chunks[-2].choices[0].finish_reason == whole.choices[0].finish_reason
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_errors_reach_the_openai_client(oai):
    with pytest.raises(openai.UnprocessableEntityError, match="n must be 1"):
        oai.chat.completions.create(model="x", messages=MESSAGES, n=2)
    with pytest.raises(openai.APIStatusError, match="deadline of 1 ms exceeded"):
        oai.chat.completions.create(model="x", messages=MESSAGES, max_tokens=500,
                                    extra_body={"deadline_ms": 1})


# Structured outputs and tools (server/structured.py): the client's own request shapes, over the socket.

TOOLS = [GO_TO, SAY]
ROBOT = [{"role": "system", "content": "You control a home robot with tools."},
         {"role": "user", "content": "Go to the kitchen."}]
PERSON = {"type": "object", "additionalProperties": False, "required": ["name", "age", "pets"],
          "properties": {"name": {"type": "string", "maxLength": 24},
                         "age": {"type": "integer", "minimum": 0, "maximum": 120},
                         "pets": {"type": "array", "maxItems": 2, "items": {"enum": ["cat", "dog", "fish"]}}}}
ASK_PERSON = [{"role": "user", "content": "Make up a person with a name, an age and pets, as JSON."}]
PERSON_FORMAT = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}


def schema_check(instance, schema) -> None:
    """A second opinion where a JSON-schema validator is installed (the tests check the schema's rules by
    hand as well)."""
    try:
        import jsonschema_rs
    except ImportError:
        return
    assert jsonschema_rs.is_valid(schema, instance), (instance, schema)


def check_person(content: str) -> dict:
    person = json.loads(content)
    assert set(person) == {"name", "age", "pets"}
    assert isinstance(person["name"], str) and len(person["name"]) <= 24
    assert isinstance(person["age"], int) and not isinstance(person["age"], bool) and 0 <= person["age"] <= 120
    assert isinstance(person["pets"], list) and len(person["pets"]) <= 2
    assert all(p in ("cat", "dog", "fish") for p in person["pets"])
    schema_check(person, PERSON)
    return person


def check_calls(message, names=("go_to", "say")) -> list[tuple[str, dict]]:
    """Each call names a given function, with arguments that follow its parameters."""
    assert message.content is None and message.tool_calls
    out = []
    for call in message.tool_calls:
        assert call.type == "function" and call.id.startswith("call_")
        args = json.loads(call.function.arguments)
        assert call.function.name in names
        if call.function.name == "go_to":
            assert set(args) == {"room"} and args["room"] in ROOMS
        else:
            assert set(args) == {"text"} and isinstance(args["text"], str) and len(args["text"]) <= 40
        schema_check(args, {t["function"]["name"]: t for t in TOOLS}[call.function.name]["function"]["parameters"])
        out.append((call.function.name, args))
    assert len({c.id for c in message.tool_calls}) == len(message.tool_calls)
    return out


def streamed_text(oai, **request) -> tuple[str, str]:
    chunks = list(oai.chat.completions.create(model="x", stream=True, **request))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    return text, chunks[-1].choices[0].finish_reason


def test_json_schema_answers_validate(oai):
    r = oai.chat.completions.create(model="x", messages=ASK_PERSON, response_format=PERSON_FORMAT, max_tokens=60)
    assert r.choices[0].finish_reason == "stop"
    check_person(r.choices[0].message.content)
    assert streamed_text(oai, messages=ASK_PERSON, response_format=PERSON_FORMAT, max_tokens=60) == (
        r.choices[0].message.content, "stop")  # streamed as content deltas, the same greedy answer
    obj = oai.chat.completions.create(model="x", messages=ASK_PERSON, response_format={"type": "json_object"},
                                      max_tokens=60)
    if obj.choices[0].finish_reason == "stop":  # a free-form object may run to max_tokens
        assert isinstance(json.loads(obj.choices[0].message.content), dict)
    else:
        assert obj.choices[0].message.content.startswith("{")


def test_the_clients_parse_helper_gets_its_model_back(oai):
    from pydantic import BaseModel, Field

    class Pet(BaseModel):
        name: str = Field(max_length=20)
        kind: Literal["cat", "dog", "fish"]

    r = oai.chat.completions.parse(model="x", messages=[{"role": "user", "content": "Invent a pet."}],
                                   response_format=Pet, max_tokens=40)
    pet = r.choices[0].message.parsed
    assert isinstance(pet, Pet) and pet.kind in ("cat", "dog", "fish") and pet.name


def test_a_required_tool_call_comes_back_as_tool_calls(oai):
    r = oai.chat.completions.create(model="x", messages=ROBOT, tools=TOOLS, tool_choice="required", max_tokens=80)
    # parallel calls are allowed: the small model may call on until max_tokens, and the call it was writing
    # then is left out (its arguments are not JSON yet)
    assert r.choices[0].finish_reason == "tool_calls" or r.usage.completion_tokens == 80
    check_calls(r.choices[0].message)
    # one call, streamed: delta.tool_calls pieces that the client's own stream helper assembles into the
    # same call as the unstreamed answer (the helper refuses a "length" finish, hence one call)
    one = dict(model="x", messages=ROBOT, tools=TOOLS, tool_choice="required", parallel_tool_calls=False,
               max_tokens=80)
    single = oai.chat.completions.create(**one)
    assert single.choices[0].finish_reason == "tool_calls"
    calls = check_calls(single.choices[0].message)
    assert len(calls) == 1
    with oai.chat.completions.stream(**one) as stream:
        kinds = {type(event).__name__ for event in stream}
        final = stream.get_final_completion()
    assert "FunctionToolCallArgumentsDeltaEvent" in kinds
    assert final.choices[0].finish_reason == "tool_calls"
    assert check_calls(final.choices[0].message) == calls


def test_a_named_function_is_the_one_called(oai):
    r = oai.chat.completions.create(model="x", messages=ROBOT, tools=TOOLS, parallel_tool_calls=False,
                                    tool_choice={"type": "function", "function": {"name": "say"}}, max_tokens=60)
    assert r.choices[0].finish_reason == "tool_calls"
    assert [name for name, _ in check_calls(r.choices[0].message, names=("say",))] == ["say"]  # one call


def test_auto_answers_in_text_or_calls_never_both(oai):
    for messages in (ROBOT, [{"role": "user", "content": "What is the capital of France?"}]):
        r = oai.chat.completions.create(model="x", messages=messages, tools=TOOLS, max_tokens=40)
        message = r.choices[0].message
        if message.tool_calls:
            check_calls(message)
            assert r.choices[0].finish_reason in ("tool_calls", "length")
        else:
            assert message.content is not None and "<tool_call>" not in message.content
            assert streamed_text(oai, messages=messages, tools=TOOLS, max_tokens=40) == (
                message.content, r.choices[0].finish_reason)


def test_an_agent_loop_sends_calls_and_results_back(oai, daemon):
    """The shapes LangChain (ROSA) and the OpenAI docs send: the assistant's message with its calls and
    content null, then one tool message per call."""
    first = oai.chat.completions.create(model="x", messages=ROBOT, tools=TOOLS, tool_choice="required",
                                        max_tokens=80)
    message = first.choices[0].message
    results = [{"role": "tool", "tool_call_id": c.id, "content": "done"} for c in message.tool_calls]
    second = oai.chat.completions.create(model="x", messages=ROBOT + [message] + results, tools=TOOLS,
                                         max_tokens=24)  # the client sends the message object back as is
    assert second.choices[0].message.role == "assistant"
    assert second.usage.prompt_tokens_details.cached_tokens > first.usage.prompt_tokens // 2  # tools cached
    loop = ROBOT + [  # as JSON, the way LangChain writes it
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_a", "type": "function", "function": {"name": "go_to", "arguments": '{"room": "kitchen"}'}}]},
        {"role": "tool", "tool_call_id": "call_a", "content": "arrived", "name": "go_to"}]
    http = http_module()
    with http.Client(transport=http.HTTPTransport(uds=str(daemon.socket)), timeout=120) as h:
        raw = h.post("http://localhost/v1/chat/completions", json={"max_tokens": 4, "tools": TOOLS, "messages": loop})
    assert raw.status_code == 200, raw.text


def test_constrained_chats_are_the_same_with_lookup(oai):
    for request in ({"messages": ROBOT, "tools": TOOLS, "tool_choice": "required", "max_tokens": 80},
                    {"messages": ASK_PERSON, "response_format": PERSON_FORMAT, "max_tokens": 60}):
        plain, drafted = (oai.chat.completions.create(model="x", extra_body={"speculation": s}, **request)
                          for s in ("none", "lookup"))
        strip = lambda r: [(c.function.name, c.function.arguments) for c in r.choices[0].message.tool_calls or ()]  # noqa: E731
        assert drafted.choices[0].message.content == plain.choices[0].message.content
        assert strip(drafted) == strip(plain)
        assert drafted.usage.completion_tokens == plain.usage.completion_tokens
        assert drafted.model_extra["speculation"]["drafter"] == "lookup"


@pytest.mark.parametrize("request_, words", [
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": {"type": "objekt"}}}},
     "response_format.json_schema.schema does not compile: Invalid type: objekt"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}]},
     'tools.0.function.parameters: must be a JSON schema of an object ("type": "object"), got "string"'),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"n": {"type": "integr"}}}}}]},
     "tools.0.function.parameters does not compile: Invalid type: integr"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "fly"}}},
     "tool_choice names function 'fly', which is not in tools (go_to, say)"),
    ({"tools": TOOLS, "tool_choice": "required", "response_format": PERSON_FORMAT},
     'response_format json_schema and tool_choice "required" together'),
    ({"tool_choice": "required"}, "tool_choice: only with tools"),
    ({"messages": ROBOT + [{"role": "tool", "tool_call_id": "call_x", "content": "done"}]},
     "tool_call_id 'call_x' answers no tool call of an earlier assistant message"),
])
def test_bad_structured_requests_get_422_naming_what_to_fix(oai, client, request_, words):
    with pytest.raises(openai.UnprocessableEntityError) as e:
        oai.chat.completions.create(model="x", **{"messages": ROBOT, "max_tokens": 8, **request_})
    assert words in e.value.message
    assert client.health()["ready"] and client.chat(MESSAGES, max_tokens=2)["choices"]  # everyone else is served
