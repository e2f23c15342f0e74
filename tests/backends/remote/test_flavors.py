"""The request body for each engine (backends/remote/flavors.py) against the fields their OpenAI servers
declare, and the GBNF the home's Lark grammar becomes for SGLang and trtllm-serve.

Fields as their sources declare them (the request models, /v1/completions):
- SGLang: python/sglang/srt/entrypoints/openai/protocol.py, CompletionRequest (sgl-project/sglang
  004c82e): `ebnf`, `regex` and `json_schema` at the top level, one constraint per request; xgrammar,
  its default grammar backend, reads GBNF (docs.sglang.io, "Structured Outputs").
- trtllm-serve: tensorrt_llm/serve/openai_protocol.py, CompletionRequest (NVIDIA/TensorRT-LLM 0076e93):
  `response_format: {"type": "ebnf", "ebnf": ...}`, the model configured `extra="forbid"` (an unknown
  field is a 400), guided decoding on with `guided_decoding_backend: xgrammar` in the server's YAML
  (nvidia.github.io/TensorRT-LLM, "Guided Decoding").
- vLLM 0.32 (the one these tests run for real): `structured_outputs: {"grammar": ...}`.
- SGLang's router (sglang-router 0.3.2, the `smg` crate: sgl-project/sglang
  sgl-model-gateway/src/protocols/completion.rs at 1c69b16, CompletionRequest): `model: String`
  (required), `prompt: StringOrArray` (a string or a list of strings, protocols/common.rs: token ids are a
  422), `max_tokens: Option<u32>`, `temperature`/`top_p: Option<f32>`, `stream: bool`,
  `stream_options: Option<StreamOptions>` (`include_usage`), `stop: Option<StringOrArray>`,
  `seed: Option<i64>`, `regex`/`ebnf`/`json_schema: Option<String>`, and the rest forwarded as it came
  (`#[serde(flatten)] other`). SGLang itself (protocol.py above) takes the prompt as
  `Union[List[int], List[List[int]], str, List[str]]`.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess

import pytest

from orin_llm.backends.remote.flavors import completion_body, gbnf
from orin_llm.backends.remote.settings import RemoteSettings
from orin_llm.errors import OrinError
from orin_llm.planning.home import EXAMPLE_HOME_PATH, load_environment
from orin_llm.planning.home.grammar import plan_grammar
from orin_llm.runtime.constraint import Grammar
from orin_llm.server.config import DaemonConfig, add_arguments

from .test_hedged import TASK, run
from .vllm_replica import vllm_python

LARK = plan_grammar(load_environment(EXAMPLE_HOME_PATH))
# the fields of each server's CompletionRequest (module doc) that a plan request may use
SGLANG_FIELDS = {"model", "prompt", "max_tokens", "temperature", "top_p", "stream", "stream_options", "seed", "stop",
                 "ebnf", "regex", "json_schema"}
TRTLLM_FIELDS = {"model", "prompt", "max_tokens", "temperature", "top_p", "stream", "stream_options", "seed", "stop",
                 "response_format"}
TRTLLM_FORMAT = {"type", "schema", "json_schema", "regex", "ebnf", "format"}  # its ResponseFormat




def _str_or_strs(v) -> bool:  # the router's StringOrArray
    return isinstance(v, str) or (isinstance(v, list) and all(isinstance(x, str) for x in v))


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# SGLang's router's CompletionRequest (module doc): what each field a plan request uses must deserialize as
SGLANG_ROUTER = {
    "model": lambda v: isinstance(v, str), "prompt": _str_or_strs, "stop": _str_or_strs,
    "max_tokens": lambda v: isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**32,
    "temperature": _number, "top_p": _number, "stream": lambda v: isinstance(v, bool),
    "stream_options": lambda v: isinstance(v, dict) and set(v) <= {"include_usage", "continuous_usage_stats"}
    and all(isinstance(x, bool) for x in v.values()),
    "seed": lambda v: isinstance(v, int) and not isinstance(v, bool) and -2**63 <= v < 2**63,
    **{k: (lambda v: isinstance(v, str)) for k in ("ebnf", "regex", "json_schema")},
}


def router_refusals(b: dict) -> dict:
    """The fields of `b` SGLang's router (or SGLang) would refuse: not declared, or not of the declared type."""
    return {k: v for k, v in b.items() if k not in SGLANG_ROUTER or k not in SGLANG_FIELDS or not SGLANG_ROUTER[k](v)}


