"""The request body for each engine (runtime/remote/flavors.py) against the fields their OpenAI servers
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
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess

import pytest

from orin_llm.environment import EXAMPLE_HOME_PATH, load_environment
from orin_llm.errors import OrinError
from orin_llm.home.grammar import plan_grammar
from orin_llm.runtime.constraint import Grammar
from orin_llm.runtime.remote.flavors import completion_body, gbnf
from orin_llm.server.config import DaemonConfig, add_arguments

from .vllm_replica import vllm_python

LARK = plan_grammar(load_environment(EXAMPLE_HOME_PATH))
# the fields of each server's CompletionRequest (module doc) that a plan request may use
SGLANG_FIELDS = {"model", "prompt", "max_tokens", "temperature", "top_p", "stream", "stream_options", "seed", "stop",
                 "ebnf", "regex", "json_schema"}
TRTLLM_FIELDS = {"model", "prompt", "max_tokens", "temperature", "top_p", "stream", "stream_options", "seed", "stop",
                 "response_format"}
TRTLLM_FORMAT = {"type", "schema", "json_schema", "regex", "ebnf", "format"}  # its ResponseFormat


def body(flavor: str, lark=LARK) -> dict:
    return {"model": "m", **completion_body(flavor, [1, 2, 3], 32, 0.0, 1.0, 7, ["\n\n"], lark)}


def test_vllm_gets_the_lark_grammar_in_structured_outputs():
    b = body("vllm")
    assert b["structured_outputs"] == {"grammar": LARK} and "ebnf" not in b and "response_format" not in b
    assert b["prompt"] == [1, 2, 3] and b["stream_options"] == {"include_usage": True} and b["seed"] == 7


def test_sglang_gets_gbnf_in_its_top_level_ebnf_field():
    b = body("sglang")
    assert set(b) <= SGLANG_FIELDS, set(b) - SGLANG_FIELDS
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


@pytest.mark.full  # needs vLLM's venv (xgrammar): tests/remote/vllm_replica.py installs it or fails saying why
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
