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


CUDART_HINT = ("cuda-python 13 has no cuda.cudart, which TensorRT-LLM 0.12 imports: pip install "
               "cuda-python==12.6.2.post1 (pinned in jetson/constraints-0.12-jetson.txt)")
# What a failed `import tensorrt_llm` most often means on an Orin, and the next thing to try.
IMPORT_HINTS = (
    # cuda-python 13 has no cuda.cudart ("cannot import name 'cudart' from 'cuda'"), which 0.12 imports at
    # package load; J requirements-jetson.txt leaves it unpinned (jetson/constraints-0.12-jetson.txt says more).
    ("cannot import name 'cudart' from 'cuda'", CUDART_HINT),
    ("No module named 'cuda.cudart'", CUDART_HINT),
    ("No module named 'cuda'", "cuda-python is missing: pip install cuda-python==12.6.2.post1 (pinned in "
                               "jetson/constraints-0.12-jetson.txt)"),
    ("libnvinfer", "TensorRT's libraries are missing: sudo apt install nvidia-jetpack"),
    ("libcusparseLt", "cuSPARSELt is missing: jetson/setup.sh installs it (README4Jetson §1.2)"),
    ("NumPy", "a numpy 2 next to modules built for numpy 1: jetson/setup.sh pins numpy==1.26.1"),
    ("libcudart", "CUDA's runtime is not found: sudo apt install nvidia-jetpack, then open a new shell"),
    ("torch", "torch does not import: JetPack 6.1's CUDA torch is pinned in jetson/constraints-0.12-jetson.txt"),
    ("No module named 'tensorrt_llm'", "not installed in this Python: run jetson/setup.sh"),
)
IMPORT_TIMEOUT_S = 120  # tensorrt_llm imports torch and TensorRT and loads its CUDA libraries


def import_version(module: str) -> tuple[Optional[str], Optional[str]]:
    """Import ``module`` in a child Python (a broken CUDA library can abort the process that loads it):
    (its __version__, None), or (None, the import's last error line)."""
    import sys

    code = f"import {module} as m; print(getattr(m, '__version__', '?'))"
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=IMPORT_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return None, f"import {module} took more than {IMPORT_TIMEOUT_S} s"
    except OSError as e:
        return None, f"cannot start {sys.executable}: {e.strerror}"
    if proc.returncode == 0:
        lines = proc.stdout.strip().splitlines()
        return (lines[-1] if lines else "?"), None
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    if not lines:
        return None, f"the importing Python died with exit code {proc.returncode} and no message"
    return None, lines[-1].strip()


def import_hint(error: str) -> str:
    return next((hint for word, hint in IMPORT_HINTS if word in error), "see the whole error with: python3 -c "
                "'import tensorrt_llm'")


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
    import_version: Callable[[str], tuple[Optional[str], Optional[str]]] = import_version  # (version, error)
    python_version: str = field(default_factory=platform.python_version)
