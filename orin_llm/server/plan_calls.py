"""A plan returned as OpenAI tool calls: when every function a chat answer may call is an action of
the home (same name, one string argument per action argument), its calls are steps of a plan, and
they are held to the home's state as /v1/plan's steps are.

An answer that must call is also narrowed while decoded, as /v1/plan's steps are
(server/call_narrowing.py); one that may be text is not, and only this check holds it. Each
complete call is simulated (planning/home/world.py, from the home's current state): `feasibility`
"enforce" (the default) ends the calls at the first one whose preconditions do not hold (it and the
calls after it are not returned, a streamed answer holds each call back until it is complete and
checked); "report" returns every call and lists the violations; "off" checks nothing. The answer
carries `violations` either way (an extension field, as `timings`).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    from ..planning.home import Environment
    from ..planning.home.world import Violation, World
    from .structured import Answer
    from .tool_calls import Call


def plan_tools(answer: Answer, env: Environment) -> bool:
    """Whether the calls the answer may make are steps of the home: each function an action of it
    taking as many arguments as the action, and an argument that lists its values (`enum`) lists
    only things of the home of the action's argument type (a go_to whose enum names rooms of some
    other home is not this home's go_to)."""
    if env.is_text or not answer.functions:
        return False
    for _, fn in answer.functions:
        action = env.action(fn.name)
        props = (fn.parameters or {}).get("properties", {})
        if action is None or not isinstance(props, dict) or len(props) != len(action.args):
            return False
        for schema, kind in zip(props.values(), action.args, strict=True):
            values = schema.get("enum") if isinstance(schema, dict) else None
            if kind != "text" and isinstance(values, list) and not set(values) <= set(env.names(kind)):
                return False
    return True


def call_step(call: Call) -> tuple[str, tuple[str, ...]]:
    """A complete call as a step: its arguments' values in the order written (the grammar writes
    a schema's properties in order); a value that is not a string is kept as its JSON."""
    args: Any = json.loads(call.arguments)
    values = args.values() if isinstance(args, dict) else ()
    return call.name, tuple(v if isinstance(v, str) else json.dumps(v) for v in values)


class CheckedCalls:
    """Runs complete calls through the simulator in order: `take(call)` says whether the call may
    be returned; under enforce the first violation ends the calls."""

    def __init__(self, world: World, feasibility: str):
        self.world, self.feasibility = world, feasibility
        self.violations: list[Violation] = []
        self.checked = 0  # calls seen

    @property
    def ended(self) -> bool:
        return self.feasibility == "enforce" and bool(self.violations)

    def take(self, call: Call) -> bool:
        if self.ended:
            return False
        index, self.checked = self.checked, self.checked + 1
        action, args = call_step(call)
        violation = self.world.check(action, args, index=index)
        if violation is None:
            self.world = self.world.apply(action, args)
            return True
        self.violations.append(violation)
        return self.feasibility == "report"


def checked_message(message: dict, finish_reason: str, calls: list[Call],
                    checker: Optional[CheckedCalls]) -> tuple[dict, str, list[dict]]:
    """An answer's message with the calls the checker lets through (jobs.answer_message made it), its
    finish_reason, and the violations found."""
    if checker is None or "tool_calls" not in message:
        return message, finish_reason, []
    kept = [c.as_dict() for c in calls if checker.take(c)]
    out = {k: v for k, v in message.items() if k != "tool_calls"}
    if kept:
        out["tool_calls"] = kept
    elif finish_reason == "tool_calls":
        finish_reason = "stop"  # no call left to make: the violations say why
    return out, finish_reason, [v.as_dict() for v in checker.violations]
