"""Loading a home: a .yaml/.yml or .json file (the shape GET /v1/environment returns), or a
plain-text .txt/.md description; every error is one line naming the file and the bad key."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from ...errors import OrinError
from .model import Action, Environment, Example, Room, one_line

EXAMPLE_HOME_PATH = Path(__file__).resolve().parents[2] / "data" / "homes" / "example_home.yaml"

YAML_SUFFIXES = (".yaml", ".yml")
TEXT_SUFFIXES = (".txt", ".md")
JSON_SUFFIXES = (".json",)  # the shape GET /v1/environment returns


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
    return one_line("; ".join(parts))


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
        raise OrinError(f"{p}: YAML syntax error at {where}: {one_line(problem)}") from None
    if data is None:
        raise OrinError(f"{p}: file is empty; it needs at least name, rooms and actions")
    if isinstance(data, dict) and "name" not in data:
        data = {"name": p.stem, **data}
    return environment_from_dict(data, source=str(p))
