"""Tool calls as text: how the model sees the tools, how it writes a call, and how the answer's text
becomes OpenAI's `tool_calls`.

One format throughout, the one Hermes-style chat templates use (Qwen2.5, Hermes 2 Pro, ...): each call
is a JSON object with the function's name and arguments between tags, one call per block,

    <tool_call>
    {"name": "go_to", "arguments": {"room": "kitchen"}}
    </tool_call>

and several calls follow each other on separate lines. The grammar (server/structured.py) writes
exactly these bytes, so parsing needs no guessing: `CallParser` reads them as they stream.

How the model sees the tools: a tokenizer whose chat template speaks this format (its text has
`<tool_call>`) gets them as `apply_chat_template(..., tools=...)`, with earlier calls and their
results in the shapes `transformers` templates expect. Any other template (the embedded SmolLM2's
has no tool support) gets our own rendering: the tools and the format in the system message,
earlier calls as the assistant's text, results as user turns in `<tool_response>` tags. Both are
deterministic: the same tools give the same prompt tokens, so the KV cache reuses them turn after
turn.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any, Optional

from .errors import RequestError
from .schemas import ChatMessage, FunctionDef, Tool

OPEN, CLOSE, SEP = "<tool_call>\n", "\n</tool_call>", "\n"
HEAD, MID = '{"name": "', '", "arguments": '  # a call's JSON up to its name, and from the name to the arguments
MAX_PARALLEL_CALLS = 8  # calls in one answer, when parallel calls are allowed

TOOLS_PROMPT = """# Tools

You can call the functions below. Each is given as JSON, with a JSON schema of its arguments:
<tools>
{tools}
</tools>

To call a function, write its name and arguments as one JSON object between <tool_call> and </tool_call> \
tags, one call per block:
<tool_call>
{{"name": "function_name", "arguments": {{"argument": "value"}}}}
</tool_call>
The result of each call comes back in <tool_response> tags. If no function is needed, answer in plain text."""


def template_speaks_tools(tokenizer: Any) -> bool:
    """Whether the tokenizer's chat template renders tools in this format (Hermes-style)."""
    template = getattr(tokenizer, "chat_template", None)
    texts = template.values() if isinstance(template, dict) else [template]
    return any(isinstance(t, str) and "<tool_call>" in t and "tools" in t for t in texts)


def function_schema(fn: FunctionDef) -> dict:
    """The JSON schema of a function's arguments (OpenAI: omitted parameters mean none)."""
    if fn.parameters is None:
        return {"type": "object", "properties": {}, "additionalProperties": False}
    return fn.parameters


def call_text(name: str, arguments: str) -> str:
    """One call block, as the grammar writes it; `arguments` is JSON text, kept as it was written
    (an earlier answer sent back renders to the same text, hence the same tokens)."""
    return f"{OPEN}{HEAD}{name}{MID}{arguments}}}{CLOSE}"


def chat_messages(messages: list[ChatMessage], tools: Optional[list[Tool]],
                  native: bool) -> tuple[list[dict], Optional[list[dict]]]:
    """(messages for apply_chat_template, its `tools` argument). `native`: the template renders tools
    itself (template_speaks_tools). A tool message must answer a call of an earlier assistant message
    (OpenAI's rule; RequestError 422 otherwise)."""
    calls: dict[str, str] = {}  # tool_call_id -> function name, from the assistant messages so far
    for i, m in enumerate(messages):
        for c in m.tool_calls or ():
            calls[c.id] = c.function.name
        if m.role == "tool" and m.tool_call_id not in calls:
            raise RequestError(422, f"messages.{i}: tool_call_id {m.tool_call_id!r} answers no tool call of an "
                                    "earlier assistant message; send the assistant message with that call first")
    declared = [t.model_dump(exclude_none=True) for t in tools] if tools else None
    if native:
        return [_native(m, calls) for m in messages], declared
    out: list[dict] = []
    for m in messages:
        role = "system" if m.role == "developer" else m.role
        if m.role == "tool":  # results go back as a user turn; consecutive ones share it
            block = f"<tool_response>\n{m.text()}\n</tool_response>"
            if out and out[-1].get("tool_results"):
                out[-1]["content"] += "\n" + block
            else:
                out.append({"role": "user", "content": block, "tool_results": True})
            continue
        text = m.text()
        if m.tool_calls:
            blocks = SEP.join(call_text(c.function.name, c.function.arguments) for c in m.tool_calls)
            text = f"{text}\n{blocks}" if text else blocks
        out.append({"role": role, "content": text})
    for m in out:
        m.pop("tool_results", None)
    if declared:
        listing = "\n".join(json.dumps(t, ensure_ascii=False) for t in declared)
        section = TOOLS_PROMPT.format(tools=listing)
        if out and out[0]["role"] == "system":
            out[0]["content"] = f"{out[0]['content']}\n\n{section}" if out[0]["content"] else section
        else:
            out.insert(0, {"role": "system", "content": section})
    return out, None


