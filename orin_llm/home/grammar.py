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

from ..environment import Environment
from ..errors import OrinError

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
