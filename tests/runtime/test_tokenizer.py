"""Our tokenizer (tokenizers + jinja2, no transformers) against transformers' own on the same directory:
the same ids, the same decoded text, the same rendered prompts, the same refusals."""

from __future__ import annotations

import json
import shutil

import jinja2
import pytest
from transformers import AutoTokenizer

from orin_llm.errors import OrinError
from orin_llm.planning.calibration_data import load_home, load_split
from orin_llm.planning.home import prefix_messages, task_message
from orin_llm.runtime.tokenizer import LONG_TEXT, Tokenizer
from tests.conftest import tiny_fixture

tiny_engine_dir = tiny_fixture("engine_dir")  # random weights do here (tests/conftest.py)

TEXTS = [
    "", " ", "  leading spaces", "trailing space ", "\n\n\tTabs and\r\nCRLF\n", "go_to(kitchen)\npick(mug)",
    "Ünïcödé: café, naïve, Straße, 東京, 🤖🦾, ‍👩‍💻", "text with <|im_start|> and <|im_end|> inside",
    "<|im_start|>assistant\n", "It's, isn't it? Yes . No ! 's 've 're", "a" * 300, "1234567890 3.14159 -42",
    '{"json": [1, 2, {"k": "v"}], "esc": "\\u00e9\\n"}', "\ufffd broken",
]

# A Llama-3-style template of our own (not Meta's text), using what such templates use: strftime_now,
# raise_exception, tojson with an indent, namespace, loop controls, bos_token, tools.
LLAMA3_STYLE = """{{- bos_token }}
{%- if not date_string is defined %}{%- set date_string = strftime_now("%d %b %Y") %}{%- endif %}
{%- set ns = namespace(system="", seen=0) %}
{%- if messages[0]['role'] == 'system' %}{%- set ns.system = messages[0]['content'] | trim %}{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\\n\\nToday: " + date_string + "\\n" }}
{%- if tools is not none %}
    {{- "Tools:\\n" }}
    {%- for t in tools %}{{- t | tojson(indent=4) }}{{- "\\n\\n" }}{%- endfor %}
{%- endif %}
{{- ns.system + "<|eot_id|>" }}
{%- for message in messages %}
    {%- if message['role'] == 'system' %}{%- continue %}{%- endif %}
    {%- if message['role'] not in ['user', 'assistant', 'tool'] %}
        {{- raise_exception("unknown role " + message['role']) }}
    {%- endif %}
    {%- set ns.seen = ns.seen + 1 %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}
    {%- if message.tool_calls is defined %}
        {%- for c in message.tool_calls %}
            {{- c.function | tojson }}{%- if loop.index >= 2 %}{%- break %}{%- endif %}
        {%- endfor %}
    {%- else %}{{- message['content'] | trim }}{%- endif %}
    {{- '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}
"""

PLACE = {"type": "object", "properties": {"place": {"type": "string"}}}
TOOLS = [{"type": "function", "function": {"name": "go_to", "description": "Walk <there> & stop", "parameters": PLACE}}]


@pytest.fixture(scope="module")
def tok_dir(engine_dir):
    return engine_dir / "tokenizer"


@pytest.fixture(scope="module")
def ours(tok_dir):
    return Tokenizer(tok_dir)


@pytest.fixture(scope="module")
def theirs(tok_dir):
    return AutoTokenizer.from_pretrained(str(tok_dir))


def _plan_texts() -> list[str]:
    items = load_split("heldout")[:8] + load_split("calib")[:8]
    return [i.task for i in items] + ["\n".join(i.reference_plan) for i in items]