def _native(m: ChatMessage, calls: dict[str, str]) -> dict:
    """A message in the shape `transformers` chat templates read: a call's arguments as a mapping,
    a tool result with the name of the function it answers."""
    out: dict[str, Any] = {"role": "system" if m.role == "developer" else m.role, "content": m.text()}
    if m.tool_calls:
        out["tool_calls"] = [{"id": c.id, "type": "function",
                              "function": {"name": c.function.name, "arguments": json.loads(c.function.arguments)}}
                             for c in m.tool_calls]
    if m.role == "tool":
        out["tool_call_id"], out["name"] = m.tool_call_id, calls[m.tool_call_id or ""]
    return out


def call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


@dataclass
class Call:
    id: str
    name: str = ""
    arguments: str = ""
    complete: bool = False

    def as_dict(self) -> dict:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass
class CallParser:
    """Reads an answer's text as it streams: free text, or tool-call blocks (the grammar's bytes).

    `mode` "calls": the answer is calls only; "either": text or calls, decided by its first bytes (a
    prefix of `<tool_call>` waits for more). `feed` returns the delta the text adds, in the shape of
    an OpenAI stream chunk's `delta` (content, or tool_calls entries by index: the first with id and
    name, then pieces of the arguments), or None when there is nothing new to say yet."""

    mode: str  # "calls" or "either"
    text: str = ""
    calls: list[Call] = field(default_factory=list)
    is_calls: Optional[bool] = None  # None: not decided yet (mode "either")
    _pos: int = 0  # how far `text` has been read
    _depth: int = 0  # the arguments' JSON nesting, while reading them
    _in_string: bool = False
    _escape: bool = False
    _state: str = "open"  # open, name, mid, args, close, sep

    def __post_init__(self) -> None:
        if self.mode == "calls":
            self.is_calls = True

    def feed(self, delta: str) -> Optional[dict]:
        self.text += delta
        if self.is_calls is None:
            if self.text.startswith(OPEN):
                self.is_calls = True
            elif not OPEN.startswith(self.text):
                self.is_calls = False
                self._pos = len(self.text)
                return {"content": self.text}
            else:
                return None
        if not self.is_calls:
            self._pos = len(self.text)
            return {"content": delta} if delta else None
        return self._read()

    def finish(self) -> Optional[dict]:
        """The text still held back at the end: an undecided answer was text after all."""
        if self.is_calls is None:
            self.is_calls = False
            self._pos = len(self.text)
            return {"content": self.text} if self.text else None
        return None

    @property
    def content(self) -> Optional[str]:
        return None if self.is_calls else self.text

    @property
    def complete_calls(self) -> list[Call]:
        return [c for c in self.calls if c.complete]

    @property
    def truncated(self) -> bool:
        """The text ends inside a call (cut by max_tokens or a stop string)."""
        return bool(self.is_calls) and (not self.calls or not self.calls[-1].complete)

    def _read(self) -> Optional[dict]:
        entries: dict[int, dict] = {}
        t = self.text
        while self._pos < len(t):
            state = self._state
            if state in ("open", "mid", "close", "sep"):
                literal = {"open": OPEN + HEAD, "mid": MID, "close": "}" + CLOSE, "sep": SEP}[state]
                if len(t) - self._pos < len(literal):
                    break  # wait for the whole literal
                if not t.startswith(literal, self._pos):
                    raise ValueError(f"tool call text does not follow the format at {self._pos}: {t[self._pos:]!r}")
                self._pos += len(literal)
                if state == "open":
                    self.calls.append(Call(call_id()))
                self._state = {"open": "name", "mid": "args", "close": "sep", "sep": "open"}[state]
                if state == "close":
                    self.calls[-1].complete = True
            elif state == "name":
                end = t.find('"', self._pos)
                if end < 0:
                    break
                call, index = self.calls[-1], len(self.calls) - 1
                call.name = t[self._pos:end]
                entries[index] = {"index": index, "id": call.id, "type": "function",
                                  "function": {"name": call.name, "arguments": ""}}
                self._pos, self._state = end, "mid"
            else:  # args: JSON, read up to where its outermost object closes
                start = self._pos
                while self._pos < len(t) and self._state == "args":
                    self._scan(t[self._pos])
                    self._pos += 1
                piece = t[start:self._pos]
                call, index = self.calls[-1], len(self.calls) - 1
                call.arguments += piece
                entry = entries.setdefault(index, {"index": index, "function": {}})
                entry["function"]["arguments"] = entry["function"].get("arguments", "") + piece
        return {"tool_calls": list(entries.values())} if entries else None

    def _scan(self, ch: str) -> None:
        if self._in_string:
            if self._escape:
                self._escape = False
            elif ch == "\\":
                self._escape = True
            elif ch == '"':
                self._in_string = False
        elif ch == '"':
            self._in_string = True
        elif ch in "{[":
            self._depth += 1
        elif ch in "}]":
            self._depth -= 1
            if self._depth == 0:
                self._state = "close"


def parse_answer(text: str, mode: str) -> CallParser:
    """The whole answer's text, read at once (a non-streamed response)."""
    parser = CallParser(mode)
    parser.feed(text)
    parser.finish()
    return parser
