"""The state of a home: where the robot is, what it holds, where each object lies, which places are
open and which devices are on, as far as it is known.

A fact that is absent is unknown, and an unknown fact never blocks a step (world.py). Two facts
are always known: the hand (``holding``: one object, or null for an empty hand) and whether the
robot has said something (``said``). An object that ``object_at`` does not name lies somewhere in
the room the home lists it under.

``HomeState`` is the JSON shape of a state in a home file (its ``state:`` block), in a state update
from the robot and in a plan's predicted final state. It knows nothing of the home by itself:
``check(env)`` says whether the state names only things the home has, and what to fix if not.
"""

from __future__ import annotations

from typing import Any, Optional, Protocol

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr, ValidationError

from ...errors import OrinError


class Environment(Protocol):
    """What a state is checked against: model.Environment (which imports this module, so it is
    only described here)."""

    name: str
    actions: list[Any]

    @property
    def is_text(self) -> bool: ...

    def names(self, kind: str) -> list[str]: ...

    def openable_places(self) -> set[str]: ...

STATE_KEYS = ("robot_at", "holding", "object_at", "open", "on", "said", "done")


class HomeState(BaseModel):
    """Known facts of a home; every key is optional (absent: unknown, or the default)."""

    model_config = ConfigDict(extra="forbid")

    robot_at: Optional[StrictStr] = None  # a room or a place; null: unknown
    holding: Optional[StrictStr] = None  # the one object in hand; null: the hand is empty
    object_at: dict[StrictStr, StrictStr] = Field(default_factory=dict)  # object -> room or place
    open: dict[StrictStr, StrictBool] = Field(default_factory=dict)  # openable place -> open?
    on: dict[StrictStr, StrictBool] = Field(default_factory=dict)  # device -> on?
    said: StrictBool = False
    done: list[tuple[StrictStr, StrictStr]] = Field(default_factory=list)  # (action, thing) done

    def check(self, env: Environment) -> None:
        """OrinError naming the first fact that does not fit the home, and how to fix it."""
        problem = state_problem(self, env)
        if problem:
            raise OrinError(f"state of {env.name!r}: {problem}")


def _names(values: list[str]) -> str:
    shown = ", ".join(values[:8])
    return shown + (f", … ({len(values) - 8} more)" if len(values) > 8 else "")


def state_problem(state: HomeState, env: Environment) -> Optional[str]:
    """The first fact of `state` that does not fit `env` (with what to fix), or None."""
    if env.is_text:
        return "a plain-text home has no rooms or objects to give a state of; remove the state"
    places = env.names("place")
    objects = env.names("object")
    place_set, object_set = set(places), set(objects)
    if state.robot_at is not None and state.robot_at not in place_set:
        return f"robot_at: {state.robot_at!r} is not a room or place of this home ({_names(places)})"
    if state.holding is not None and state.holding not in object_set:
        return f"holding: {state.holding!r} is not an object of this home ({_names(objects)})"
    for obj, where in state.object_at.items():
        if obj not in object_set:
            return f"object_at: {obj!r} is not an object of this home ({_names(objects)})"
        if where not in place_set:
            return f"object_at.{obj}: {where!r} is not a room or place of this home ({_names(places)})"
    if state.holding is not None and state.holding in state.object_at:
        return (f"{state.holding!r} is both held and at {state.object_at[state.holding]!r}: an object is in one "
                f"place at a time; remove it from object_at or from holding")
    openable = env.openable_places()
    for p in state.open:
        if p not in openable:
            return (f"open: {p!r} is not a place that opens and closes ({_names(sorted(openable))}); "
                    "declare it under its room's openable list or remove it")
    devices = set(env.names("device"))
    for d in state.on:
        if d not in devices:
            return f"on: {d!r} is not a device of this home ({_names(env.names('device'))})"
    actions = {a.name for a in env.actions}
    things = place_set | object_set | devices | {""}
    for i, (action, thing) in enumerate(state.done):
        if action not in actions:
            return f"done.{i}: {action!r} is not an action of this home ({_names(sorted(actions))})"
        if thing not in things:
            return f"done.{i}: {thing!r} is not a thing of this home"
    return None


