"""The home simulated step by step: which steps can run in a state, and the state after them.

Each action has a kind (model.KINDS) and each kind a rule (docs/HOMES.md):

- navigate(p): the robot is then at p (a room or a place);
- pick(o): the hand is empty, and the robot is in o's room (at the room or any place of it), or at
  o's place once o lies at a known place (inside a closed place: opened first); it then holds o;
- place(o, p): it holds o and is at p (a closed p: opened first); o then lies at p, the hand is empty;
- open, close, switch_on, switch_off (p): the robot is at p, p opens and closes (or is a device), and
  p is closed, open, off, on, when that is known;
- other(x, ...): the robot is at its first argument when that is a room or a place, and holds it
  when that is an object (give: "hand the held object");
- say(text): always.

"At p": at the place p; at a room: anywhere in it; at a device of its own (not a place): in its
room; at an object: where the object lies. A fact that is not known never blocks a step; where the
robot is, when unknown, is then what the step tells: after pick(o) it is where o lay, after place,
open, close, switch or `other` on a place at that place (a device that is not a place: in its room).
So a step elsewhere after it needs a navigate first, as it would from a known start. A
navigate or `other` step right after the same step changes nothing and is refused (a precondition),
so that a decoder held to the feasible steps cannot repeat it until max_tokens; the other kinds
cannot repeat anyway (the hand, open/closed, on/off). A World is immutable: apply() gives a new
one, so a decoder can keep one per prefix of a plan.

Violations are sorted as the Embodied Agent Interface sorts plan errors: `unknown` (the step names
an action or a thing the home does not have, or the wrong number of arguments: a hallucination),
`affordance` (the thing cannot do that: opening a sofa, switching a book) and `precondition` (the
state does not allow it now: nothing in hand, not there, already open; an ordering error).
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

from ...errors import OrinError
from .calls import Step, format_call, parse_call
from .model import EXAMPLE_CHECKS, Environment
from .state import HomeState, state_problem

VIOLATION_KINDS = ("precondition", "affordance", "unknown")


@dataclass(frozen=True)
class Violation:
    """A step that cannot run: its position in the plan, its text, the kind of error and why."""

    index: int
    step: str
    kind: str
    reason: str

    def as_dict(self) -> dict:
        return {"index": self.index, "step": self.step, "kind": self.kind, "reason": self.reason}


class _Index:
    """What never changes in a home, in the shape the rules ask for it (built once per home)."""

    def __init__(self, env: Environment):
        self.env = env
        self.actions = {a.name: (a.effective_kind, tuple(a.args)) for a in env.actions}
        self.rooms = {r.name for r in env.rooms}
        self.room_of: dict[str, str] = {}
        for r in env.rooms:
            for n in [r.name, *r.places, *r.objects, *(r.devices or [])]:
                self.room_of.setdefault(n, r.name)
        self.names = {t: tuple(dict.fromkeys(env.names(t))) for t in ("place", "object", "device")}
        self.places = set(self.names["place"])
        self.objects = set(self.names["object"])
        self.devices = set(self.names["device"])
        self.openable = env.openable_places()


_INDEXES: OrderedDict[int, _Index] = OrderedDict()
_INDEXES_KEPT = 64


def _index(env: Environment) -> _Index:
    ix = _INDEXES.get(id(env))
    if ix is None or ix.env is not env:
        ix = _INDEXES[id(env)] = _Index(env)
        while len(_INDEXES) > _INDEXES_KEPT:
            _INDEXES.popitem(last=False)
    else:
        _INDEXES.move_to_end(id(env))
    return ix


class World:
    """A home in a state. start() it, check() a step, apply() it; feasible() lists what can run now."""

    __slots__ = ("_ix", "robot_at", "holding", "_object_at", "_open", "_on", "said", "done", "_last", "_key",
                 "_feasible")

    def __init__(self, ix: _Index, robot_at: Optional[str], holding: Optional[str], object_at: dict[str, str],
                 open_: dict[str, bool], on: dict[str, bool], said: bool, done: tuple[tuple[str, str], ...],
                 last: Optional[tuple[str, tuple[str, ...]]] = None):
        self._ix = ix
        self.robot_at, self.holding, self._object_at, self._open, self._on = robot_at, holding, object_at, open_, on
        self.said, self.done = said, done
        self._last = last  # the step just run, when a navigate or an `other` (those may not repeat at once)
        self._key: Optional[tuple] = None
        self._feasible: dict[str, Optional[list[tuple[str, ...]]]] = {}

    @classmethod
    def start(cls, env: Environment, state: Optional[HomeState] = None) -> World:
        """The home in `state` (default: the home's own `state:`, else nothing known but an empty hand)."""
        if env.is_text:
            raise OrinError(f"environment {env.name!r} is plain text: it has no rooms, objects or actions to "
                            "simulate; give rooms and actions")
        if state is None:
            state = env.state or HomeState()
        else:
            problem = state_problem(state, env)
            if problem:
                raise OrinError(f"state of {env.name!r}: {problem}")
        ix = _index(env)
        object_at = {o: p for o, p in state.object_at.items() if ix.room_of.get(o) != p}
        return cls(ix, state.robot_at, state.holding, object_at, dict(state.open), dict(state.on), state.said,
                   tuple(tuple(d) for d in state.done))  # type: ignore[misc]

    # ------------------------------------------------------------------ facts
    @property
    def env(self) -> Environment:
        return self._ix.env

    @property
    def rooms(self) -> set[str]:
        return self._ix.rooms

    def room_of(self, name: str) -> Optional[str]:
        """The room a room, place, device or (declared) object belongs to."""
        return self._ix.room_of.get(name)

    def location(self, obj: str) -> Optional[str]:
        """Where `obj` lies (a place, or its room when no place is known); None while it is held."""
        if obj == self.holding:
            return None
        return self._object_at.get(obj) or self._ix.room_of.get(obj)

    def is_open(self, place: str) -> Optional[bool]:
        return self._open.get(place)

    def is_on(self, device: str) -> Optional[bool]:
        return self._on.get(device)

    def robot_in(self, thing: str) -> Optional[bool]:
        """Whether the robot is at `thing` (see the module doc); None when that is not known."""
        ix = self._ix
        if thing in ix.objects:
            if thing == self.holding:
                return True
            where = self.location(thing)
            if where is None:
                return None
            thing = where
        if self.robot_at is None:
            return None
        if thing in ix.rooms or (thing not in ix.places and thing in ix.room_of):
            return ix.room_of.get(self.robot_at) == ix.room_of[thing]
        return self.robot_at == thing

    @property
    def state(self) -> HomeState:
        """The facts as a HomeState; every object not in hand is listed where it lies."""
        object_at = {o: self.location(o) for o in self._ix.names["object"] if o != self.holding}
        return HomeState(robot_at=self.robot_at, holding=self.holding, object_at=object_at, open=dict(self._open),
                         on=dict(self._on), said=self.said, done=list(self.done))

    @property
    def state_key(self) -> tuple:
        """Hashable; equal for worlds in the same state (not the last step): the facts, whether something
        was said, and which `other` actions were done (wiped, fed: work that leaves no fact behind; an
        opened door or a switched lamp is its fact). A plan that comes back to one has undone its own
        work or done nothing new (docs/HOMES.md, rule 2: no loops)."""
        actions = self._ix.actions
        work = frozenset(d for d in self.done if actions.get(d[0], ("",))[0] == "other")
        return (*self.key[:-1], self.said, work)

    @property
    def facts_key(self) -> tuple:
        """Hashable; equal for worlds with the same facts (what is said or done is left out)."""
        return self.key[:-1]

    @property
    def key(self) -> tuple:
        """Hashable; equal for worlds where the same steps can run: the facts, and the last step when
        it may not repeat at once (what is said or done is left out)."""
        if self._key is None:
            self._key = (self.robot_at, self.holding, frozenset(self._object_at.items()),
                         frozenset(self._open.items()), frozenset(self._on.items()), self._last)
        return self._key

    # ------------------------------------------------------------------ rules
    def _why(self, action: str, args: Sequence[str]) -> Optional[tuple[str, str]]:
        ix = self._ix
        spec = ix.actions.get(action)
        if spec is None:
            return "unknown", f"{action!r} is not an action of this home"
        kind, types = spec
        if len(args) != len(types):
            return "unknown", f"{action} takes {len(types)} argument(s), not {len(args)}"
        for arg, t in zip(args, types, strict=True):
            if t != "text" and arg not in ix.names[t]:
                return "unknown", f"{arg!r} is not {'an' if t == 'object' else 'a'} {t} of this home"
        if kind == "say":
            return None
        if self._last == (action, tuple(args)):  # navigate, other: only a change of state could make it do more
            return "precondition", f"{format_call(action, list(args))} was just done: again changes nothing"
        if kind == "navigate":
            return None
        if kind == "pick":
            return self._why_pick(args[0])
        if kind == "place":
            return self._why_place(args[0], args[1])
        if kind in ("open", "close"):
            return self._why_open(kind, args[0])
        if kind in ("switch_on", "switch_off"):
            return self._why_switch(kind, args[0])
        first = args[0] if args and types[0] != "text" else None
        if first is not None and types[0] == "object" and self.holding != first:
            # an action on an object acts on it in hand (give: "hand the held object")
            held = f"it holds {self.holding}" if self.holding else "the hand is empty"
            return "precondition", f"the robot does not hold {first} ({held}): pick it up first"
        return self._not_at(first) if first is not None and first in ix.places else None

    def _not_at(self, thing: str) -> Optional[tuple[str, str]]:
        if self.robot_in(thing) is False:
            return "precondition", f"the robot is at {self.robot_at}, not at {thing}: go there first"
        return None

    def _why_pick(self, obj: str) -> Optional[tuple[str, str]]:
        if obj not in self._ix.objects:
            return "affordance", f"{obj} is not an object: only objects can be picked up"
        if self.holding == obj:
            return "precondition", f"the robot already holds {obj}"
        if self.holding is not None:
            return "precondition", f"the robot holds {self.holding}: place it before picking up {obj}"
        where = self.location(obj)
        if where is None:
            return None
        if where in self._ix.openable and self._open.get(where) is False:
            return "precondition", f"{obj} is inside {where}, which is closed: open it first"
        return self._not_at(where)

    def _why_place(self, obj: str, place: str) -> Optional[tuple[str, str]]:
        if self.holding != obj:
            held = f"it holds {self.holding}" if self.holding else "the hand is empty"
            return "precondition", f"the robot does not hold {obj} ({held}): pick it up first"
        if place in self._ix.openable and self._open.get(place) is False:
            return "precondition", f"{place} is closed: open it first"
        return self._not_at(place)

    def _why_open(self, kind: str, place: str) -> Optional[tuple[str, str]]:
        if place not in self._ix.openable:
            return "affordance", f"{place} does not open and close"
        state = self._open.get(place)
        if state is (kind == "open"):
            return "precondition", f"{place} is already {'open' if state else 'closed'}"
        return self._not_at(place)

    def _why_switch(self, kind: str, device: str) -> Optional[tuple[str, str]]:
        if device not in self._ix.devices:
            return "affordance", f"{device} is not a device: it cannot be switched on or off"
        state = self._on.get(device)
        if state is (kind == "switch_on"):
            return "precondition", f"{device} is already {'on' if state else 'off'}"
        return self._not_at(device)

    def check(self, action: str, args: Sequence[str], index: int = -1) -> Optional[Violation]:
        """None when the step can run now; else the Violation (at plan position `index`)."""
        why = self._why(action, args)
        if why is None:
            return None
        spec = self._ix.actions.get(action)
        types = list(spec[1]) if spec and len(spec[1]) == len(args) else None
        return Violation(index, format_call(action, list(args), types), why[0], why[1])

    def apply(self, action: str, args: Sequence[str]) -> World:
        """The world after the step; OrinError when the step cannot run (check() says why)."""
        violation = self.check(action, args)
        if violation is not None:
            raise OrinError(f"{violation.step} cannot run: {violation.reason}")
        ix = self._ix
        kind, types = ix.actions[action]
        robot_at, holding, said, done = self.robot_at, self.holding, self.said, self.done
        object_at, open_, on = self._object_at, self._open, self._on
        if kind == "navigate":
            target = args[0]
            if target in ix.objects:
                target = self.location(target) or robot_at  # type: ignore[assignment]
            robot_at = self._spot(target)
        elif kind == "pick":
            holding = args[0]
            object_at = {o: p for o, p in object_at.items() if o != holding}
        elif kind == "place":
            holding = None
            object_at = dict(object_at)
            if ix.room_of.get(args[0]) == args[1]:
                object_at.pop(args[0], None)
            else:
                object_at[args[0]] = args[1]
        elif kind in ("open", "close"):
            open_ = {**open_, args[0]: kind == "open"}
            done = (*done, (action, args[0]))
        elif kind in ("switch_on", "switch_off"):
            on = {**on, args[0]: kind == "switch_on"}
            done = (*done, (action, args[0]))
        elif kind == "say":
            said = True
        else:
            first = next((a for a, t in zip(args, types, strict=True) if t != "text"), "")
            done = (*done, (action, first))
        if robot_at is None:
            robot_at = self._where_done(kind, args, types)
        last = (action, tuple(args)) if kind in ("navigate", "other") else None
        return World(ix, robot_at, holding, object_at, open_, on, said, done, last)

    def _where_done(self, kind: str, args: Sequence[str], types: Sequence[str]) -> Optional[str]:
        """Where the robot is after a step it could only do there, when it was not known before: an
        unknown start never blocks a step, but the step fixes where the robot is, so that a step
        somewhere else next needs a navigate first (no teleporting between rooms)."""
        ix = self._ix
        if kind == "pick":
            return self.location(args[0])  # o's place, or o's room when no place is known
        if kind in ("place", "open", "close", "switch_on", "switch_off"):
            thing = args[1] if kind == "place" else args[0]
        elif kind == "other" and args and types[0] != "text" and args[0] in ix.places:
            thing = args[0]
        else:
            return None  # say; an action on the object in hand tells nothing of where it is done
        return self._spot(thing)

    def _spot(self, thing: Optional[str]) -> Optional[str]:
        """Where the robot stands to be at `thing`: a place itself, else its room (a room is its own)."""
        ix = self._ix
        return thing if thing is None or thing in ix.places else ix.room_of.get(thing, thing)

    def feasible(self, action: str) -> Optional[list[tuple[str, ...]]]:
        """The argument tuples with which `action` can run now, in home order; [] when none can (or
        the action is not the home's). None when it takes a text argument, or when every tuple can
        run: the caller has nothing to narrow."""
        if action in self._feasible:
            return self._feasible[action]
        ix = self._ix
        spec = ix.actions.get(action)
        result: Optional[list[tuple[str, ...]]]
        if spec is None:
            result = []
        elif "text" in spec[1]:
            result = None
        else:
            kind, types = spec
            pools: list[Sequence[str]] = [ix.names[t] for t in types]
            total = 1
            for pool in pools:
                total *= len(pool)
            if kind == "place" and pools:
                pools[0] = [self.holding] if self.holding in pools[0] else []
            result = [args for args in itertools.product(*pools) if self._why(action, args) is None]
            if len(result) == total:
                result = None
        self._feasible[action] = result
        return result

    def steps(self, text: str = "done") -> list[tuple[str, tuple[str, ...]]]:
        """Every ground step that can run now (a text argument given as `text`), in home order."""
        out: list[tuple[str, tuple[str, ...]]] = []
        for a in self._ix.env.actions:
            if "text" in a.args:
                pools = [[text] if t == "text" else self._ix.names[t] for t in a.args]
                out += [(a.name, args) for args in itertools.product(*pools) if self._why(a.name, args) is None]
                continue
            allowed = self.feasible(a.name)
            if allowed is None:
                allowed = list(itertools.product(*[self._ix.names[t] for t in a.args]))
            out += [(a.name, args) for args in allowed]
        return out


def simulate(env: Environment, steps: Sequence[Step],
             state: Optional[HomeState] = None) -> tuple[World, list[Violation]]:
    """Run a plan from `state`: the world after it and the steps that could not run. A step that
    cannot run changes nothing (as on a robot, where it fails) and the plan goes on."""
    world = World.start(env, state)
    violations: list[Violation] = []
    for i, step in enumerate(steps):
        v = world.check(step.action, step.args, index=i)
        if v is not None:
            violations.append(v)
        else:
            world = world.apply(step.action, step.args)
    return world, violations


def loops(env: Environment, steps: Sequence[Step], state: Optional[HomeState] = None) -> list[int]:
    """The positions of the steps that bring the world back to a state the plan had already been in
    (docs/HOMES.md, rule 2: no loops), from `state`; a step that cannot run changes nothing and is
    not counted here (simulate() reports it)."""
    world = World.start(env, state)
    seen = {world.state_key}
    out = []
    for i, step in enumerate(steps):
        if world.check(step.action, step.args) is not None:
            continue
        world = world.apply(step.action, step.args)
        if world.state_key in seen:
            out.append(i)
        seen.add(world.state_key)
    return out


def check_examples(env: Environment) -> None:
    """Each example of `env` is checked as a plan is: its steps name the home's things and run one after
    the other from the home's state, since the model copies what the examples show; else ValueError naming
    the example's line and why (the model's validator runs it: model.EXAMPLE_CHECKS)."""
    for i, ex in enumerate(env.examples):
        world = World.start(env)
        for j, raw in enumerate(ex.plan):
            name, args = parse_call(raw)  # type: ignore[misc]  # a call: the model checked it first
            violation = world.check(name, args, index=j)
            if violation is None:
                world = world.apply(name, args)
                continue
            where = f"examples.{i}.plan.{j}: {raw!r}"
            if violation.kind != "precondition":  # unknown, affordance: in no state
                raise ValueError(f"{where}: {violation.reason}; an example names only the home's things, "
                                 "doing what they can do")
            after = " after the example's steps before it" if j else ""
            raise ValueError(f"{where} cannot run in the home's state{after}: {violation.reason}; fix the "
                             "example (or the home's state:): the model plans as its examples do")


EXAMPLE_CHECKS.append(check_examples)
