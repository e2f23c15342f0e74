"""Whether a remote engine's answer may be used: the same check for the race (hedged.py) and for the
Edge-LLM backend (backends/edgellm), whose server decodes under the grammar we sent but is checked all
the same, with the matcher the local engine decodes with (llguidance) on a fork of the request's
constraint, so a plan under the home's state is simulated as the local narrowing would."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Optional

from ...runtime.constraint import Constraint
from .client import RemoteCall


def check_answer(call: RemoteCall, check: Optional[Constraint], encode: Callable[[str], list[int]],
                 eos_ids: Iterable[int]) -> Optional[tuple[str, str]]:
    """(reason, why) the answer may not be used (reasons: hedged.py's REASONS), or None: it may."""
    if call.finish_reason not in ("stop", "length"):
        return "finish_reason", f"the remote ended with finish_reason {call.finish_reason!r}"
    if check is None:
        return None
    ids = encode(call.text) if call.text else []
    if check.m.validate_tokens(ids) != len(ids):
        return "off_grammar", f"the remote's answer is off the home's grammar: {call.text[:80]!r}"
    if check.valid_prefix(ids) != len(ids):  # a narrowed constraint: a step the home's state does not allow
        return "infeasible", f"the remote's answer has a step the home's state does not allow: {call.text[:80]!r}"
    if call.finish_reason == "stop" and not any(check.valid_prefix(ids + [e]) == len(ids) + 1 for e in eos_ids):
        return "incomplete", f"the remote's answer is an incomplete plan: {call.text[:80]!r}"
    return None
