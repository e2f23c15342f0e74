"""What the doctor and the build preflight read of this machine: files that may be absent, /proc/meminfo and
/proc/swaps, commands that may not run, installed packages; all behind `Probe`, so tests give fixtures."""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import platform
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Union


def read_file(path: str | Path) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def meminfo_kib(text: str | None, key: str) -> int | None:
    for line in (text or "").splitlines():
        name, _, rest = line.partition(":")
        if name.strip() == key and rest.split():
            return int(rest.split()[0])
    return None


def default_run_cmd(argv: list[str]) -> str | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def swap_kib(proc_swaps_text: str | None) -> tuple[int, int]:
    """(disk, zram) swap sizes in KiB from the text of /proc/swaps."""
    disk = zram = 0
    for line in (proc_swaps_text or "").splitlines()[1:]:
        cols = line.split()
        if len(cols) >= 3 and cols[2].isdigit():
            if cols[0].startswith("/dev/zram"):
                zram += int(cols[2])
            else:
                disk += int(cols[2])
    return disk, zram


def power_mode(query: Optional[str]) -> Optional[str]:
    return next((ln.split(":", 1)[1].strip() for ln in (query or "").splitlines()
                 if ln.strip().startswith("NV Power Mode")), None)


def _dist_version(name: str) -> Optional[str]:
    for dist in (name, name.replace("_", "-")):
        try:
            return md.version(dist)
        except md.PackageNotFoundError:
            continue
    return None


def _module_found(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None  # a top-level name: nothing is imported
    except (ImportError, ValueError):
        return False


@dataclass
class Probe:
    """Where the checks look. The defaults read this machine."""

    tegra_release: Union[str, Path] = "/etc/nv_tegra_release"
    device_model: Union[str, Path] = "/proc/device-tree/model"
    proc_meminfo: Union[str, Path] = "/proc/meminfo"
    proc_swaps: Union[str, Path] = "/proc/swaps"
    run_cmd: Callable[[list[str]], Optional[str]] = default_run_cmd  # stdout, or None if it cannot run
    dist_version: Callable[[str], Optional[str]] = _dist_version  # an installed distribution's version
    module_found: Callable[[str], bool] = _module_found
    python_version: str = field(default_factory=platform.python_version)
