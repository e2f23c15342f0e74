"""Installed versions against a pip constraints file (jetson/constraints-0.12-jetson.txt on the Orin).

A constraint only fixes a version where pip installs a package; one installed before the constraints
(JetPack's system packages, an earlier `pip install`) can differ. jetson/setup.sh runs
`python -m orin_llm.doctor.pins <file>` after its installs, and the doctor reports the differences.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..errors import OrinError
from .device_imports import DEVICE_IMPORTS, DeviceImport

CONSTRAINTS = Path(__file__).resolve().parents[2] / "jetson" / "constraints-0.12-jetson.txt"


@dataclass(frozen=True)
class Pin:
    name: str
    spec: str  # "==4.43.4", ">=0.19,<0.20", "~=0.15.0"
    installed: Optional[str]  # None: not installed (a constraint installs nothing, so that is fine)

    @property
    def ok(self) -> bool:
        from packaging.specifiers import SpecifierSet

        return self.installed is None or SpecifierSet(self.spec).contains(self.installed, prereleases=True)

    def describe(self) -> str:
        have = "not installed" if self.installed is None else self.installed
        return f"{self.name}{self.spec}: {have}" + ("" if self.ok else " (differs)")


def read_pins(path: Path) -> list[tuple[str, str]]:
    """(name, specifier) per line of a constraints file; comments and blank lines skipped."""
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        lines = Path(path).read_text().splitlines()
    except OSError as e:
        raise OrinError(f"cannot read the constraints file {path}: {e.strerror}") from None
    pins = []
    for n, line in enumerate(lines, 1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        try:
            req = Requirement(text)
        except InvalidRequirement as e:
            raise OrinError(f"{path}:{n}: not a pip constraint ({e})") from None
        pins.append((req.name, str(req.specifier)))
    return pins


def check_pins(path: Path, dist_version: Callable[[str], Optional[str]]) -> list[Pin]:
    return [Pin(name, spec, dist_version(name)) for name, spec in read_pins(path)]


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()  # PEP 503: how pip compares names


def unpinned(path: Path) -> list[DeviceImport]:
    """The distributions the device path imports (device_imports.py) that the constraints file does not pin
    to one version (`==` or `~=`): pip would take whatever is newest on the day."""
    pinned = {_normal(name) for name, spec in read_pins(path) if spec.startswith(("==", "~="))}
    return [d for d in DEVICE_IMPORTS if _normal(d.distribution) not in pinned]


def main(argv: Optional[list[str]] = None) -> int:
    """`python -m orin_llm.doctor.pins [FILE]`: each pin and what is installed; exit 1 if any differs, or if
    a package the device path imports has no pin."""
    from .host import Probe

    args = sys.argv[1:] if argv is None else argv
    path = Path(args[0]) if args else CONSTRAINTS
    try:
        pins = check_pins(path, Probe().dist_version)
    except OrinError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for pin in pins:
        print(pin.describe())
    missing = unpinned(path)
    for d in missing:
        print(f"{d.distribution}: the device path needs it ({d.where}) but {path} does not pin it")
    return 0 if all(p.ok for p in pins) and not missing else 1


if __name__ == "__main__":
    raise SystemExit(main())
