"""The grammar of a plan for one home, in llguidance's Lark dialect.

A plan is one action call per line: the action is one of the home's actions, and each argument is
a name of the type the action declares (environment.ARG_TYPES): `place` one of the home's rooms or
places, `object` one of its objects, `device` one of its switchable things, `text` a bounded
quoted string. At most `max_steps` lines, then the end of the turn (the tokenizer's EOS, which the
grammar library allows once the plan is complete). Arguments are separated by ", " exactly as the
home's examples are rendered (environment.format_call), so the model sees one way to write a call.

Compiled once per environment version (runtime/constraint.py Grammar, in the planner), never per
request.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Optional

from ...errors import OrinError
from . import Environment

MAX_STEPS = 32
MAX_TEXT = 80  # characters of a text argument


def _alt(names: list[str]) -> str:
    return " | ".join(json.dumps(n) for n in names)


def plan_grammar(env: Environment, max_steps: int = MAX_STEPS, max_text: int = MAX_TEXT) -> str:
    """Lark text for `env`'s plans; OrinError naming what cannot be expressed."""
    if env.is_text:
        raise OrinError(f"environment {env.name!r} is plain text: it declares no actions to constrain a plan to; "
                        "give rooms and actions, or send \"constrained\": false")
    kinds = sorted({t for a in env.actions for t in a.args if t != "text"})
    rules = []
    for kind in kinds:
        names = list(dict.fromkeys(env.names(kind)))
        if not names:
            users = [a.name for a in env.actions if kind in a.args]
            article = "an" if kind[0] in "aeiou" else "a"
            raise OrinError(f"environment {env.name!r}: action {users[0]} takes {article} {kind}, but the home has no "
                            f"{kind}s; add {kind}s to a room or remove the action")
        rules.append(f"{kind}: {_alt(names)}")
    steps = []
    for a in env.actions:
        args = ' ", " '.join(a.args)
        steps.append(f'"{a.name}(" {args} ")"' if a.args else f'"{a.name}()"')
    lines = [
        f'start: step ("\\n" step){{0,{max_steps - 1}}} "\\n"?',  # a trailing newline may end the plan
        "step: " + " | ".join(steps),
        *rules,
        "text: TEXT",
        f'TEXT: /"[^"\\n]{{1,{max_text}}}"/',
    ]
    return "\n".join(lines) + "\n"


def step_lark(env: Environment, lines: Iterable[bytes], open_heads: Iterable[bytes], first: bool,
              last: bool) -> Optional[str]:
    """Lark for one step: one of `lines` (whole calls) or an action begun by one of `open_heads`
    ("say(", its arguments left to the grammar), then a newline or the end of the plan; after the first
    step the plan may also end at once. None when there is no step to write. A remote engine asked one
    step per request gets this (planning/feasibility.py StateSteps)."""
    alts = [json.dumps(line.decode()) for line in sorted(lines)]
    kinds: set[str] = set()
    for head in open_heads:
        name, written = head.decode().split("(", 1)
        action = env.action(name)
        rest = action.args[written.count(", "):]  # the arguments after the head's ("say(": all of them)
        kinds.update(rest)
        alts.append(" ".join([json.dumps(head.decode()), *([' ", " '.join(rest)] if rest else []), '")"']))
    if not alts:
        return None
    one = "step" if last else 'step "\\n"?'
    out = [f"start: {one}" if first else f"start: ({one})?", "step: " + " | ".join(alts)]
    out += [f"{kind}: " + " | ".join(json.dumps(n) for n in dict.fromkeys(env.names(kind)))
            for kind in sorted(kinds - {"text"})]
    if "text" in kinds:
        out += ["text: TEXT", f'TEXT: /"[^"\\n]{{1,{MAX_TEXT}}}"/']
    return "\n".join(out) + "\n"
