"""Load the calibration / held-out planning tasks and their homes (see calibration/README.md)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from orin_llm.errors import OrinError
from orin_llm.planning.home import Environment, load_environment

SPLITS = ("calib", "heldout")


@dataclass
class CalibrationItem:
    """One planning task: which home, what to do, and a reference plan (action calls); `goal`, where the
    task's writer gave one (else the goal is what the reference plan makes true)."""

    id: str
    home: str
    task: str
    reference_plan: list[str] = field(default_factory=list)
    goal: Optional[list[str]] = None


def default_root() -> Path:
    """The repository's calibration/ directory (next to the orin_llm package)."""
    return Path(__file__).resolve().parents[2] / "calibration"


def _root(root: Path | str | None) -> Path:
    r = default_root() if root is None else Path(root)
    if not r.is_dir():
        raise OrinError(
            f"calibration data not found at {r}; run from a source checkout "
            "(python calibration/generate.py regenerates it) or pass root=<dir>"
        )
    return r


def load_split(split: str, root: Path | str | None = None) -> list[CalibrationItem]:
    """Read ``<root>/<split>.jsonl``; split is ``calib`` or ``heldout``."""
    if split not in SPLITS:
        raise OrinError(f"unknown split {split!r}; use one of {', '.join(SPLITS)}")
    path = _root(root) / f"{split}.jsonl"
    if not path.is_file():
        raise OrinError(f"{path}: split file not found; run python calibration/generate.py to create it")
    items: list[CalibrationItem] = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise OrinError(
                    f"{path}:{lineno}: invalid JSON ({err.msg}); fix or regenerate the file"
                ) from None
            if not isinstance(row, dict):
                raise OrinError(f"{path}:{lineno}: expected a JSON object per line")
            missing = [k for k in ("id", "home", "task", "reference_plan") if k not in row]
            if missing:
                raise OrinError(f"{path}:{lineno}: missing key(s) {', '.join(missing)}")
            plan = row["reference_plan"]
            if not isinstance(plan, list) or not all(isinstance(s, str) for s in plan):
                raise OrinError(f"{path}:{lineno}: reference_plan must be a list of strings")
            items.append(CalibrationItem(str(row["id"]), str(row["home"]), str(row["task"]), list(plan)))
    return items


def home_names(root: Path | str | None = None) -> list[str]:
    """Names (file stems) of the homes under ``<root>/homes``, sorted."""
    homes = _root(root) / "homes"
    return sorted(p.stem for p in homes.glob("*.yaml")) if homes.is_dir() else []


def load_home(name: str, root: Path | str | None = None) -> Environment:
    """Load ``<root>/homes/<name>.yaml``."""
    path = _root(root) / "homes" / f"{name}.yaml"
    if not path.is_file():
        available = home_names(root)
        raise OrinError(f"no home {name!r} in {path.parent}; available: {', '.join(available) or 'none'}")
    return load_environment(path)