def body(flavor: str, lark=LARK) -> dict:
    return {"model": "m", **completion_body(flavor, [1, 2, 3], 32, 0.0, 1.0, 7, ["\n\n"], lark)}


def test_vllm_gets_the_lark_grammar_in_structured_outputs():
    b = body("vllm")
    assert b["structured_outputs"] == {"grammar": LARK} and "ebnf" not in b and "response_format" not in b
    assert b["prompt"] == [1, 2, 3] and b["stream_options"] == {"include_usage": True} and b["seed"] == 7


def test_sglang_gets_gbnf_in_its_top_level_ebnf_field():
    b = body("sglang")
    assert set(b) <= SGLANG_FIELDS, set(b) - SGLANG_FIELDS
    assert set(router_refusals(b)) == {"prompt"}  # token ids: the router's 422 (hedged.py sends text instead)
    assert not router_refusals({**b, "prompt": "<|im_start|>user\nhi<|im_end|>\n"})
    assert b["ebnf"] == gbnf(LARK) and b["ebnf"].startswith("root ::= ")


def test_trtllm_gets_gbnf_in_response_format_and_nothing_it_would_refuse():
    b = body("trtllm")
    assert set(b) <= TRTLLM_FIELDS, set(b) - TRTLLM_FIELDS  # extra="forbid": any other field is a 400
    assert b["response_format"] == {"type": "ebnf", "ebnf": gbnf(LARK)} and set(b["response_format"]) <= TRTLLM_FORMAT


@pytest.mark.parametrize("flavor", ["vllm", "sglang", "trtllm"])
def test_without_a_grammar_no_constraint_field_is_sent(flavor):
    b = body(flavor, lark=None)
    assert not {"structured_outputs", "ebnf", "response_format"} & set(b)


def test_the_plan_grammar_as_gbnf():
    g = gbnf(LARK)
    rules = dict(line.split(" ::= ", 1) for line in g.splitlines())
    assert rules["root"] == 'step ("\\n" step){0,31} "\\n"?'
    assert rules["text"] == "tok-text" and rules["tok-text"] == '("\\"" [^"\\n]{1,80} "\\"")'
    assert rules["step"].startswith('"go_to(" place ")" | ') and '"place(" object ", " place ")"' in rules["step"]
    assert not re.search(r"\b(start|TEXT)\b", g)


@pytest.mark.parametrize("lark,why", [("start: %import common.WORD\n", "cannot convert"),
                                      ("start: /a.b/\n", "does not handle"), ("no rule here\n", "not a rule")])
def test_what_gbnf_cannot_say_is_refused(lark, why):
    with pytest.raises(OrinError, match=why):
        gbnf(lark)


def test_the_daemon_options_choose_the_flavor_and_the_plan_mode():
    p = argparse.ArgumentParser()
    add_arguments(p)
    opts = vars(p.parse_args(["--engine", "e", "--remote", "http://127.0.0.1:8000", "--remote-flavor", "sglang",
                              "--remote-plans", "whole"]))
    s = DaemonConfig.from_options(opts, {}).remote_settings()
    assert (s.flavor, s.plans) == ("sglang", "whole")
    with pytest.raises(SystemExit):
        p.parse_args(["--engine", "e", "--remote-flavor", "tgi"])


