"""Tool calls that are steps of the home, narrowed while they are decoded: /v1/plan's feasibility
constraint (planning/feasibility.py) over the tool-call format instead of plan lines.

An answer that must call (tool_choice "required" or a named function) is, line by line,
`<tool_call>`, one call's compact JSON, `</tool_call>`, and so on (server/tool_calls.py writes the
format, server/structured.py its grammar). The runtime's `FeasibleConstraint` checks each line
against the lines a simulated world allows; here those are the two tags, which change nothing, and
the JSON of every call whose preconditions hold: `{"name": "pick", "arguments": {"object": "mug"}}`,
the action's arguments under the function's parameter names, in the order of its schema's
properties (the order the grammar writes them in). A function with a text argument is left to the
grammar and checked by the simulator once its line is complete, as `say("...")` is in a plan.

An answer that may also be text (tool_choice "auto") is not narrowed (its first bytes decide which
it is, and a text answer has no steps): its calls are checked once complete (server/plan_calls.py).
"""

from __future__ import annotations

import itertools
import json
from typing import TYPE_CHECKING

from ..planning.feasibility import StepSet, StepSets
from .tool_calls import CLOSE, HEAD, MID, OPEN

if TYPE_CHECKING:
    from ..planning.home import Environment
    from .structured import Answer

TAGS = (OPEN.strip().encode(), CLOSE.strip().encode())  # b"<tool_call>", b"</tool_call>": lines of their own


def call_line(name: str, params: list[str], args: tuple[str, ...]) -> bytes:
    """One call's line, as the grammar writes it (compact JSON: ", " and ": ")."""
    arguments = json.dumps(dict(zip(params, args, strict=True)), ensure_ascii=False, separators=(", ", ": "))
    return f"{HEAD}{name}{MID}{arguments}}}".encode()


class CallSets(StepSets):
    """StepSets whose lines are tool-call lines: made per simulated world, as the plan's are."""

    def __init__(self, env: Environment, answer: Answer):
        super().__init__(env)
        # function name -> its parameter names, in schema order (plan_tools checked they match the action)
        self.params = {fn.name: list((fn.parameters or {}).get("properties", {})) for _, fn in answer.functions}

    def _make(self, world) -> StepSet:
        lines: set[bytes] = set(TAGS)
        heads: list[bytes] = []
        for name, params in self.params.items():
            action = self.env.action(name)
            assert action is not None  # plan_tools
            if "text" in action.args:
                heads.append(f"{HEAD}{name}{MID}".encode())  # the grammar writes the text; checked when complete
                continue
            tuples = world.feasible(name)
            if tuples is None:  # every tuple can run
                tuples = _every(self.env, action.args)
            lines.update(call_line(name, params, args) for args in tuples)
        prefixes = {line[:i] for line in lines for i in range(len(line) + 1)}
        prefixes |= {h[:i] for h in heads for i in range(len(h) + 1)}
        return StepSet(frozenset(lines), frozenset(prefixes), tuple(heads))

    def changes(self, line: bytes) -> bool:
        return line not in TAGS

    def after(self, world, line: bytes):
        """The world after one line: a tag changes nothing; a call runs if its preconditions hold."""
        if line in TAGS:
            return world
        s = self.of(world)
        if line not in s.lines and not any(line.startswith(h) for h in s.open_heads):
            return None
        try:
            call = json.loads(line)
            args = tuple(v if isinstance(v, str) else json.dumps(v) for v in call["arguments"].values())
            name = call["name"]
        except (ValueError, KeyError, TypeError, AttributeError):
            return None
        if world.check(name, args) is not None:
            return None
        return world.apply(name, args)


def _every(env: Environment, types: list[str]) -> list[tuple[str, ...]]:
    return list(itertools.product(*[env.names(t) for t in types]))
