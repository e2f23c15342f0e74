"""The request body of each OpenAI-compatible engine (`--remote-flavor`), where their fields differ.

All three engines take /v1/completions with the prompt as token ids or as text, `stream` with
`stream_options.include_usage`, and report prefix hits as `usage.prompt_tokens_details.cached_tokens`.
The prompt goes as the planner's token ids (`--remote-prompt ids`: nothing is re-tokenized differently
there) except where a router in between takes text only (`text`: the same ids decoded with the robot's
own tokenizer, special tokens kept, so the chat template the planner applied is in it once and the
server applies none: /v1/completions takes the prompt as given). SGLang's router is such a router:
its CompletionRequest (sgl-project/sglang 1c69b16, sgl-model-gateway/src/protocols/completion.rs: the
`smg` crate sglang-router 0.3.2's binary is built from) declares `prompt: StringOrArray`, a string or a list
of strings (protocols/common.rs, `#[serde(untagged)] enum StringOrArray`), and answers token ids with a
422; so `auto`, the default, sends text for `sglang` and ids for the others. The router forwards what
it does not declare (`#[serde(flatten)] other`) to the worker, and routes cache-aware on the prompt's
text (`extract_text_for_routing`). Where the engines differ is where the grammar goes and in which
grammar language:

- `vllm` (vllm/entrypoints/openai/protocol.py, 0.32): `structured_outputs: {"grammar": <text>}`, EBNF or
  Lark (Lark is converted for xgrammar, or read as is by the guidance backend); the home's Lark goes as is.
  The older `guided_grammar` field is ignored with only a warning.
- `sglang` (python/sglang/srt/entrypoints/openai/protocol.py, CompletionRequest): a top-level `ebnf`
  (or `regex`, `json_schema`), one constraint per request, in xgrammar's EBNF (GBNF: `root ::= ...`),
  the default grammar backend; the cached-token count is sent only with `--enable-cache-report`. Its
  `prompt: Union[List[int], List[List[int]], str, List[str]]` takes the text as it takes the ids.
- `trtllm` (trtllm-serve, tensorrt_llm/serve/openai_protocol.py, CompletionRequest): `response_format:
  {"type": "ebnf", "ebnf": <GBNF>}` (or `regex`, `json`, `json_schema`, `structural_tag`), honoured only
  when the server's YAML config sets `guided_decoding_backend: xgrammar`; the request model forbids
  unknown fields, so nothing else may ride along.
- `edgellm` (TensorRT Edge-LLM 0.11's `tensorrt-edgellm-serve`, experimental/server/api/protocol.py and
  routes.py of the 0.11.0 wheel): /v1/chat/completions only, its request model forbids unknown fields
  (protocol.py L33-34). The prompt goes as the text of the planner's ids (special tokens kept) in one user
  message with `apply_chat_template: false` and `add_generation_prompt: false` (protocol.py L86-87), so
  its own chat template (a JSON rendering of the Jinja one) is not applied a second time; whether the
  runtime reads the special tokens' text back as those tokens is for the device to show: the backend
  compares the server's `usage.prompt_tokens` with the planner's count (backends/edgellm/request.py). The
  grammar goes as `guided_decoding: {"ebnf": <GBNF>}` (protocol.py L83; `response_format` reaches JSON
  only: serving_chat.py L120-131). Its usage has no cached-token count (protocol.py L166-169).

`gbnf(lark)` rewrites the plan grammars planning/home/grammar.py and stepwise.py write (rules of literals,
references, groups, alternatives, `?`/`*`/`+`/`{m,n}`, and one regex terminal of characters and
character classes) into GBNF; anything else is refused with what it could not convert.
"""

from __future__ import annotations

import json
import re
from typing import Any, Optional, Union

from ...errors import OrinError

FLAVORS = ("vllm", "sglang", "trtllm", "edgellm")
PROMPTS = ("auto", "ids", "text")  # --remote-prompt (module doc)


def sends_text(flavor: str, prompt: str) -> bool:
    """Whether the prompt goes as text (module doc: `auto` is text for SGLang, whose router takes only text;
    Edge-LLM's chat messages are text whatever is asked)."""
    return flavor == "edgellm" or prompt == "text" or (prompt == "auto" and flavor == "sglang")


def route(flavor: str) -> str:
    """The path a completion is posted to: Edge-LLM's server has chat completions only (module doc)."""
    return "/v1/chat/completions" if flavor == "edgellm" else "/v1/completions"


def choice_text(flavor: str, choice: dict) -> str:
    """A streamed choice's new text: a chat chunk's `delta.content` (absent in its first, role-only chunk),
    a completion chunk's `text`. TypeError for anything else (the client says the chunk is malformed)."""
    if flavor == "edgellm":
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            raise TypeError("a chat choice without a delta")
        text = delta.get("content") or ""
    else:
        text = choice.get("text")
    if not isinstance(text, str):
        raise TypeError("a choice without text")
    return text


