"""Goals: facts a plan must make true, written like steps, and whether a world has them.

    at(o, p)        object o lies at p (a place; or a room: anywhere in it)
    holding(o)      the robot holds o
    robot_at(p)     the robot is at p (a place; or a room: anywhere in it)
    open(p), closed(p)   p is known to be open, closed
    on(d), off(d)   device d is known to be on, off
    done(a, x)      action a (an open, close, switch or `other` action) was done at x; done(a): anywhere
    said            the robot said something

A fact naming a thing the home does not have, or a thing of the wrong sort (at(sofa, kitchen): a
sofa is not an object), is refused with what to fix, and so is a goal whose facts contradict each
other (no world has both: `contradiction`), before anything searches for it. A fact about a thing no
step can change (on of a thing that is not a device) parses: the search (search.py) names it as
unreachable.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

from ...errors import OrinError
from .calls import Step, parse_call
from .model import Environment
from .state import HomeState
from .world import World, simulate

PREDICATES: dict[str, str] = {
    "at": "at(object, place)", "holding": "holding(object)", "robot_at": "robot_at(place)",
    "open": "open(place)", "closed": "closed(place)", "on": "on(device)", "off": "off(device)",
    "done": "done(action, thing)", "said": "said",
}
_RECORDED_KINDS = ("open", "close", "switch_on", "switch_off", "other")  # the kinds done() can name


@dataclass(frozen=True)
class Fact:
    predicate: str
    args: tuple[str, ...] = ()

    def __str__(self) -> str:
        return self.predicate if self.predicate == "said" else f"{self.predicate}({', '.join(self.args)})"

    def holds(self, world: World) -> bool:
        p, a = self.predicate, self.args
        if p == "at":
            where = world.location(a[0])
            if where is None:
                return False
            return where == a[1] or (a[1] in world.rooms and world.room_of(where) == a[1])
        if p == "holding":
            return world.holding == a[0]
        if p == "robot_at":
            return world.robot_in(a[0]) is True
        if p in ("open", "closed"):
            return world.is_open(a[0]) is (p == "open")
        if p in ("on", "off"):
            return world.is_on(a[0]) is (p == "on")
        if p == "done":
            return any(d[0] == a[0] and (len(a) == 1 or d[1] == a[1]) for d in world.done)
        return world.said


@dataclass(frozen=True)
class Goal:
    facts: tuple[Fact, ...]

    def missing(self, world: World) -> list[str]:
        """The facts `world` does not have (as written back: ``at(mug, sink)``), in goal order."""
        return [str(f) for f in self.facts if not f.holds(world)]

    def reached(self, world: World) -> bool:
        return all(f.holds(world) for f in self.facts)

    def __str__(self) -> str:
        return ", ".join(str(f) for f in self.facts)


def _parse_fact(raw: str, env: Environment) -> Fact:
    text = str(raw).strip()
    if text in ("said", "said()"):
        return Fact("said")
    call = parse_call(text)
    if call is None:
        raise OrinError(f"goal fact {text!r} is not written like a step; write e.g. at(mug, sink) or robot_at(kitchen) "
                        f"({', '.join(PREDICATES.values())})")
    pred, args = call
    if pred not in PREDICATES:
        raise OrinError(f"goal fact {text!r}: {pred!r} is not a goal predicate; use one of "
                        f"{', '.join(PREDICATES.values())}")
    places, objects = set(env.names("place")), set(env.names("object"))
    things = places | objects | set(env.names("device"))
    want = PREDICATES[pred]
    arity = {"at": (2,), "done": (1, 2), "said": (0,)}.get(pred, (1,))
    if len(args) not in arity:
        raise OrinError(f"goal fact {text!r}: write it as {want}")
    if pred in ("at", "holding") and args[0] not in objects:
        raise OrinError(f"goal fact {text!r}: {args[0]!r} is not an object of this home; {want} names one of "
                        f"{_listed(env.names('object'))}")
    if pred in ("at", "robot_at", "open", "closed"):
        p = args[-1]
        if p not in places:
            raise OrinError(f"goal fact {text!r}: {p!r} is not a room or place of this home "
                            f"({_listed(env.names('place'))})")
    if pred in ("on", "off") and args[0] not in things:
        raise OrinError(f"goal fact {text!r}: {args[0]!r} is not a thing of this home "
                        f"({_listed(env.names('device'))})")
    if pred == "done":
        if env.action(args[0]) is None:
            raise OrinError(f"goal fact {text!r}: {args[0]!r} is not an action of this home "
                            f"({_listed([a.name for a in env.actions])})")
        if len(args) == 2 and args[1] not in things:
            raise OrinError(f"goal fact {text!r}: {args[1]!r} is not a thing of this home")
    return Fact(pred, tuple(args))


def _where_clash(env: Environment, p: str, q: str) -> bool:
    """Whether nothing can be at both `p` and `q` (rooms or places): they differ and neither is the
    room the other lies in (at(mug, kitchen) and at(mug, sink) agree when the sink is in the kitchen)."""
    if p == q:
        return False
    room_of = {n: r.name for r in env.rooms for n in [r.name, *r.places]}
    return room_of.get(p) != q and room_of.get(q) != p


def contradiction(a: Fact, b: Fact, env: Environment) -> Optional[str]:
    """Why no world has both facts (one hand, one place for an object and for the robot, open or
    closed, on or off), or None when some world may."""
    pa, pb = a.predicate, b.predicate
    if (pa, pb) == ("holding", "holding") and a.args != b.args:
        return "the robot holds one object at a time"
    if {pa, pb} == {"holding", "at"} and a.args[0] == b.args[0]:
        return f"{a.args[0]} cannot be held and lie somewhere at once"
    if pa == pb and pa in ("at", "robot_at") and a.args[:-1] == b.args[:-1] and _where_clash(env, a.args[-1],
                                                                                              b.args[-1]):
        who = "the robot" if pa == "robot_at" else a.args[0]
        return f"{who} cannot be at {a.args[-1]} and at {b.args[-1]} at once"
    for yes, no, what in (("open", "closed", "open and closed"), ("on", "off", "on and off")):
        if {pa, pb} == {yes, no} and a.args == b.args:
            return f"{a.args[0]} cannot be {what} at once"
    return None


def _clash(fact: Fact, before: Sequence[Fact], env: Environment) -> Optional[tuple[Fact, str]]:
    """The first fact of `before` that `fact` contradicts, and why (None: none)."""
    return next(((b, why) for b in before if (why := contradiction(b, fact, env)) is not None), None)


def consistent(facts: Sequence[str], env: Environment) -> tuple[list[str], list[str]]:
    """`facts` (goal facts that parse) without each one that contradicts a fact kept before it: (the
    facts kept, a line per fact left out saying which fact it contradicts). For a goal read from a
    task, where the reading, not the user, wrote the contradiction."""
    kept: list[Fact] = []
    dropped: list[str] = []
    for raw in facts:
        fact = _parse_fact(raw, env)
        clash = _clash(fact, kept, env)
        if clash is None:
            kept.append(fact)
        else:
            dropped.append(f"{fact}: contradicts {clash[0]} ({clash[1]}), left out")
    return [str(f) for f in kept], dropped


def _listed(names: list[str]) -> str:
    return ", ".join(names[:8]) + (f", … ({len(names) - 8} more)" if len(names) > 8 else "")


def parse_goal(facts: Sequence[str], env: Environment) -> Goal:
    """The goal `facts` mean in `env`; OrinError naming the first fact that does not fit."""
    if env.is_text:
        raise OrinError(f"environment {env.name!r} is plain text: a goal needs rooms, objects and actions to name")
    if isinstance(facts, str):
        facts = [facts]
    if not facts:
        raise OrinError("the goal is empty; give facts like at(mug, sink), or leave the goal out")
    parsed = tuple(dict.fromkeys(_parse_fact(f, env) for f in facts))
    for i, later in enumerate(parsed):
        clash = _clash(later, parsed[:i], env)
        if clash is not None:
            raise OrinError(f"goal facts {clash[0]} and {later} contradict each other ({clash[1]}), so no plan can "
                            "reach the goal: keep one of them")
    return Goal(parsed)


def goal_of_plan(env: Environment, steps: Sequence[Step], state: Optional[HomeState] = None) -> list[str]:
    """The facts a plan makes true from `state`, as goal facts: where the objects it moves end up (or
    holding), the open/closed and on/off it changes, the `other` actions it does, said. A state that
    was not known before the plan is taken to be what the plan's first step on that thing needs
    (open(fridge) first: the fridge was closed), so opening and closing again is no change."""
    start = World.start(env, state)
    end, _ = simulate(env, steps, state)
    out: list[Fact] = []
    for o in env.names("object"):
        if end.holding == o and start.holding != o:
            out.append(Fact("holding", (o,)))
        elif end.holding != o and end.location(o) != start.location(o):
            out.append(Fact("at", (o, str(end.location(o)))))
    kinds = {a.name: a.effective_kind for a in env.actions}
    first: dict[str, str] = {}
    for s in steps:
        if s.args and kinds.get(s.action) in _RECORDED_KINDS[:4]:
            first.setdefault(s.args[0], kinds[s.action])
    implied_before = {"open": False, "close": True, "switch_on": False, "switch_off": True}
    for thing, now in end.state.open.items():
        before = start.is_open(thing)
        if before is None and thing in first:
            before = implied_before[first[thing]]
        if now is not before:
            out.append(Fact("open" if now else "closed", (thing,)))
    for thing, now in end.state.on.items():
        before = start.is_on(thing)
        if before is None and thing in first:
            before = implied_before[first[thing]]
        if now is not before:
            out.append(Fact("on" if now else "off", (thing,)))
    for action, thing in end.done[len(start.done):]:
        if kinds.get(action) == "other":
            out.append(Fact("done", (action, thing) if thing else (action,)))
    if end.said and not start.said:
        out.append(Fact("said"))
    return [str(f) for f in dict.fromkeys(out)]
