"""An action call as the planner writes it, ``go_to(kitchen)``: read from a plan line (a list
marker in front, quoted arguments) and written back canonically, the way the home's examples are
rendered and the plan grammar (planning/home/grammar.py) accepts it."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# Optional list marker in front of a step: "1.", "2)", "Step 3:", "-", "*", "•".
_MARKER_RE = re.compile(r"^(?:(?:step\s*)?\d+\s*[.):]|[-*•+])\s*", re.IGNORECASE)
_CALL_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\s*\((.*)\)\s*[.;,]?$")


@dataclass
class Step:
    """One action call of a plan; `types` (the action's argument types, when known) quote its text
    arguments when it is written back."""

    action: str
    args: list[str] = field(default_factory=list)
    types: list[str] = field(default_factory=list, compare=False, repr=False)

    def __str__(self) -> str:
        return format_call(self.action, self.args, self.types or None)

    def as_dict(self) -> dict:
        return {"action": self.action, "args": list(self.args)}


def _quote(arg: str) -> str:
    plain = arg and arg == arg.strip() and not any(c in arg for c in ",()") and arg[0] not in "\"'"
    if plain:
        return arg
    return f"'{arg}'" if '"' in arg else f'"{arg}"'


def format_call(action: str, args: list[str], types: list[str] | None = None) -> str:
    """Render an action call canonically: ``place(mug, sink)``; with the action's argument types,
    a text argument is always quoted (``say("The tv is off")``), as the plan grammar writes it."""
    types = types or [""] * len(args)
    quoted = [_quote_text(a) if t == "text" else _quote(a) for a, t in zip(args, types, strict=True)]
    return f"{action}({', '.join(quoted)})"


def _quote_text(arg: str) -> str:
    return f'"{arg}"' if '"' not in arg else f"'{arg}'"


def _split_args(s: str) -> list[str] | None:
    """Split call arguments on commas, honouring "..." / '...' quoting; None if malformed."""
    s = s.strip()
    if not s:
        return []
    args: list[str] = []
    i, n = 0, len(s)
    while True:
        while i < n and s[i].isspace():
            i += 1
        if i < n and s[i] in "\"'":
            q = s[i]
            end = s.find(q, i + 1)
            if end < 0:
                return None
            token = s[i + 1 : end]
            i = end + 1
            while i < n and s[i].isspace():
                i += 1
            if i < n and s[i] != ",":
                return None
        else:
            start = i
            while i < n and s[i] != ",":
                if s[i] in "()":
                    return None
                i += 1
            token = s[start:i].strip()
            if not token:
                return None
        args.append(token)
        if i >= n:
            return args
        i += 1  # skip the comma
        if i >= n:
            return None  # trailing comma


def parse_call(line: str) -> tuple | None:
    """``'  2. pick(mug)'`` -> ``('pick', ['mug'])``; None when the line is not a call."""
    s = line.strip()
    s = _MARKER_RE.sub("", s, count=1).strip().strip("`").strip()
    m = _CALL_RE.match(s)
    if not m:
        return None
    args = _split_args(m.group(2))
    if args is None:
        return None
    return m.group(1), args
