"""OpenAI structured outputs and tool calls on /v1/chat/completions: what a chat answer must be, as a
grammar the runtime decodes under (runtime/constraint.py), compiled once per distinct request shape.

- `response_format` `{"type": "json_object"}`: the content is a JSON object; `{"type": "json_schema",
  "json_schema": {"name", "schema"}}`: JSON that validates against the schema; `{"type": "text"}` (the
  default): free text.
- `tools` with `tool_choice`: "required" or `{"type": "function", "function": {"name"}}`: the answer is
  calls only (of any given function, or of that one), each with arguments that validate against the
  function's `parameters`; "auto" (the default with tools): the answer is either a text answer (or the
  response_format's JSON) or calls, never both, and the model decides with its first bytes: an answer
  that begins with `<tool_call>` is held to the call grammar from there on, and a text answer cannot
  contain that tag; "none": no calls (the tools are still shown to the model, as vLLM does).
  `parallel_tool_calls: false` allows one call, otherwise up to MAX_PARALLEL_CALLS.

The grammar is llguidance's Lark with each JSON schema inlined (`%json`), the calls written in the
format of server/tool_calls.py. JSON is compact (", " and ": ", no other whitespace): a small model
given free whitespace may write newlines until max_tokens, and one way to write it gives the lookup
drafter and jump-forward more to work with. A schema's own "x-guidance" options still apply on top.
The schema is not put into the prompt (as with OpenAI's json_object and vLLM): say in the messages
what the answer is for.

Compiling takes milliseconds, but a robot sends the same schema over and over, so compiled grammars
are kept in a small LRU keyed by their Lark text, in which each schema appears as its compact JSON
(key order kept: it is the order the properties are written in). Only the engine's thread touches it.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Optional

from ..errors import OrinError
from ..runtime.backend import Backend
from ..runtime.constraint import Grammar
from .errors import RequestError
from .schemas import ChatRequest, FunctionDef
from .tool_calls import CLOSE, HEAD, MAX_PARALLEL_CALLS, MID, OPEN, SEP, function_schema

COMPACT = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
# a text answer when calls are allowed: anything without the call tag (jump to the calls with it)
TEXT = "TEXT: /(?s:.*)/ & ~/(?s:.*<tool_call>.*)/"


def compact(schema: dict) -> dict:
    """The schema with our JSON layout as its defaults (llguidance's "x-guidance" options)."""
    own = schema.get("x-guidance", {})
    return {**schema, "x-guidance": {**COMPACT, **own}} if isinstance(own, dict) else schema


def canonical(schema: dict) -> str:
    return json.dumps(compact(schema), ensure_ascii=False, separators=(",", ":"))


def inline(schema: dict) -> str:
    return "%json " + canonical(schema)


@dataclass(frozen=True)
class Answer:
    """What a chat answer must be."""

    content: Optional[dict]  # the JSON schema of a content answer; None: free text
    content_what: str  # where that schema came from, for errors
    functions: tuple[tuple[str, FunctionDef], ...]  # (where it came from, the function) the answer may call
    tools: tuple[tuple[str, FunctionDef], ...]  # every function given (their schemas are checked)
    calls: Literal["never", "may", "must"]
    parallel: bool = True

    @property
    def constrained(self) -> bool:
        return self.content is not None or self.calls != "never"

    @property
    def parser_mode(self) -> Optional[str]:
        """How tool_calls.CallParser reads the answer (None: it is plain content)."""
        return {"never": None, "may": "either", "must": "calls"}[self.calls]

    def schemas(self) -> list[tuple[str, dict]]:
        """Each JSON schema of the request, with where it came from."""
        out = [(self.content_what, self.content)] if self.content is not None else []
        return out + [(f"{where}.parameters", function_schema(fn)) for where, fn in self.tools]

    def lark(self) -> Optional[str]:
        """The answer's grammar (llguidance's Lark), None when the answer is free text."""
        if not self.constrained:
            return None
        rules = [f"content: {inline(self.content)}"] if self.content is not None else []
        if self.calls == "never":
            return "\n".join(["start: content", *rules]) + "\n"
        if self.calls == "must":
            start = "start: calls"
        else:
            start = "start: content | calls" if self.content is not None else "start: TEXT | calls"
            if self.content is None:
                rules.append(TEXT)
        more = f" ({json.dumps(SEP)} call){{0,{MAX_PARALLEL_CALLS - 1}}}" if self.parallel else ""
        rules += [f"calls: call{more}", f"call: {json.dumps(OPEN)} fn {json.dumps(CLOSE)}",
                  "fn: " + " | ".join(f"fn_{i}" for i in range(len(self.functions)))]
        for i, (_, fn) in enumerate(self.functions):
            rules += [f"fn_{i}: {json.dumps(HEAD + fn.name + MID)} args_{i} \"}}\"",
                      f"args_{i}: {inline(function_schema(fn))}"]
        return "\n".join([start, *rules]) + "\n"


def answer_of(req: ChatRequest) -> Answer:
    """The request's answer shape; RequestError(422) for combinations that make no sense."""
    fmt = req.response_format
    content, content_what = None, ""
    if fmt is not None and fmt.type == "json_object":
        content, content_what = {"type": "object"}, "response_format (json_object)"
    elif fmt is not None and fmt.json_schema is not None:
        content, content_what = fmt.json_schema.schema_, "response_format.json_schema.schema"
    if not req.tools:
        for name in ("tool_choice", "parallel_tool_calls"):
            if getattr(req, name) is not None:
                raise RequestError(422, f"{name}: only with tools; give the functions the answer may call, "
                                        f"or omit {name}")
        return Answer(content, content_what, (), (), "never")
    tools = tuple((f"tools.{i}.function", t.function) for i, t in enumerate(req.tools))
    names = [fn.name for _, fn in tools]
    for name in names:
        if names.count(name) > 1:
            raise RequestError(422, f"tools: two functions are named {name!r}; give each function its own name")
    choice = req.tool_choice if req.tool_choice is not None else "auto"
    if not isinstance(choice, str):
        name = choice.function.name
        if name not in names:
            raise RequestError(422, f"tool_choice names function {name!r}, which is not in tools "
                                    f"({', '.join(names)}); name one of them")
        functions = tuple(t for t in tools if t[1].name == name)
    else:
        functions = tools if choice != "none" else ()
    forced = not isinstance(choice, str) or choice == "required"
    if forced and content is not None:
        what = "a named tool_choice" if not isinstance(choice, str) else 'tool_choice "required"'
        raise RequestError(422, f"response_format {fmt.type if fmt else ''} and {what} together: a forced call "
                                "answers with tool_calls, never with content; drop one, or use tool_choice "
                                '"auto" (the answer is then the JSON or a call)')
    calls = "must" if forced else "may" if choice == "auto" else "never"
    return Answer(content, content_what, functions, tools, calls, req.parallel_tool_calls is not False)


class GrammarCache:
    """Compiled grammars by their Lark text, least recently used dropped first."""

    def __init__(self, size: int = 64):
        self.size = size
        self._lru: OrderedDict[str, Grammar] = OrderedDict()
        self.hits = self.compiled = 0

    def get(self, key: str, build: Callable[[], Grammar]) -> Grammar:
        grammar = self._lru.get(key)
        if grammar is not None:
            self._lru.move_to_end(key)
            self.hits += 1
            return grammar
        grammar = build()  # GrammarError (a 422) says why
        self.compiled += 1
        self._lru[key] = grammar
        while len(self._lru) > self.size:
            self._lru.popitem(last=False)
        return grammar

    def for_answer(self, answer: Answer, engine: Backend) -> Optional[Grammar]:
        """The answer's compiled grammar (None: free text). Each of the request's schemas is compiled
        alone first, so that an error names the one that does not compile."""
        schemas = answer.schemas()
        if not schemas and not answer.constrained:
            return None
        if not engine.capabilities.grammars:
            if not answer.constrained:
                return None  # tools shown, no call possible: nothing to check them with, nothing to constrain
            raise OrinError(f"this {engine.manifest.backend} engine cannot constrain a chat answer yet "
                            "(response_format, tool calls); send the request without them")
        vocab = engine.vocabulary()
        compiled = [self.get(canonical(schema), lambda s=schema, w=what: Grammar.json_schema(vocab, compact(s), w))
                    for what, schema in schemas]
        if answer.calls == "never" and answer.content is not None:
            return compiled[0]  # the content's schema alone is the answer's grammar
        text = answer.lark()
        return self.get(text, lambda: Grammar.lark(vocab, text, "the answer's grammar")) if text else None
