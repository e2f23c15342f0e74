"""The home environment the planner is given, and how it becomes chat messages.

An environment is either structured (rooms with places and objects, the actions the
robot can run, a few worked examples) or a plain-text description (``text``). It is
rendered deterministically into a chat prefix: the same Environment always gives
byte-identical messages, so an inference server can cache the prefix.

The planner answers with one action call per line, e.g. ``go_to(kitchen)``;
orin_llm/home/steps.py checks such an answer against the home, line by line.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from orin_llm.errors import OrinError

EXAMPLE_HOME_PATH = Path(__file__).resolve().parent / "data" / "homes" / "example_home.yaml"

YAML_SUFFIXES = (".yaml", ".yml")
TEXT_SUFFIXES = (".txt", ".md")
JSON_SUFFIXES = (".json",)  # the shape GET /v1/environment returns

SYSTEM_PROMPT = (
    "You are the planner of a home robot. Turn the user's task into a plan.\n"
    "Answer with one action call per line, for example go_to(kitchen). "
    "Use only the allowed actions and the names of this home. Write nothing else."
)

_IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# What an action's argument can name: a room or place, an object, a switchable device, or free text
# (a bounded quoted string). The plan grammar (home/grammar.py) has one rule per type.
ARG_TYPES = ("place", "object", "device", "text")
# Optional list marker in front of a step: "1.", "2)", "Step 3:", "-", "*", "•".
_MARKER_RE = re.compile(r"^(?:(?:step\s*)?\d+\s*[.):]|[-*•+])\s*", re.IGNORECASE)
_CALL_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\s*\((.*)\)\s*[.;,]?$")


def _check_ident(value: str, what: str) -> str:
    if not _IDENT_RE.match(value):
        raise ValueError(
            f"{what} {value!r} must be an identifier (letters, digits and underscores, "
            f"not starting with a digit), e.g. living_room"
        )
    return value


def _check_one_line(value: str, what: str) -> str:
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
        return _check_one_line(v, "task")

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
        return _check_one_line(v, "name")

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
                call = _parse_call(raw)
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


# ---------------------------------------------------------------------------
# Loading


def _one_line(s: str) -> str:
    return " ".join(str(s).split())


_MODEL_FOR_LOC = {"rooms": Room, "actions": Action, "examples": Example}


def _allowed_keys(loc: tuple) -> list[str]:
    parent = loc[:-1]
    model: Any = Environment
    if len(parent) == 2 and parent[0] in _MODEL_FOR_LOC and isinstance(parent[1], int):
        model = _MODEL_FOR_LOC[parent[0]]
    elif parent:
        return []
    return list(model.model_fields)


def _format_errors(err: ValidationError) -> str:
    parts = []
    for e in err.errors():
        loc = tuple(e.get("loc", ()))
        path = ".".join(str(p) for p in loc)
        kind = e.get("type", "")
        msg = str(e.get("msg", ""))
        if kind == "extra_forbidden":
            allowed = _allowed_keys(loc)
            msg = f"unknown key {str(loc[-1])!r}"
            if allowed:
                msg += f" (allowed keys: {', '.join(allowed)})"
        elif kind == "missing":
            msg = "missing required key"
        elif kind.startswith("value_error") or kind == "assertion_error":
            msg = msg.split(", ", 1)[1] if msg.startswith(("Value error, ", "Assertion failed, ")) else msg
        else:
            got = repr(e.get("input"))
            if len(got) > 40:
                got = got[:37] + "..."
            msg = f"{msg} (got {got})"
        parts.append(f"{path}: {msg}" if path else msg)
    return _one_line("; ".join(parts))


def environment_from_dict(d: Any, source: str = "<dict>") -> Environment:
    """Validate a parsed mapping into an Environment; OrinError names the bad key."""
    if not isinstance(d, dict):
        raise OrinError(f"{source}: the environment must be a mapping with keys like name, rooms, actions")
    try:
        return Environment.model_validate(d)
    except ValidationError as err:
        raise OrinError(f"{source}: {_format_errors(err)}") from None


def load_environment(path: str | Path) -> Environment:
    """Load an environment from a .yaml/.yml or .json file, or a plain-text .txt/.md file."""
    p = Path(path)
    if not p.exists():
        raise OrinError(f"{p}: environment file not found; check the path")
    if not p.is_file():
        raise OrinError(f"{p}: is not a file; give the path of a .yaml, .yml, .json, .txt or .md environment file")
    suffix = p.suffix.lower()
    if suffix not in YAML_SUFFIXES + JSON_SUFFIXES + TEXT_SUFFIXES:
        raise OrinError(f"{p}: unsupported file type {p.suffix!r}; use .yaml, .yml, .json, .txt or .md")
    try:
        content = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise OrinError(f"{p}: not valid UTF-8 (byte {err.start}); save the file as UTF-8") from None
    except OSError as err:
        raise OrinError(f"{p}: cannot read file ({err.strerror}); check its permissions") from None

    if suffix in TEXT_SUFFIXES:
        if not content.strip():
            raise OrinError(f"{p}: file is empty; describe the home, its rooms and the robot's actions")
        return environment_from_dict({"name": p.stem, "text": content.strip()}, source=str(p))

    if suffix in JSON_SUFFIXES:
        try:
            data = json.loads(content)
        except json.JSONDecodeError as err:
            raise OrinError(f"{p}: JSON syntax error at line {err.lineno}, column {err.colno}: {err.msg}") from None
        if isinstance(data, dict) and "name" not in data:
            data = {"name": p.stem, **data}
        return environment_from_dict(data, source=str(p))
    try:
        data = yaml.safe_load(content)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
        problem = getattr(err, "problem", None) or str(err)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "unknown line"
        raise OrinError(f"{p}: YAML syntax error at {where}: {_one_line(problem)}") from None
    if data is None:
        raise OrinError(f"{p}: file is empty; it needs at least name, rooms and actions")
    if isinstance(data, dict) and "name" not in data:
        data = {"name": p.stem, **data}
    return environment_from_dict(data, source=str(p))


# ---------------------------------------------------------------------------
# Steps


@dataclass
class Step:
    """One action call of a plan; `types` (the action's argument types, when known) quote its text
    arguments when it is written back."""

    action: str
    args: list[str] = field(default_factory=list)
    types: list[str] = field(default_factory=list, compare=False, repr=False)

    def __str__(self) -> str:
        return format_call(self.action, self.args, self.types or None)

    def as_dict(self) -> dict:
        return {"action": self.action, "args": list(self.args)}


def _quote(arg: str) -> str:
    plain = arg and arg == arg.strip() and not any(c in arg for c in ",()") and arg[0] not in "\"'"
    if plain:
        return arg
    return f"'{arg}'" if '"' in arg else f'"{arg}"'


def format_call(action: str, args: list[str], types: list[str] | None = None) -> str:
    """Render an action call canonically: ``place(mug, sink)``; with the action's argument types,
    a text argument is always quoted (``say("The tv is off")``), as the plan grammar writes it."""
    types = types or [""] * len(args)
    quoted = [_quote_text(a) if t == "text" else _quote(a) for a, t in zip(args, types, strict=True)]
    return f"{action}({', '.join(quoted)})"


def _quote_text(arg: str) -> str:
    return f'"{arg}"' if '"' not in arg else f"'{arg}'"


def _split_args(s: str) -> list[str] | None:
    """Split call arguments on commas, honouring "..." / '...' quoting; None if malformed."""
    s = s.strip()
    if not s:
        return []
    args: list[str] = []
    i, n = 0, len(s)
    while True:
        while i < n and s[i].isspace():
            i += 1
        if i < n and s[i] in "\"'":
            q = s[i]
            end = s.find(q, i + 1)
            if end < 0:
                return None
            token = s[i + 1 : end]
            i = end + 1
            while i < n and s[i].isspace():
                i += 1
            if i < n and s[i] != ",":
                return None
        else:
            start = i
            while i < n and s[i] != ",":
                if s[i] in "()":
                    return None
                i += 1
            token = s[start:i].strip()
            if not token:
                return None
        args.append(token)
        if i >= n:
            return args
        i += 1  # skip the comma
        if i >= n:
            return None  # trailing comma


def _parse_call(line: str) -> tuple | None:
    """``'  2. pick(mug)'`` -> ``('pick', ['mug'])``; None when the line is not a call."""
    s = line.strip()
    s = _MARKER_RE.sub("", s, count=1).strip().strip("`").strip()
    m = _CALL_RE.match(s)
    if not m:
        return None
    args = _split_args(m.group(2))
    if args is None:
        return None
    return m.group(1), args


# ---------------------------------------------------------------------------
# Rendering


def _render_home(env: Environment) -> str:
    lines = [f"Home: {_one_line(env.name)}"]
    if env.description.strip():
        lines.append(_one_line(env.description))
    if env.is_text:
        lines.append(str(env.text).strip())
        return "\n".join(lines)
    lines.append("Rooms:")
    for room in env.rooms:
        line = f"- {room.name}."
        if room.places:
            line += f" Places: {', '.join(room.places)}."
        if room.objects:
            line += f" Objects: {', '.join(room.objects)}."
        if room.devices:
            line += f" Devices: {', '.join(room.devices)}."
        lines.append(line)
    lines.append("Actions:")
    for a in env.actions:
        desc = _one_line(a.description)
        lines.append(f"- {a.signature()}: {desc}" if desc else f"- {a.signature()}")
    return "\n".join(lines)


def system_message(env: Environment) -> dict[str, str]:
    return {"role": "system", "content": f"{SYSTEM_PROMPT}\n\n{_render_home(env)}"}


def task_message(task: str, observations: list[str] | None = None) -> dict[str, str]:
    """The user turn for a request: ``Task: ...`` plus an ``Observations:`` block."""
    task = _one_line(task)
    if not task:
        raise OrinError("the task is empty; say what the robot should do, e.g. 'bring me the mug'")
    content = f"Task: {task}"
    obs = [_one_line(o) for o in (observations or []) if _one_line(o)]
    if obs:
        content += "\nObservations:\n" + "\n".join(f"- {o}" for o in obs)
    return {"role": "user", "content": content}


def prefix_messages(env: Environment) -> list[dict[str, str]]:
    """System message (role + home) followed by the examples as user/assistant turns."""
    messages = [system_message(env)]
    for ex in env.examples:
        messages.append(task_message(ex.task))
        steps = []
        for raw in ex.plan:
            call = _parse_call(raw)
            assert call is not None  # validated by Environment
            action = env.action(call[0])
            steps.append(format_call(*call, types=action.args if action else None))
        messages.append({"role": "assistant", "content": "\n".join(steps)})
    return messages


def version_key(env: Environment) -> str:
    """sha256 hex of the environment's canonical JSON."""
    canonical = json.dumps(
        env.model_dump(mode="json"), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()
