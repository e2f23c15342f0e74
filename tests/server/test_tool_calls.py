"""Tool calls as text (server/tool_calls.py): how the tools reach the prompt, with the embedded model's
real tokenizer, and how an answer's text becomes OpenAI's tool_calls, streamed or whole."""

from __future__ import annotations

import json

import pytest
from transformers import AutoTokenizer

from orin_llm.server.errors import RequestError
from orin_llm.server.schemas import ChatRequest
from orin_llm.server.tool_calls import CallParser, call_text, chat_messages, parse_answer, template_speaks_tools

GO_TO = {"type": "function", "function": {
    "name": "go_to", "description": "Drive to a room.",
    "parameters": {"type": "object", "properties": {"room": {"type": "string"}}, "required": ["room"]}}}
PICK = {"type": "function", "function": {"name": "pick", "parameters": {
    "type": "object", "properties": {"object": {"type": "string"}, "hand": {"enum": ["left", "right"]}}}}}
ANSWER = (call_text("go_to", '{"room": "kitchen"}') + "\n"
          + call_text("pick", '{"object": "mug \\"red\\" {x}", "hand": "left"}'))

# An agent loop as LangChain / ROSA send it: the assistant's calls with content null, then each result.
LOOP = [
    {"role": "system", "content": "You drive a home robot."},
    {"role": "user", "content": "Fetch the mug from the kitchen."},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "go_to", "arguments": '{"room": "kitchen"}'}},
        {"id": "call_2", "type": "function", "function": {"name": "pick", "arguments": '{"object": "mug"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "arrived"},
    {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "holding the mug"}]},
]


@pytest.fixture(scope="module")
def tokenizer(engine_dir):
    return AutoTokenizer.from_pretrained(str(engine_dir / "tokenizer"))


def request(messages, tools=(GO_TO, PICK)) -> ChatRequest:
    return ChatRequest.model_validate({"messages": messages, "tools": list(tools)})


def test_the_parser_reads_calls_the_same_whole_or_in_any_pieces():
    whole = parse_answer(ANSWER, "calls")
    assert [(c.name, json.loads(c.arguments)) for c in whole.complete_calls] == [
        ("go_to", {"room": "kitchen"}), ("pick", {"object": 'mug "red" {x}', "hand": "left"})]
    assert not whole.truncated and whole.content is None
    for size in (1, 2, 3, 7, 50):  # streamed: the deltas assemble, by index, into the same calls
        parser, got = CallParser("calls"), {}
        for i in range(0, len(ANSWER), size):
            for entry in (parser.feed(ANSWER[i:i + size]) or {}).get("tool_calls", []):
                call = got.setdefault(entry["index"], {"name": None, "arguments": "", "ids": []})
                fn = entry["function"]
                if "name" in fn:
                    assert call["name"] is None and entry["type"] == "function"
                    call["name"], call["ids"] = fn["name"], call["ids"] + [entry["id"]]
                call["arguments"] += fn.get("arguments", "")
        assert [(c["name"], c["arguments"]) for c in got.values()] == [(c.name, c.arguments) for c in whole.calls]
        assert all(len(c["ids"]) == 1 for c in got.values())  # each id sent once, with the name


def test_either_mode_decides_on_the_first_bytes():
    parser = CallParser("either")
    assert parser.feed("<tool") is None  # could still be a call: held back
    assert parser.feed("box is") == {"content": "<toolbox is"} and parser.feed(" red") == {"content": " red"}
    assert parser.content == "<toolbox is red" and parser.finish() is None
    held = CallParser("either")
    assert held.feed("<tool_") is None and held.finish() == {"content": "<tool_"}  # ended undecided: text
    call = parse_answer(ANSWER, "either")
    assert call.is_calls and len(call.complete_calls) == 2


def test_a_call_cut_short_is_not_a_complete_call():
    cut = parse_answer(ANSWER[:-20], "calls")
    assert cut.truncated and [c.name for c in cut.complete_calls] == ["go_to"]
    assert parse_answer("<tool_call>\n", "calls").truncated
    assert parse_answer("", "calls").complete_calls == []


@pytest.mark.full
def test_tools_and_calls_are_rendered_into_the_prompt_deterministically(tokenizer):
    assert not template_speaks_tools(tokenizer)  # SmolLM2's template knows no tools: our own rendering
    messages, tools = chat_messages(request(LOOP).messages, request(LOOP).tools, native=False)
    assert tools is None
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]  # results share one turn
    system = messages[0]["content"]
    assert system.startswith("You drive a home robot.\n\n# Tools")
    assert json.dumps(GO_TO) in system and json.dumps(PICK) in system  # each tool, as given
    # the assistant's calls are the bytes the grammar writes, so an answer sent back is the same tokens
    assert messages[2]["content"] == (call_text("go_to", '{"room": "kitchen"}') + "\n"
                                      + call_text("pick", '{"object": "mug"}'))
    assert messages[3]["content"] == ("<tool_response>\narrived\n</tool_response>\n"
                                      "<tool_response>\nholding the mug\n</tool_response>")
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    again = tokenizer.apply_chat_template(chat_messages(request(LOOP).messages, request(LOOP).tools, False)[0],
                                          tokenize=False, add_generation_prompt=True)
    assert text == again and text.endswith("<|im_start|>assistant\n")
    # no system message of its own: the tools get one (instead of the template's default one)
    bare, _ = chat_messages(request(LOOP[1:]).messages, request(LOOP[1:]).tools, native=False)
    assert bare[0]["role"] == "system" and bare[0]["content"].startswith("# Tools")


@pytest.mark.full
def test_a_template_that_speaks_tools_renders_them_itself(tokenizer):
    """A Hermes-style template (ours, written for this test) gets the tools, the calls and the results in
    the shapes transformers' templates read."""
    hermes = (
        "{%- if tools %}<|im_start|>system\n<tools>{% for t in tools %}\n{{ t | tojson }}{% endfor %}\n</tools>"
        "<|im_end|>\n{%- endif %}"
        "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
        "{%- for c in m.tool_calls or [] %}<tool_call>\n"
        '{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}\n</tool_call>'
        "{%- endfor %}{%- if m.role == 'tool' %} ({{ m.name }}){%- endif %}<|im_end|>\n{%- endfor %}")
    tok = AutoTokenizer.from_pretrained(tokenizer.name_or_path)
    tok.chat_template = hermes
    assert template_speaks_tools(tok)
    req = request(LOOP)
    messages, tools = chat_messages(req.messages, req.tools, native=True)
    assert tools == [GO_TO, PICK]
    assert messages[2]["tool_calls"][0]["function"]["arguments"] == {"room": "kitchen"}  # a mapping
    assert messages[3] == {"role": "tool", "content": "arrived", "tool_call_id": "call_1", "name": "go_to"}
    text = tok.apply_chat_template(messages, tools=tools, tokenize=False)
    assert json.dumps(GO_TO) in text and json.dumps(PICK) in text  # the template's own listing of them
    assert '<tool_call>\n{"name": "pick", "arguments": {"object": "mug"}}\n</tool_call>' in text
    assert "holding the mug (pick)" in text


def test_a_tool_result_must_answer_an_earlier_call():
    stray = [LOOP[1], {"role": "tool", "tool_call_id": "call_9", "content": "done"}]
    with pytest.raises(RequestError, match="messages.1: tool_call_id 'call_9' answers no tool call") as e:
        chat_messages(request(stray).messages, None, native=False)
    assert e.value.status == 422
