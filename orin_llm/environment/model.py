"""The home the planner is given, as data: rooms with places, objects and devices, the actions the
robot can run, a few worked examples; or a plain-text description (``text``). Validated strictly on
construction, so a home that reaches the planner names each thing once and its examples call
declared actions. Loading a file: parse.py; the chat messages it becomes: render.py.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .calls import parse_call

_IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# What an action's argument can name: a room or place, an object, a switchable device, or free text
# (a bounded quoted string). The plan grammar (home/grammar.py) has one rule per type.
ARG_TYPES = ("place", "object", "device", "text")


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

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _check_ident(v, "action name")

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

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _checkone_line(v, "name")

    @model_validator(mode="after")
    def _consistent(self) -> Environment:
        if self.text is not None:
            if not self.text.strip():
                raise ValueError("text must not be empty")
            mixed = [k for k in ("rooms", "actions", "examples") if getattr(self, k)]
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
        return self

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


def one_line(s: str) -> str:
    """Every run of whitespace, newlines too, as one space: what a prompt line or an error may hold."""
    return " ".join(str(s).split())


def version_key(env: Environment) -> str:
    """sha256 hex of the environment's canonical JSON."""
    canonical = json.dumps(
        env.model_dump(mode="json"), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()
