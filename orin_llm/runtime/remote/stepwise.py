"""A plan under the home's state, generated remotely one step per request (`--remote-plans stepwise`).

Locally, `feasibility: enforce` narrows the home's grammar at every token to the steps the state
simulated from the plan so far allows (runtime/feasibility.py). A remote engine takes a grammar text per
request, not a mask per token, so here each step is one request whose grammar is exactly the lines
feasible in the world after the steps before it: the same `StepSets` the local narrowing reads (made
once per world and home version), written as Lark alternatives. The prompt of step k is the plan's prompt
and the k steps written so far, so the engine's prefix cache holds all but the newest step's tokens.

The grammar of a step lets the model end the plan where the home's grammar does: after a step (the end
of the turn instead of a newline) or, after at least one step, at once. An action with a text argument
(`say`) is narrowed up to its text, as locally; the line is simulated once complete, and one the state
does not allow ends the call there: hedged.py's check refuses it (the local engine answers). The
answer's text is then checked by the same matcher as a whole-plan answer.

The other way, `whole`: one request with the home's grammar, the state checked here afterwards, and a
plan with a step that cannot run answered by the local engine. The GUIDE's site-server section has the
measurements behind the default.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Optional, Union

from ...environment import Environment
from ...home.grammar import MAX_STEPS, MAX_TEXT
from ..feasibility import FeasibleConstraint, StepSet, StepSets
from .client import RemoteCall, RemoteError


def stepwise_ok(constraint: Any) -> bool:
    """Whether a request's constraint is a plan's grammar narrowed by the home's state, at a step boundary
    (a chat's tool calls narrow by other sets: server/call_narrowing.py)."""
    return (isinstance(constraint, FeasibleConstraint) and type(constraint.sets) is StepSets
            and constraint.at_boundary and constraint.lark is not None)


def step_lark(env: Environment, steps: StepSet, first: bool, last: bool) -> Optional[str]:
    """Lark for one step among `steps` (None: no step can run), then a newline or the end of the plan;
    after the first step the plan may also end at once."""
    alts = [json.dumps(line.decode()) for line in sorted(steps.lines)]
    kinds: set[str] = set()
    for head in steps.open_heads:
        name, written = head.decode().split("(", 1)
        action = env.action(name)
        rest = action.args[written.count(", "):]  # the arguments after the head's ("say(": all of them)
        kinds.update(rest)
        alts.append(" ".join([json.dumps(head.decode()), *([' ", " '.join(rest)] if rest else []), '")"']))
    if not alts:
        return None
    one = "step" if last else 'step "\\n"?'
    lines = [f"start: {one}" if first else f"start: ({one})?", "step: " + " | ".join(alts)]
    lines += [f"{kind}: " + " | ".join(json.dumps(n) for n in dict.fromkeys(env.names(kind)))
              for kind in sorted(kinds - {"text"})]
    if "text" in kinds:
        lines += ["text: TEXT", f'TEXT: /"[^"\\n]{{1,{MAX_TEXT}}}"/']
    return "\n".join(lines) + "\n"


class StepwiseCall(RemoteCall):
    """A RemoteCall that asks one step per request (module doc); hedged.py races it like any other."""

    def __init__(self, *args: Any, constraint: FeasibleConstraint, encode: Callable[[str], list[int]], **kw: Any):
        super().__init__(*args, **kw)
        self.sets: StepSets = constraint.sets
        self.world = constraint.world
        self.encode = encode

    def _extended(self, written: str) -> Union[list[int], str]:
        """The plan's prompt and the steps written so far, in the prompt's own form (ids or text)."""
        if isinstance(self.prompt, str):
            return self.prompt + written
        return self.prompt + (self.encode(written) if written else [])

    def _call(self) -> None:
        env, world, written, left = self.sets.env, self.world, "", self.max_tokens
        for k in range(MAX_STEPS):
            if self.cancelled:  # between two steps: no next request
                raise RemoteError("cancelled", "cancelled")
            lark = step_lark(env, self.sets.of(world), first=k == 0, last=k == MAX_STEPS - 1)
            if lark is None:
                if k == 0:
                    raise RemoteError("no step of the home can run in its state", "infeasible")
                self.finish_reason = "stop"
                return
            before = self.usage["completion_tokens"]
            self._request(self.body(self._extended(written), left, lark))
            step, written = self.text[len(written):], self.text
            left -= max(1, self.usage["completion_tokens"] - before)
            line = step.rstrip("\n")
            if self.finish_reason != "stop" or not line:
                return  # cut by max_tokens, or the plan ended after the newline before
            world = self.sets.after(world, line.encode())
            if world is None or not step.endswith("\n"):
                return  # a text step the state does not allow (refused by the check), or the plan's end
            if left <= 0:
                self.finish_reason = "length"
                return
