"""A classical planner over the home's ground steps: the plan that reaches a goal when the model's
plans do not (LLM+P's division of labour), or why there is none.

Facts no step can make true (an object when the home has no pick or place action, on() of a thing
that is not a device, ...) are named before searching. The search is best-first (weighted A*:
steps so far + twice a step-count estimate per missing fact, which finds as short plans as the
reference plans with fewer states tried) over the steps that touch the goal's things first (what
the goal names, where its objects lie, the rooms of those), then over every step of the home
while the deadline allows; it stops at the deadline and says so.
"""

from __future__ import annotations

import heapq
import itertools
import time
from dataclasses import dataclass, field
from typing import Optional

from .goals import Fact, Goal
from .model import Environment
from .world import World

SAY_TEXT = "The task is done"  # what a searched plan says when the goal asks for `said`


@dataclass
class SearchResult:
    steps: Optional[list[tuple[str, tuple[str, ...]]]]  # None: no plan found
    reason: str
    unreachable: list[str] = field(default_factory=list)  # goal facts no step can make true
    expanded: int = 0

    def as_dict(self) -> dict:
        return {"steps": None if self.steps is None else [[a, list(args)] for a, args in self.steps],
                "reason": self.reason, "unreachable": list(self.unreachable), "expanded": self.expanded}


def _first_types(env: Environment, kind: str, position: int = 0) -> set[str]:
    """The names the `position`-th argument of the home's actions of `kind` can take."""
    names: set[str] = set()
    for a in env.actions:
        if a.effective_kind == kind and len(a.args) > position and a.args[position] != "text":
            names |= set(env.names(a.args[position]))
    return names


def why_unreachable(env: Environment, fact: Fact) -> Optional[str]:
    """Why no step of `env` can ever make `fact` true (whatever the state), or None."""
    p, a = fact.predicate, fact.args
    if p in ("at", "holding"):
        if a[0] not in _first_types(env, "pick"):
            return f"no action of kind pick picks up {a[0]}"
        if p == "at" and a[1] not in _first_types(env, "place", 1):
            return f"no action of kind place puts an object at {a[1]}"
        return None
    if p == "robot_at":
        return None if a[0] in _first_types(env, "navigate") else f"no action of kind navigate goes to {a[0]}"
    if p in ("open", "closed"):
        kind = "open" if p == "open" else "close"
        if a[0] not in env.openable_places():
            return f"{a[0]} does not open and close (it is not listed as openable)"
        return None if a[0] in _first_types(env, kind) else f"no action of kind {kind} takes {a[0]}"
    if p in ("on", "off"):
        kind = "switch_on" if p == "on" else "switch_off"
        if a[0] not in env.names("device"):
            return f"{a[0]} is not a device: nothing switches it"
        return None if a[0] in _first_types(env, kind) else f"no action of kind {kind} takes {a[0]}"
    if p == "done":
        action = env.action(a[0])
        if action is None or action.effective_kind not in ("open", "close", "switch_on", "switch_off", "other"):
            return f"{a[0]} is not an action that done() records (kinds other, open, close, switch_on, switch_off)"
        first = next((t for t in action.args if t != "text"), None)
        if len(a) == 2 and (first is None or a[1] not in env.names(first)):
            return f"{a[0]} does not take {a[1]}"
        return None
    return None if any(x.effective_kind == "say" for x in env.actions) else "the home has no action of kind say"


def _estimate(world: World, fact: Fact) -> int:
    """Steps a missing fact still needs, roughly (not a lower bound: the search is greedy enough)."""
    p, a = fact.predicate, fact.args
    if p == "at":
        if world.holding == a[0]:
            return 1 + (world.robot_in(a[1]) is not True)
        return 4
    if p == "holding":
        return 1 + (world.robot_in(world.location(a[0]) or a[0]) is not True) + (world.holding is not None)
    if p in ("robot_at", "said"):
        return 1
    return 1 + (world.robot_in(a[-1]) is not True)


def _relevant(world: World, goal: Goal) -> set[str]:
    things: set[str] = set()
    for f in goal.facts:
        for x in f.args:
            things.add(x)
            where = world.location(x) if x in world.env.names("object") else None
            for y in (where, world.room_of(x), world.room_of(where) if where else None):
                if y:
                    things.add(y)
    if world.robot_at:
        things.add(world.robot_at)
    if world.holding:
        things.add(world.holding)
    return things


def _node_key(world: World) -> tuple:
    # not world.key: the step just run only forbids repeating it at once, which no shortest plan does
    return world.facts_key, world.said, frozenset(world.done)


def _best_first(world: World, goal: Goal, deadline: float, only: Optional[set[str]],
                counter: list[int]) -> tuple[Optional[list[tuple[str, tuple[str, ...]]]], bool]:
    """(steps, exhausted): the plan found, and whether every reachable state was tried."""
    tie = itertools.count()
    start_h = sum(_estimate(world, f) for f in goal.facts if not f.holds(world))
    heap: list = [(start_h, next(tie), 0, world, [])]
    seen = {_node_key(world)}
    text_types = {a.name: a.args for a in world.env.actions}
    while heap:
        if time.monotonic() > deadline:
            return None, False
        _, _, g, w, path = heapq.heappop(heap)
        counter[0] += 1
        for action, args in w.steps(SAY_TEXT):
            types = text_types[action]
            if only is not None and any(t != "text" and x not in only for x, t in zip(args, types, strict=True)):
                continue
            nxt = w.apply(action, args)
            k = _node_key(nxt)
            if k in seen:
                continue
            seen.add(k)
            steps = [*path, (action, args)]
            missing = [f for f in goal.facts if not f.holds(nxt)]
            if not missing:
                return steps, False
            h = sum(_estimate(nxt, f) for f in missing)
            heapq.heappush(heap, (g + 1 + 2 * h, next(tie), g + 1, nxt, steps))
    return None, True


def search(env: Environment, world: World, goal: Goal, deadline_s: float) -> SearchResult:
    """A plan (ground steps) from `world` that reaches `goal` within `deadline_s` seconds, or why not."""
    if goal.reached(world):
        return SearchResult([], "the goal already holds")
    unreachable = []
    for f in goal.facts:
        if f.holds(world):
            continue
        why = why_unreachable(env, f)
        if why:
            unreachable.append((str(f), why))
    if unreachable:
        reason = "; ".join(f"{fact}: {why}" for fact, why in unreachable)
        return SearchResult(None, f"no step can make these facts true: {reason}", [f for f, _ in unreachable])
    deadline = time.monotonic() + max(0.0, deadline_s)
    counter = [0]
    steps, exhausted = _best_first(world, goal, deadline, _relevant(world, goal), counter)
    if steps is None and exhausted:
        steps, exhausted = _best_first(world, goal, deadline, None, counter)
    if steps is not None:
        return SearchResult(steps, f"found a plan of {len(steps)} steps", [], counter[0])
    if exhausted:
        return SearchResult(None, f"no sequence of steps reaches the goal from this state (all {counter[0]} "
                            "reachable states tried)", [], counter[0])
    return SearchResult(None, f"no plan found within the deadline of {deadline_s:g} s ({counter[0]} states "
                        "expanded)", [], counter[0])
