"""A streamed plan's `step` events: each line of the plan once it is complete, a step of the home,
and feasible in the state simulated from the steps sent before it.

home/steps.StepStream turns the text deltas into typed steps as their newlines arrive. Here each of
them is also run through the simulator (planning/home/world.py) from the state the plan began in:
a robot that starts the first step while the planner writes the rest never gets a step whose
preconditions do not hold. Under `enforce` the constraint lets the model write only such steps, so
this check never fires there; under `report` the first step that fails ends the events (the final
answer lists it in `violations`), as a robot could not carry out what follows it either; under
`off` (world None) the steps are only typed, as before.

With a goal the answer may be another plan than the one being decoded (a sampled candidate, or the
classical search's: planning/goal_search.py), so neither its text nor its steps are sent while it is
decoded (`hold`; the worker holds the deltas too): the chosen plan's text and steps are sent once it
is known, before the final answer (`final_steps`), the steps checked by the same rule.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from .home.steps import StepStream

if TYPE_CHECKING:
    from .home import Environment
    from .home.world import World


class FeasibleSteps:
    """StepStream's feed/finish, each step checked against the simulated state before it is sent."""

    def __init__(self, env: Environment, world: Optional[World], hold: bool = False):
        self.typed = StepStream(env)
        self.world, self.hold = world, hold
        self.sent: list[dict] = []
        self.stopped = False  # a step failed its preconditions: no more events

    def feed(self, delta: str) -> list[dict]:
        return [] if self.hold else self._checked(self.typed.feed(delta))

    def finish(self) -> list[dict]:
        return [] if self.hold else self._checked(self.typed.finish())

    def _checked(self, steps: list[dict]) -> list[dict]:
        out = []
        for step in steps:
            if self.stopped:
                break
            if self.world is not None:
                args = tuple(step["args"])
                if self.world.check(step["action"], args, index=step["index"]) is not None:
                    self.stopped = True
                    break
                self.world = self.world.apply(step["action"], args)
            self.sent.append(step)
            out.append(step)
        return out


def final_steps(answer: dict) -> list[dict]:
    """A held-back plan's step events, from its final answer: its steps up to the first violation."""
    first_bad = min((v["index"] for v in answer.get("violations") or ()), default=len(answer.get("steps", ())))
    return [{"index": i, **s} for i, s in enumerate(answer.get("steps", ())) if i < first_bad]