@pytest.mark.full  # needs vLLM's venv (xgrammar): tests/backends/remote/vllm_replica.py installs it or fails saying why
def test_xgrammar_reads_the_gbnf_as_llguidance_reads_the_lark(tiny_engine):
    """The strings xgrammar (SGLang's and trtllm-serve's grammar library, in vLLM's venv) accepts under
    gbnf(lark) are the strings the robot's own check (llguidance) accepts under the Lark."""
    cases = ["go_to(fridge)\nopen(fridge)\npick(milk)", "go_to(fridge)\n", 'say("hello there")', "go_to(moon)",
             "go_to(fridge)\n\n", "pick(milk, fridge)", "place(milk, fridge)", 'say("")', "switch_on(kettle)",
             "go_to(fridge)"]
    script = ("import json, sys, xgrammar as xgr\nfrom xgrammar.testing import _is_grammar_accept_string as ok\n"
              "g = xgr.Grammar.from_ebnf(sys.argv[1])\nprint(json.dumps([ok(g, s) for s in json.loads(sys.argv[2])]))")
    proc = subprocess.run([str(vllm_python()), "-c", script, gbnf(LARK), json.dumps(cases)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    grammar = Grammar.lark(tiny_engine.vocabulary(), LARK)

    def accepts(text: str) -> bool:
        c, ids = grammar.constraint(), tiny_engine.encode(text)
        return any(c.valid_prefix(ids + [e]) == len(ids) + 1 for e in tiny_engine.eos_ids)
    expected = [accepts(s) for s in cases]
    assert True in expected and False in expected
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == expected, cases


def test_sglang_sends_the_prompt_as_its_text_with_the_template_once(peer, planners):
    """`--remote-flavor sglang`: what reaches the wire (a real HTTP peer) is a body SGLang's router and
    SGLang declare, the prompt the planner's ids decoded with the robot's tokenizer (special tokens kept),
    and a stepwise plan's next request that text and the step written."""
    peer.texts = ["go_to(fridge)\n", "open(fridge)"]
    planner = planners(peer.url, flavor="sglang")
    _, gen, _ = run(planner)
    assert gen.report["served_by"] == "remote" and gen.report["remote"]["requests"] == 2
    first, second = (r["body"] for r in peer.requests[-2:])
    assert not router_refusals(first) and not router_refusals(second), (router_refusals(first), router_refusals(second))
    text = planner.engine.tokenizer.decode(gen.prompt_ids, skip_special_tokens=False)
    assert first["prompt"] == text and second["prompt"] == text + "go_to(fridge)\n"
    assert first["ebnf"].startswith("root ::= ") and "structured_outputs" not in first
    # the chat template once: the planner's messages and one generation prompt, nothing wrapped around them
    messages = planner.messages(TASK)
    assert text == planner.engine.chat_text(messages)
    assert text.count("<|im_start|>") == len(messages) + 1 and text.endswith("<|im_start|>assistant\n")
    # the text is lossless (the server's tokenizer, the robot's, reads back this very text); its ids may differ
    # from the planner's where the planner joined parts it encoded apart (the state block's "\n\n" before the
    # task: one token there, two when the whole text is encoded), which is why `ids` stays the default
    again = planner.engine.encode(text)
    assert planner.engine.tokenizer.decode(again, skip_special_tokens=False) == text
    assert abs(len(again) - len(gen.prompt_ids)) <= 2 and again[:len(planner.prefix.ids)] == list(planner.prefix.ids)


@pytest.mark.parametrize("flavor,prompt,as_text", [("vllm", "text", True), ("sglang", "ids", False),
                                                   ("vllm", "auto", False), ("trtllm", "auto", False)])
def test_the_prompt_form_is_chosen_apart_from_the_grammar_field(peer, planners, flavor, prompt, as_text):
    """A vLLM behind SGLang's router: the text prompt with vLLM's grammar field (and the other way round)."""
    planner = planners(peer.url, flavor=flavor, prompt=prompt, plans="whole")
    _, gen, _ = run(planner)
    sent = peer.requests[-1]["body"]
    assert sent["prompt"] == (planner.engine.tokenizer.decode(gen.prompt_ids) if as_text else gen.prompt_ids)
    assert ("structured_outputs" in sent) is (flavor == "vllm")


def test_the_daemon_option_chooses_the_prompt_form():
    p = argparse.ArgumentParser()
    add_arguments(p)
    given = ["--engine", "e", "--remote", "http://127.0.0.1:8000"]
    assert DaemonConfig.from_options(vars(p.parse_args(given)), {}).remote_settings().text_prompt is False
    s = DaemonConfig.from_options(vars(p.parse_args([*given, "--remote-flavor", "sglang"])), {}).remote_settings()
    assert (s.prompt, s.text_prompt) == ("auto", True)
    s = DaemonConfig.from_options(vars(p.parse_args([*given, "--remote-prompt", "text"])), {}).remote_settings()
    assert (s.flavor, s.text_prompt) == ("vllm", True)
    with pytest.raises(SystemExit):
        p.parse_args([*given, "--remote-prompt", "tokens"])
    with pytest.raises(OrinError, match="--remote-prompt"):
        RemoteSettings("http://127.0.0.1:1", prompt="tokens")
