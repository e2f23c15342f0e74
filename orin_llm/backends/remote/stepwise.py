"""A plan under the home's state, generated remotely one step per request (`--remote-plans stepwise`).

Locally, `feasibility: enforce` narrows the home's grammar at every token to the steps the state
simulated from the plan so far allows (planning/feasibility.py). A remote engine takes a grammar text per
request, not a mask per token, so here each step is one request whose grammar is the one the request's
constraint gives for its next step (runtime/constraint.py `StepGrammars`; for a plan under the state,
planning/feasibility.py `StateSteps`: the lines feasible in the world after the steps before it, from
the same `StepSets` the local narrowing reads). This module knows nothing of homes or plans. The prompt
of step k is the plan's prompt and the k steps written so far, so the engine's prefix cache holds all
but the newest step's tokens.

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

from collections.abc import Callable
from typing import Any, Union

from ...runtime.constraint import StepGrammars
from .client import RemoteCall, RemoteError


class StepwiseCall(RemoteCall):
    """A RemoteCall that asks one step per request (module doc); hedged.py races it like any other."""

    def __init__(self, *args: Any, steps: StepGrammars, encode: Callable[[str], list[int]], **kw: Any):
        super().__init__(*args, **kw)
        self.steps = steps
        self.encode = encode

    def _extended(self, written: str) -> Union[list[int], str]:
        """The plan's prompt and the steps written so far, in the prompt's own form (ids or text)."""
        if isinstance(self.prompt, str):
            return self.prompt + written
        return self.prompt + (self.encode(written) if written else [])

    def _call(self) -> None:
        steps, written, left = self.steps, "", self.max_tokens
        for k in range(steps.max_steps):
            if self.cancelled:  # between two steps: no next request
                raise RemoteError("cancelled", "cancelled")
            lark = steps.grammar(first=k == 0, last=k == steps.max_steps - 1)
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
            if not steps.advance(line) or not step.endswith("\n"):
                return  # a text step the state does not allow (refused by the check), or the plan's end
            if left <= 0:
                self.finish_reason = "length"
                return
