"""Plan lines checked against the home: typed steps, and the lines that are not steps, with why.

A step is a call of a declared action whose every argument is a thing of the home of the right
type (a text argument: any string, quoted or not). A constrained plan (the grammar) can only write
steps; an unconstrained plan is checked line by line, and what fails is reported in
`rejected`, never passed off as a step. Chatter before the first step is rejected too; the first
line that is not a call after the steps began ends the plan (the model then writes something else,
e.g. a made-up next turn), and the lines after it are rejected as after the plan.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import Environment, Step, parse_call

SHOWN = 8  # names listed in a reason


@dataclass(frozen=True)
class Rejected:
    line: str
    reason: str

    def as_dict(self) -> dict:
        return {"line": self.line, "reason": self.reason}


def _listed(names: list[str]) -> str:
    more = f", … ({len(names) - SHOWN} more)" if len(names) > SHOWN else ""
    return ", ".join(names[:SHOWN]) + more


def check_line(line: str, env: Environment) -> Step | Rejected:
    """One line of a plan: a typed step, or why it is not one."""
    call = parse_call(line)
    if call is None:
        return Rejected(line, "not an action call like go_to(kitchen)")
    name, args = call
    action = env.action(name)
    if action is None:
        return Rejected(line, f"{name!r} is not an action of this home ({_listed([a.name for a in env.actions])})")
    if len(args) != len(action.args):
        return Rejected(line, f"{action.signature()} takes {len(action.args)} argument(s), not {len(args)}")
    for arg, kind in zip(args, action.args, strict=True):
        if kind == "text":
            continue
        names = env.names(kind)
        if arg not in names:
            article = "an" if kind[0] in "aeiou" else "a"
            return Rejected(line, f"{arg!r} is not {article} {kind} of this home ({_listed(names)})")
    return Step(name, args, list(action.args))


UNFINISHED = "unfinished: max_tokens ended the plan inside this line"


def check_steps(text: str, env: Environment, truncated: bool = False) -> tuple[list[Step], list[Rejected]]:
    """Every non-empty line of a plan, checked: (steps, rejected lines). `truncated`: the plan was
    cut by max_tokens, so a last line that is not a step is reported as unfinished. A plain-text
    home declares no actions: its plans have no steps, and nothing is rejected."""
    if env.is_text:
        return [], []
    steps: list[Step] = []
    rejected: list[Rejected] = []
    ended = False
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if ended:
            rejected.append(Rejected(line, "after the end of the plan"))
            continue
        checked = check_line(line, env)
        if isinstance(checked, Step):
            steps.append(checked)
        else:
            if steps and checked.reason.startswith("not an action call"):
                ended = True  # prose after the steps: the plan is over
            rejected.append(checked)
    last = text.rstrip().rsplit("\n", 1)[-1].strip()
    if truncated and rejected and rejected[-1].line == last and not text.endswith("\n"):
        rejected[-1] = Rejected(last, UNFINISHED)
    return steps, rejected


class StepStream:
    """Steps as a streamed plan completes them: feed the text deltas, get each line as a typed step as
    soon as its newline arrives (and the last line at the end), so a robot can start the first step
    while the planner still writes the rest. Lines that are not steps are skipped here (the final
    answer lists them in rejected_lines); the first one after a step ends the stream of steps, as
    check_steps ends the plan there."""

    def __init__(self, env: Environment):
        self.env, self.text, self.count, self._ended = env, "", 0, env.is_text

    def feed(self, delta: str) -> list[dict]:
        self.text += delta
        *complete, self.text = self.text.split("\n")
        return [step for line in complete for step in self._line(line)]

    def finish(self) -> list[dict]:
        line, self.text = self.text, ""
        return self._line(line)

    def _line(self, line: str) -> list[dict]:
        if self._ended or not line.strip():
            return []
        checked = check_line(line.strip(), self.env)
        if not isinstance(checked, Step):
            self._ended = self.count > 0 and checked.reason.startswith("not an action call")
            return []
        self.count += 1
        return [{"index": self.count - 1, **checked.as_dict()}]