def yaml_keys(d: Any) -> Any:
    """`d` with the key YAML 1.1 reads for a bare ``on:`` (the boolean true) given back as "on"."""
    if isinstance(d, dict) and True in d and "on" not in d:
        return {("on" if k is True else k): v for k, v in d.items()}
    return d


def shape_problem(d: Any) -> Optional[str]:
    """What a user most likely got wrong in a state mapping, said plainly (pydantic says the rest)."""
    if not isinstance(d, dict):
        return f"a state must be a mapping with keys like {', '.join(STATE_KEYS)}"
    unknown = [k for k in d if k not in STATE_KEYS]
    if unknown:
        return f"unknown key {unknown[0]!r} (allowed keys: {', '.join(STATE_KEYS)})"
    held = d.get("holding")
    if isinstance(held, (list, tuple)):
        return (f"holding: the robot holds one object at a time; give one object name (or null for an empty "
                f"hand), not {len(held)} items")
    for key in ("object_at", "open", "on"):
        if key in d and d[key] is not None and not isinstance(d[key], dict):
            example = {"object_at": "{mug: sink}", "open": "{fridge: false}", "on": "{tv: true}"}[key]
            return f"{key}: must be a mapping, e.g. {key}: {example}"
    for obj, where in (d.get("object_at") or {}).items():
        if isinstance(where, (list, tuple)):
            return (f"object_at.{obj}: an object lies in one place at a time; give one room or place, "
                    f"not {len(where)}")
    return None


def _validate(d: Any, source: str) -> HomeState:
    d = yaml_keys(d)
    problem = shape_problem(d)
    if problem:
        raise OrinError(f"{source}: {problem}")
    try:
        return HomeState.model_validate(d)
    except ValidationError as err:
        parts = []
        for e in err.errors():
            where = ".".join(str(p) for p in e.get("loc", ()))
            parts.append(f"{where}: {e.get('msg', '')} (got {e.get('input')!r})")
        raise OrinError(f"{source}: " + "; ".join(parts)) from None


def state_from_dict(d: Any, env: Optional[Environment] = None, source: str = "state") -> HomeState:
    """A state mapping validated (and checked against `env` when given); OrinError says what to fix."""
    state = _validate(d, source)
    if env is not None:
        problem = state_problem(state, env)
        if problem:
            raise OrinError(f"{source}: {problem}")
    return state


def apply_update(state: HomeState, update: dict, env: Optional[Environment] = None) -> HomeState:
    """`state` with what the robot reports in `update` (the same keys, each optional).

    robot_at, holding, said and done replace; object_at, open and on are merged entry by entry, a
    null entry forgetting that fact (unknown again). What the update says about the hand moves the
    object: holding o takes o out of object_at, and putting the held object somewhere empties the
    hand. With `env`, the result is checked against the home. The given state is not changed; an
    update that does not fit raises OrinError and changes nothing.
    """
    update = yaml_keys(update)
    problem = shape_problem(update)
    if problem:
        raise OrinError(f"state update: {problem}")
    merged = state.model_dump()
    for key in ("object_at", "open", "on"):
        for name, value in (update.get(key) or {}).items():
            if value is None:
                merged[key].pop(name, None)
            else:
                merged[key][name] = value
    for key in ("robot_at", "holding", "said", "done"):
        if key in update:
            merged[key] = update[key]
    if "said" in update and update["said"] is None:
        merged["said"] = False
    if "done" in update and update["done"] is None:
        merged["done"] = []
    held = merged["holding"]
    given_places = update.get("object_at") or {}
    if "holding" in update and held is not None and held not in given_places:
        merged["object_at"].pop(held, None)
    if "holding" not in update and state.holding is not None and given_places.get(state.holding) is not None:
        merged["holding"] = None
    return state_from_dict(merged, env, source="state update")