def completion_body(flavor: str, prompt: Union[list[int], str], max_tokens: int, temperature: float, top_p: float,
                    seed: Optional[int], stop: list[str], lark: Optional[str]) -> dict[str, Any]:
    """The /v1/completions body (without `model`) for `flavor`: the prompt as given (token ids or its
    text), the grammar (Lark text) in the engine's field."""
    body: dict[str, Any] = {"prompt": prompt if isinstance(prompt, str) else list(prompt),
                            "max_tokens": max_tokens, "temperature": temperature,
                            "top_p": top_p, "stream": True, "stream_options": {"include_usage": True}}
    if flavor == "edgellm":  # a chat completion whose one message is the prompt, taken as it is (module doc)
        if not isinstance(prompt, str):
            raise OrinError("the Edge-LLM server takes the prompt as text (chat messages), not token ids")
        body.pop("prompt")
        body.update(messages=[{"role": "user", "content": prompt}], apply_chat_template=False,
                    add_generation_prompt=False)
        if temperature == 0:  # its greedy (serving_chat.py sets top_p 1, top_k 1): top_p must be in (0, 1]
            body["top_p"] = 1.0
    if seed is not None:
        body["seed"] = seed
    if stop:
        body["stop"] = list(stop)
    if lark is None:
        return body
    if flavor == "vllm":
        body["structured_outputs"] = {"grammar": lark}
    elif flavor == "sglang":
        body["ebnf"] = gbnf(lark)
    elif flavor == "trtllm":
        body["response_format"] = {"type": "ebnf", "ebnf": gbnf(lark)}
    elif flavor == "edgellm":
        body["guided_decoding"] = {"ebnf": gbnf(lark)}
    else:
        raise OrinError(f"--remote-flavor {flavor!r}: one of {', '.join(FLAVORS)}")
    return body


_TOKEN = re.compile(r'\s+|"(?:[^"\\]|\\.)*"|/(?:[^/\\]|\\.)+/|\{\d+(?:,\d*)?\}|[A-Za-z_][A-Za-z0-9_]*|[()|?*+]')


def gbnf(lark: str) -> str:
    """The Lark plan grammar as GBNF (module doc): `start` becomes `root`, terminals become rules."""
    out = []
    for number, line in enumerate(lark.splitlines(), 1):
        if not line.strip():
            continue
        name, sep, body = line.partition(":")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name.strip()):
            raise OrinError(f"grammar line {number} is not a rule (name: body): {line[:80]!r}")
        out.append(f"{_name(name.strip())} ::= {_body(body, number)}")
    return "\n".join(out) + "\n"


def _name(name: str) -> str:
    if name == "start":
        return "root"
    return ("tok-" + name.lower() if name.isupper() else name).replace("_", "-")  # a terminal TEXT: tok-text


def _body(body: str, number: int) -> str:
    parts, at = [], 0
    while at < len(body):
        m = _TOKEN.match(body, at)
        if m is None:
            raise OrinError(f"grammar line {number}: cannot convert {body[at:at + 20]!r} to GBNF")
        tok, at = m.group(0), m.end()
        if tok.isspace():
            continue
        if tok.startswith('"'):
            parts.append(json.dumps(json.loads(tok)))  # GBNF's escapes are JSON's for these literals
        elif tok.startswith("/"):
            parts.append(_regex(tok[1:-1], number))
        elif tok[0].isalpha() or tok[0] == "_":
            parts.append(_name(tok))
        else:
            parts.append(tok)
    return _join(parts)


def _join(parts: list[str]) -> str:
    """Space-separated, but a quantifier or `)` sticks to what it follows and `(` to what follows it."""
    out = ""
    for p in parts:
        if out and not (p[0] in ")?*+" or p.startswith("{") or out.endswith("(")):
            out += " "
        out += p
    return out


_REGEX_ATOM = re.compile(r"\[(?:[^\]\\]|\\.)+\]|\\.|\{\d+(?:,\d*)?\}|[?*+]|[^\[\]\\{}()|.^$]")


def _regex(regex: str, number: int) -> str:
    """A regex of characters, classes and quantifiers as a GBNF sequence."""
    parts, at = [], 0
    while at < len(regex):
        m = _REGEX_ATOM.match(regex, at)
        if m is None:
            raise OrinError(f"grammar line {number}: regex {regex!r} has what GBNF conversion does not handle "
                            f"at {regex[at:at + 10]!r}")
        tok, at = m.group(0), m.end()
        if tok.startswith("[") or tok[0] in "?*+{":
            parts.append(tok)
        elif tok.startswith("\\"):
            parts.append(json.dumps({"n": "\n", "t": "\t", "r": "\r"}.get(tok[1], tok[1])))
        else:
            parts.append(json.dumps(tok))
    return "(" + _join(parts) + ")"