def _long_texts() -> list[str]:
    """Past LONG_TEXT, encode() takes another path (one that lets go of the GIL): the same ids."""
    joined = " ".join(TEXTS + _plan_texts())
    return [joined * (1 + LONG_TEXT // len(joined)), "<|im_start|>user\n" + "word " * 5000 + "<|im_end|>"]


def test_ids_and_text_match_transformers(ours, theirs):
    assert all(len(t) >= LONG_TEXT for t in _long_texts())
    for text in TEXTS + _plan_texts() + _long_texts():
        ids = ours.encode(text)
        assert ids == theirs.encode(text, add_special_tokens=False), text
        for skip in (False, True):
            assert ours.decode(ids, skip_special_tokens=skip) == theirs.decode(ids, skip_special_tokens=skip)
    specials = [ours.eos_token_id, 1, 5, 100, ours.pad_token_id, 0]
    for skip in (False, True):
        assert ours.decode(specials, skip_special_tokens=skip) == theirs.decode(specials, skip_special_tokens=skip)
    assert ours.decode(5) == theirs.decode(5)
    assert (ours.eos_token_id, ours.pad_token_id) == (theirs.eos_token_id, theirs.pad_token_id)
    assert ours.special_tokens_map == theirs.special_tokens_map


def test_embedded_template_renders_as_transformers(ours, theirs):
    home = load_home("cottage")
    chats = [
        [{"role": "user", "content": "What is 2 + 2?"}],  # no system: the template adds its own
        prefix_messages(home) + [task_message("Bring the mug to the sofa.", ["the mug is in the sink"])],
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"},
         {"role": "assistant", "content": "hello", "tool_calls": None}, {"role": "user", "content": "again"}],
    ]
    for chat in chats:
        for gen in (True, False):
            assert ours.apply_chat_template(chat, add_generation_prompt=gen) == \
                theirs.apply_chat_template(chat, tokenize=False, add_generation_prompt=gen)


def _dir_with_config(tmp_path, tok_dir, chat_template) -> str:
    """The engine's tokenizer.json with a config of our choosing (and no chat_template.jinja)."""
    d = tmp_path / "tok"
    d.mkdir()
    shutil.copy(tok_dir / "tokenizer.json", d / "tokenizer.json")
    config = json.loads((tok_dir / "tokenizer_config.json").read_text())
    config["chat_template"] = chat_template
    config["bos_token"] = {"content": "<|im_start|>", "__type": "AddedToken"}  # as older transformers wrote it
    (d / "tokenizer_config.json").write_text(json.dumps(config))
    return str(d)


def test_llama3_style_template_with_tools(tmp_path, tok_dir):
    d = _dir_with_config(tmp_path, tok_dir, LLAMA3_STYLE)
    ours, theirs = Tokenizer(d), AutoTokenizer.from_pretrained(d)
    call = {"type": "function", "function": {"name": "go_to", "arguments": {"place": "hall"}}}
    chats = [
        [{"role": "system", "content": "  Plan.  "}, {"role": "user", "content": "Go to the hall."}],
        [{"role": "user", "content": "Go."}, {"role": "assistant", "content": None, "tool_calls": [call, call, call]},
         {"role": "tool", "content": "arrived"}],
        # None-valued keys are dropped (OpenAI clients send them): `tool_calls is defined` stays false
        [{"role": "user", "content": "Go."}, {"role": "assistant", "content": "ok", "tool_calls": None}],
    ]
    for chat in chats:
        for tools in (None, TOOLS):
            assert ours.apply_chat_template(chat, tools=tools, add_generation_prompt=True) == \
                theirs.apply_chat_template(chat, tools=tools, tokenize=False, add_generation_prompt=True)
    bad = [{"role": "robot", "content": "beep"}]
    with pytest.raises(jinja2.TemplateError, match="unknown role robot"):
        ours.apply_chat_template(bad)
    with pytest.raises(jinja2.TemplateError, match="unknown role robot"):
        theirs.apply_chat_template(bad, tokenize=False)


def test_named_templates_pick_tool_use_as_transformers(tmp_path, tok_dir):
    named = [{"name": "default", "template": "D{{ messages | length }}"},
             {"name": "tool_use", "template": "T{{ tools | length }}"}]
    d = _dir_with_config(tmp_path, tok_dir, named)
    ours, theirs = Tokenizer(d), AutoTokenizer.from_pretrained(d)
    chat = [{"role": "user", "content": "x"}]
    for tools in (None, TOOLS):
        expected = theirs.apply_chat_template(chat, tools=tools, tokenize=False)
        assert ours.apply_chat_template(chat, tools=tools) == expected
    assert ours.apply_chat_template(chat, tools=TOOLS) == "T1"


def test_the_sandbox_holds(tmp_path, tok_dir):
    """Chat templates are untrusted code: the sandbox refuses what transformers' refuses."""
    d = _dir_with_config(tmp_path, tok_dir, "{{ messages.__class__.__mro__ }}")
    with pytest.raises(jinja2.exceptions.SecurityError):
        Tokenizer(d).apply_chat_template([{"role": "user", "content": "x"}])


def test_refusals_say_what_to_fix(tmp_path, tok_dir):
    with pytest.raises(OrinError, match="no tokenizer.json"):
        Tokenizer(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(OrinError, match="not a tokenizer the tokenizers library reads"):
        Tokenizer(tmp_path)
    d = _dir_with_config(tmp_path, tok_dir, None)
    with pytest.raises(OrinError, match="no chat template"):
        Tokenizer(d).apply_chat_template([{"role": "user", "content": "x"}])
    with pytest.raises(OrinError, match="at least one message"):
        Tokenizer(tok_dir).apply_chat_template([])
