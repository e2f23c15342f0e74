"""The home the planner is given, as data: rooms with places, objects and devices, the actions the
robot can run, a few worked examples; or a plain-text description (``text``). Validated strictly on
construction, so a home that reaches the planner names each thing once and its examples run in it
as plans (world.py). Loading a file: parse.py; the chat messages it becomes: render.py.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .calls import parse_call
from .state import HomeState, shape_problem, state_problem, yaml_keys

# The examples' check needs the simulator (world.py), which builds on this module: world.py registers it
# here as the package loads (planning/home/__init__.py imports world), so this module imports nothing above
# it (tests/test_layers.py: no import circles).
EXAMPLE_CHECKS: list[Callable[[Environment], None]] = []

_IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# What an action's argument can name: a room or place, an object, a switchable device, or free text
# (a bounded quoted string). The plan grammar (planning/home/grammar.py) has one rule per type.
ARG_TYPES = ("place", "object", "device", "text")
# What an action does, for the simulator (world.py): each kind has its rule, and `other` only needs
# the robot at its first argument when that is a place, or holding it when that is an object. Without
# a `kind`, the built-in names give theirs and any other name is `other`, so a home with its own
# action names says `kind:`.
KINDS = ("navigate", "pick", "place", "open", "close", "switch_on", "switch_off", "say", "other")
BUILTIN_KINDS = {"go_to": "navigate", "pick": "pick", "place": "place", "open": "open", "close": "close",
                 "switch_on": "switch_on", "switch_off": "switch_off", "say": "say"}
# The argument types a kind needs first (alternatives per position); further arguments are free.
KIND_ARGS: dict[str, tuple[tuple[str, ...], ...]] = {
    "navigate": (("place",),), "pick": (("object",),), "place": (("object",), ("place",)),
    "open": (("place", "device"),), "close": (("place", "device"),),
    "switch_on": (("device", "place", "object"),), "switch_off": (("device", "place", "object"),),
    "say": (), "other": (),
}


def _kind_fits(kind: str, args: list[str]) -> bool:
    need = KIND_ARGS[kind]
    return len(args) >= len(need) and all(a in ok for a, ok in zip(args, need, strict=False))


def _check_ident(value: str, what: str) -> str:
    if not _IDENT_RE.match(value):
        raise ValueError(
            f"{what} {value!r} must be an identifier (letters, digits and underscores, "
            f"not starting with a digit), e.g. living_room"
        )
    return value


def _checkone_line(value: str, what: str) -> str:
    if not value.strip():
        raise ValueError(f"{what} must not be empty")
    if "\n" in value or "\r" in value:
        raise ValueError(f"{what} must be a single line")
    return value


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Action(_Model):
    """An action the robot can run, called as ``name(arg1, arg2)``."""

    name: str
    args: list[str] = Field(default_factory=list)
    description: str = ""
    kind: Optional[str] = None  # None: from the built-in names (BUILTIN_KINDS), else "other"

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _check_ident(v, "action name")

    @field_validator("kind")
    @classmethod
    def _kind(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and v not in KINDS:
            raise ValueError(f"kind {v!r} is not a kind of action; use one of {', '.join(KINDS)}")
        return v

    @model_validator(mode="after")
    def _kind_args(self) -> Action:
        if self.kind is not None and not _kind_fits(self.kind, self.args):
            need = ", ".join(" or ".join(alts) for alts in KIND_ARGS[self.kind])
            raise ValueError(f"action {self.name!r} of kind {self.kind} takes ({need}) first, not "
                             f"({', '.join(self.args)}); fix its args or its kind")
        return self

    @property
    def effective_kind(self) -> str:
        """The declared kind; else the built-in name's (when its arguments fit that kind); else other."""
        if self.kind is not None:
            return self.kind
        builtin = BUILTIN_KINDS.get(self.name)
        return builtin if builtin is not None and _kind_fits(builtin, self.args) else "other"

    @field_validator("args")
    @classmethod
    def _args(cls, v: list[str]) -> list[str]:
        for a in v:
            _check_ident(a, "argument name")
            if a not in ARG_TYPES:
                raise ValueError(f"argument {a!r} is not an argument type; name each argument by what it "
                                 f"takes: {', '.join(ARG_TYPES)}")
        dupes = [a for i, a in enumerate(v) if a in v[:i]]
        if dupes:
            raise ValueError(f"argument {dupes[0]!r} is listed twice")
        return v

    def signature(self) -> str:
        return f"{self.name}({', '.join(self.args)})"


class Room(_Model):
    """A room, the places in it (where the robot can go), the objects in it, and the devices it
    can switch on and off (places or objects of the room, or things of their own, like a ceiling
    light). A home that names no devices at all lets a device argument be any place or object."""

    name: str
    places: list[str] = Field(default_factory=list)
    objects: list[str] = Field(default_factory=list)
    devices: Optional[list[str]] = None  # None: the room names none (and the home reads back without the key)
    # Places of the room that open and close (doors, cabinets, appliances). A home that names none
    # lets any place open and close.
    openable: Optional[list[str]] = None

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _check_ident(v, "room name")

    @field_validator("places")
    @classmethod
    def _places(cls, v: list[str]) -> list[str]:
        for p in v:
            _check_ident(p, "place name")
        return v

    @field_validator("objects")
    @classmethod
    def _objects(cls, v: list[str]) -> list[str]:
        for o in v:
            _check_ident(o, "object name")
        return v

    @field_validator("devices")
    @classmethod
    def _devices(cls, v: Optional[list[str]]) -> Optional[list[str]]:
        for d in v or []:
            _check_ident(d, "device name")
        return v

    @model_validator(mode="after")
    def _openable(self) -> Room:
        for p in self.openable or []:
            if p not in self.places:
                raise ValueError(f"openable: {p!r} is not a place of room {self.name!r}; list the places of this "
                                 f"room that open and close (add {p!r} to its places first)")
        return self


class Example(_Model):
    """A worked example: a task and the plan (action calls) that solves it."""

    task: str
    plan: list[str]

    @field_validator("task")
    @classmethod
    def _task(cls, v: str) -> str:
        return _checkone_line(v, "task")

    @field_validator("plan")
    @classmethod
    def _plan(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("plan must have at least one step")
        return v


class Environment(_Model):
    """A home: either ``rooms`` + ``actions`` (+ ``examples``), or a plain ``text``."""

    name: str
    description: str = ""
    rooms: list[Room] = Field(default_factory=list)
    actions: list[Action] = Field(default_factory=list)
    examples: list[Example] = Field(default_factory=list)
    text: str | None = None
    state: Optional[HomeState] = None  # the initial state; None: nothing known but an empty hand

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _checkone_line(v, "name")

    @field_validator("state", mode="before")
    @classmethod
    def _state_shape(cls, v: object) -> object:
        v = yaml_keys(v)
        problem = shape_problem(v) if v is not None else None
        if problem:
            raise ValueError(problem)
        return v

    @model_validator(mode="after")
    def _consistent(self) -> Environment:
        if self.text is not None:
            if not self.text.strip():
                raise ValueError("text must not be empty")
            mixed = [k for k in ("rooms", "actions", "examples", "state") if getattr(self, k)]
            if mixed:
                raise ValueError(
                    "give either text or rooms/actions/examples, not both "
                    f"(remove text or {', '.join(mixed)})"
                )
            return self
        if not self.rooms or not self.actions:
            raise ValueError("give rooms and actions (a structured home), or text (a plain-text home)")
        seen: dict[str, str] = {}
        for i, room in enumerate(self.rooms):
            entries = [(f"rooms.{i}.name", room.name)]
            entries += [(f"rooms.{i}.places", p) for p in room.places]
            entries += [(f"rooms.{i}.objects", o) for o in room.objects]
            for where, n in entries:
                if n in seen:
                    raise ValueError(
                        f"{where}: {n!r} is already used at {seen[n]}; "
                        "each room, place and object name must be unique"
                    )
                seen[n] = where
        for i, room in enumerate(self.rooms):
            own = set(room.places) | set(room.objects)
            for d in room.devices or []:
                if d not in own and d in seen:
                    raise ValueError(f"rooms.{i}.devices: {d!r} is used at {seen[d]}, not in this room; a "
                                     "device is a place or object of its room, or a name of its own")
                seen.setdefault(d, f"rooms.{i}.devices")
        actions: dict[str, Action] = {}
        for i, a in enumerate(self.actions):
            if a.name in actions:
                raise ValueError(f"actions.{i}.name: action {a.name!r} is declared twice")
            actions[a.name] = a
        for i, ex in enumerate(self.examples):
            for j, raw in enumerate(ex.plan):
                where = f"examples.{i}.plan.{j}"
                call = parse_call(raw)
                if call is None:
                    raise ValueError(f"{where}: {raw!r} is not an action call like go_to(kitchen)")
                name, args = call
                if name not in actions:
                    raise ValueError(
                        f"{where}: {raw!r} calls undeclared action {name!r}; "
                        f"declare it under actions or use one of {', '.join(actions)}"
                    )
                want = actions[name].args
                if len(args) != len(want):
                    raise ValueError(
                        f"{where}: {raw!r} passes {len(args)} argument(s) but {actions[name].signature()} "
                        f"takes {len(want)}"
                    )
        if self.state is not None:
            problem = state_problem(self.state, self)
            if problem:
                raise ValueError(f"state: {problem}")
        self._examples_run()
        return self

    def _examples_run(self) -> None:
        """Each example is checked as a plan is (world.py's check_examples: ValueError naming the
        example's line and why), since the model copies what the examples show."""
        if not EXAMPLE_CHECKS:
            raise RuntimeError("orin_llm.planning.home.world registers the examples' check; import the package")
        for check in EXAMPLE_CHECKS:
            check(self)

    @property
    def is_text(self) -> bool:
        return self.text is not None

    def action(self, name: str) -> Action | None:
        for a in self.actions:
            if a.name == name:
                return a
        return None

    def names(self, kind: str) -> list[str]:
        """The names an argument of type `kind` may take (ARG_TYPES; not "text"), in home order."""
        if kind == "place":
            return [n for r in self.rooms for n in [r.name, *r.places]]
        if kind == "object":
            return [o for r in self.rooms for o in r.objects]
        if kind == "device":
            devices = [d for r in self.rooms for d in r.devices or []]
            if devices:
                return devices
            return [n for r in self.rooms for n in [*r.places, *r.objects]]  # a home that names none
        raise ValueError(f"{kind!r} names no things of the home")

    def openable_places(self) -> set[str]:
        """The places that open and close: those the rooms list as openable, or every place of a home
        that lists none."""
        declared = [p for r in self.rooms for p in r.openable or []]
        if declared or any(r.openable is not None for r in self.rooms):
            return set(declared)
        return {p for r in self.rooms for p in r.places}


def one_line(s: str) -> str:
    """Every run of whitespace, newlines too, as one space: what a prompt line or an error may hold."""
    return " ".join(str(s).split())


def version_key(env: Environment) -> str:
    """sha256 hex of the environment's canonical JSON."""
    canonical = json.dumps(
        env.model_dump(mode="json"), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()
