"""Our C++ ops: one extension module (csrc/ops.cpp over the torch-free kernels in csrc/kernels/),
built for this CPU at install (`make install` runs `python -m orin_llm.kernels.native build`) and
only loaded at run time.

What no library offers from torch: decode attention straight over the INT8 KV cache
(int8_attention.py), quantized weights times int8 activations in integer dot products (q8_dot.py), a
decode step's whole layer in one call over both (decode_layer.py), and prompt attention over the INT8
cache (prefill_attention.py).

The build runs torch's cpp_extension (a C++ compiler and ninja: package dependencies; JetPack has
g++) with -O3 and -march/-mcpu=native, into csrc/../_native/<name>, the name keyed by the sources,
the torch version, the CPU's feature flags and the flags, so a build is never loaded on another CPU or
torch. It takes minutes on a small machine: at install, never in the daemon (a first start that
compiled did not answer /health for minutes). At run time the daemon imports the built module (well
under a second); where it is missing or was built for other sources, CPU or torch, the ops are
unavailable, the log says why and how to build it, and torch's ops run as before. The module's
constants (tile sizes, block size, head sizes) are checked against what the Python side packs for.

Kernel families: a process can run another build than this CPU's, named in one environment variable
(ORIN_LLM_KERNELS=reference, x86-avx2, x86-avx2-vnni; `native`, the default, is the installed build),
to check what another CPU runs on this one (the quality test, tests/runtime/test_kernel_quality.py,
and `bench --scenario kernels`): the reference loops, an AVX2-only CPU's kernels (the CPU on which the
default kernels once answered wrongly, issue 44), AVX2 with VNNI. Such a build is compiled on first
use into torch's extension cache (a minute or two, once, logged), never without the variable; a
family whose instructions this CPU lacks (/proc/cpuinfo's flags) is not loaded, and the reason says
which are missing.

Each op's wrapper holds a `NativeLib`, with a reason to refuse a build that did load (plain loops only,
no prompt op). The ORIN_LLM_*=0 switches that turn an op off for A/B measurements are the kernel
plan's (runtime/kernel_plan.py SWITCH_VARIABLES), read once by Engine.load, never here. `installed()` is the module
itself: what a kernel plan reads.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import importlib.util
import logging
import os
import platform
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch

from ..errors import OrinError

log = logging.getLogger(__name__)

CSRC = Path(__file__).with_name("csrc")
SOURCE = CSRC / "ops.cpp"
BUILD_ROOT = Path(__file__).with_name("_native")  # (ignored by git; `make clean` removes it)
BUILD_COMMAND = f"{Path(sys.executable).name} -m orin_llm.kernels.native build"
HOW = f"run `make install` (or `{BUILD_COMMAND}`) to build them for this machine"


@contextmanager
def build_lock(build_dir: Path) -> Iterator[None]:
    """Hold a build directory for one process at a time, with a lock the kernel drops when its holder
    dies. torch's own lock is a file (`lock`) that the builder deletes when it is done: a process killed
    while building (a build interrupted, a test timeout) leaves it behind, and every later build
    then waits for it forever, at no CPU (measured: a daemon start hung 10 minutes, when the daemon
    still built on first use). Under this lock nobody else is building, so such a file is stale: it is
    removed."""
    build_dir.mkdir(parents=True, exist_ok=True)
    with open(build_dir.parent / f".{build_dir.name}.flock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # waits only for a live builder
        try:
            stale = build_dir / "lock"
            if stale.exists():
                log.warning("%s: removing a build lock left by a process that died while building", build_dir)
                stale.unlink()
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _cpu_line() -> str:
    """/proc/cpuinfo's feature flags line ("flags" on x86, "Features" on ARM); empty where unreadable."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line
    except OSError:
        pass
    return ""


def cpu_flags() -> set[str]:
    """This CPU's feature flags as the kernel names them (avx2, fma, avx_vnni, asimddp, ...)."""
    line = _cpu_line()
    return set(line.split(":", 1)[1].split()) if ":" in line else set()


def _cpu_id() -> str:
    """What a native build depends on: the architecture and the CPU's feature flags."""
    return f"{platform.machine()} {_cpu_line()}"


FAMILY_VARIABLE = "ORIN_LLM_KERNELS"
NATIVE = "native"
X86 = ("x86_64", "AMD64")
# What -march=x86-64-v3 lets the compiler emit, as /proc/cpuinfo names it (LZCNT is "abm"): a CPU
# without one of them could fault on any instruction of the build, not only in our kernels
X86_64_V3 = ("avx", "avx2", "fma", "f16c", "bmi1", "bmi2", "abm", "movbe")


@dataclass(frozen=True)
class Family:
    """A build of our ops a process can force (FAMILY_VARIABLE): its compiler flags, and the CPU
    features it needs to run here."""
    name: str
    what: str
    arch: Optional[tuple[str, ...]]  # the target flags; None: this CPU's (-march/-mcpu=native)
    defines: tuple[str, ...] = ()
    machines: tuple[str, ...] = ()  # the platform.machine() values it compiles for (empty: any)
    needs: tuple[str, ...] = ()  # /proc/cpuinfo flags


FAMILIES = {f.name: f for f in (
    Family(NATIVE, "this CPU's kernels (-march/-mcpu=native): the installed build", None),
    # the flags of the tests' reference build (tests/runtime/native_builds.py): the two share one
    # cached module
    Family("reference", "the reference loops everywhere (ORIN_LLM_GENERIC): a CPU without x86 or NEON "
           "kernels; the NEON kernels are checked bit for bit against them (tests/native)", None,
           ("ORIN_LLM_GENERIC",)),
    Family("x86-avx2", "AVX2 + FMA + F16C, no VNNI, no AVX-512 (-march=x86-64-v3): an AVX2-only CPU",
           ("-march=x86-64-v3",), machines=X86, needs=X86_64_V3),
    Family("x86-avx2-vnni", "AVX2 with AVX-VNNI, no AVX-512 (-march=x86-64-v3 -mavxvnni)",
           ("-march=x86-64-v3", "-mavxvnni"), machines=X86, needs=X86_64_V3 + ("avx_vnni",)),
)}


def family_missing(family: Family) -> Optional[str]:
    """Why `family` cannot run on this CPU (None: it can)."""
    if family.machines and platform.machine() not in family.machines:
        return f"it is for {'/'.join(family.machines)}, this machine is {platform.machine()}"
    lacking = [f for f in family.needs if f not in cpu_flags()]
    return f"this CPU lacks {', '.join(lacking)} (/proc/cpuinfo)" if lacking else None


def runnable_families() -> list[str]:
    """The families this CPU runs, in FAMILIES' order (the reference and native ones always)."""
    return [name for name, f in FAMILIES.items() if family_missing(f) is None]


def _native_arch() -> tuple[str, ...]:
    return ("-mcpu=native",) if platform.machine() in ("aarch64", "arm64") else ("-march=native",)


def _flags(defines: tuple[str, ...], arch: Optional[tuple[str, ...]] = None) -> tuple[list[str], list[str]]:
    """(compiler flags, OpenMP flags) of a build; `arch` None: for this CPU."""
    # -fno-trapping-math: no FP exception is ever looked at, and it lets loops with clamps vectorize
    flags = ["-O3", *(_native_arch() if arch is None else arch), "-fno-trapping-math"] + [f"-D{d}" for d in defines]
    # -fopenmp: at::parallel_for is a header template whose threads are `#pragma omp parallel`;
    # without the flag the pragma is ignored and every op runs on one thread (as ours all did
    # before). The module then needs libgomp.so.1, which torch has already loaded (the dynamic
    # linker matches it by soname): one OpenMP runtime, torch's threads.
    omp = ["-fopenmp"] if "parallel backend: OpenMP" in torch.__config__.parallel_info() else []
    return flags, omp


def build_name(defines: tuple[str, ...] = (), arch: Optional[tuple[str, ...]] = None) -> str:
    """The module's name for these sources, this torch, this CPU and these flags (all of them: two
    families never share a name)."""
    flags, omp = _flags(defines, arch)
    src = SOURCE.read_bytes() + b"".join(p.read_bytes() for p in sorted(CSRC.rglob("*.h")))
    key = hashlib.sha256(src + torch.__version__.encode() + _cpu_id().encode()
                         + " ".join(flags + omp).encode()).hexdigest()[:12]
    return f"orin_llm_ops_{key}"


def _ninja_on_path() -> None:
    """torch's cpp_extension runs `ninja` from PATH. Ours is a package dependency, installed beside this
    interpreter, which a virtual environment used without activating it (its python called by path,
    as a systemd unit or a script does) leaves off PATH: put that directory on it for the build."""
    import shutil

    here = str(Path(sys.executable).parent)
    if shutil.which("ninja") is None and (Path(here) / "ninja").exists():
        os.environ["PATH"] = here + os.pathsep + os.environ.get("PATH", "")


def _python_headers() -> None:
    """torch's extension headers include Python.h, which Debian and Ubuntu (JetPack) ship apart from the
    interpreter: say so before a compiler error does."""
    import sysconfig

    where = Path(sysconfig.get_paths()["include"])
    if not (where / "Python.h").exists():
        v = f"{sys.version_info[0]}.{sys.version_info[1]}"
        raise OrinError(f"no Python.h in {where}: building our C++ ops needs this Python's headers; install "
                        f"them (Debian, Ubuntu, JetPack: sudo apt-get install python3-dev, or python{v}-dev for "
                        "a Python other than the system's) and run the build again")


def _compile(name: str, build_dir: Path, defines: tuple[str, ...], verbose: bool = False,
             arch: Optional[tuple[str, ...]] = None):
    from torch.utils import cpp_extension

    _python_headers()
    _ninja_on_path()
    flags, omp = _flags(defines, arch)
    with build_lock(build_dir):
        return cpp_extension.load(name=name, sources=[str(SOURCE)], extra_cflags=flags + omp, extra_ldflags=omp,
                                  build_directory=str(build_dir), verbose=verbose)


def cached_build(defines: tuple[str, ...], arch: Optional[tuple[str, ...]] = None) -> tuple[str, object]:
    """(name, module) of a build other than the installed one, compiled on first use into torch's
    extension cache (~/.cache/torch_extensions: minutes once) and loaded from there after."""
    from torch.utils import cpp_extension

    name = build_name(defines, arch)
    return name, _compile(name, Path(cpp_extension._get_build_directory(name, verbose=False)), defines, arch=arch)


def build(verbose: bool = False) -> Path:
    """Build the module for this machine (the install step); a no-op where it is built already.
    Returns the built library's path."""
    name = build_name()
    build_dir = BUILD_ROOT / name
    so = build_dir / f"{name}.so"
    if not so.exists():
        _compile(name, build_dir, (), verbose)
    return so


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_installed_lock = threading.Lock()
_installed: Optional[tuple[object, Optional[str]]] = None
_family: Optional[str] = None  # the family installed() loaded (read from FAMILY_VARIABLE once)


def _chosen_family() -> Family:
    name = os.environ.get(FAMILY_VARIABLE, "").strip().lower() or NATIVE
    if name not in FAMILIES:  # a typo must not measure torch's kernels under another name
        raise OrinError(f"{FAMILY_VARIABLE}={name!r}: not a kernel family; choose from {', '.join(FAMILIES)}")
    return FAMILIES[name]


def _load_family(family: Family) -> tuple[Optional[object], Optional[str]]:
    """A forced family's module, built here on first use (never without the variable)."""
    missing = family_missing(family)
    if missing:
        return None, f"{FAMILY_VARIABLE}={family.name}: not on this CPU ({missing})"
    name = build_name(family.defines, family.arch)
    log.warning("%s=%s: our C++ ops as %s, build %s (compiled on first use into torch's extension cache: "
                "a minute or two, once)", FAMILY_VARIABLE, family.name, family.what, name)
    try:
        return cached_build(family.defines, family.arch)[1], None
    except Exception as e:  # noqa: BLE001 (no compiler, no ninja, a build error: say which)
        text = str(e).strip()
        return None, (f"{FAMILY_VARIABLE}={family.name}: the build failed "
                      f"({type(e).__name__}: {text.splitlines()[-1] if text else e})")


def installed() -> tuple[Optional[object], Optional[str]]:
    """(the built module, None), or (None, why not): loaded once per process. The installed build
    unless FAMILY_VARIABLE names another family (read here, once), which is compiled on first use;
    the installed one is never built here."""
    global _installed, _family
    with _installed_lock:
        if _installed is None:
            t0 = time.perf_counter()
            chosen = _chosen_family()
            _family = chosen.name
            if chosen.name != NATIVE:
                _installed = _load_family(chosen)
                return _installed
            name = build_name()
            so = BUILD_ROOT / name / f"{name}.so"
            if not so.exists():
                others = sorted(p.name for p in BUILD_ROOT.glob("orin_llm_ops_*")) if BUILD_ROOT.exists() else []
                what = ("built for other sources, another CPU or another torch (stale)" if others
                        else "not built")
                _installed = (None, f"our C++ ops are {what}: {HOW}")
            else:
                try:
                    _installed = (_load(so, name), None)
                    log.info("loaded our C++ ops (%s) in %.2f s", so, time.perf_counter() - t0)
                except Exception as e:  # noqa: BLE001 (a broken or foreign build: say which, fall back)
                    _installed = (None, f"{so} does not load ({type(e).__name__}: {e}): {HOW}")
    return _installed


def family() -> str:
    """The kernel family of this process's module: FAMILY_VARIABLE as installed() read it."""
    if _family is None:
        installed()
    return _family


def check_constants(module, expects: dict) -> Optional[str]:
    """Why the module's constants do not match what the Python side packs for (None: they match)."""
    have = module.constants()
    wrong = [f"{k} is {have.get(k)!r} in the module, {v!r} in Python" for k, v in expects.items()
             if (tuple(have[k]) if isinstance(have.get(k), (list, tuple)) else have.get(k)) != v]
    return f"constant mismatch ({'; '.join(wrong)}): rebuild ({HOW})" if wrong else None


class NativeLib:
    """One op family's view of the module: `get()` gives the module, or None where it is not built,
    its constants do not match `expects`, or `refuse(module)` names a reason not to use it; `error` then
    says which (logged once).
    `defines` (tests only): a build with those macros instead (ORIN_LLM_GENERIC: the reference loops),
    compiled here on first use into torch's extension cache."""

    def __init__(self, stem: str, what: str, instead: str, defines: tuple[str, ...] = (),
                 refuse: Optional[Callable[[object], Optional[str]]] = None, expects: Optional[dict] = None):
        self.stem, self.what, self.instead, self.defines = stem, what, instead, defines
        self.refuse, self.expects = refuse, expects or {}
        self._lock = threading.Lock()
        self._module = None
        self.build_name: Optional[str] = None  # a test build's name, once get() has built it
        self.error: Optional[str] = None  # why it is not used here (None: it is, or not asked for yet)

    def _test_build(self):
        self.build_name, module = cached_build(self.defines)
        return module

    def get(self):
        """The module; None where it cannot be used (the reason: `error`)."""
        if self._module is not None or self.error is not None:
            return self._module
        with self._lock:
            if self._module is None and self.error is None:
                module = None
                if self.defines:
                    try:
                        module = self._test_build()
                    except Exception as e:  # noqa: BLE001 (no compiler, no ninja, a build error: say which)
                        text = str(e).strip()
                        self.error = f"{type(e).__name__}: {text.splitlines()[-1] if text else e}"
                else:
                    module, self.error = installed()
                if module is not None:
                    self.error = check_constants(module, self.expects)
                    if self.error is None and self.refuse is not None:
                        self.error = self.refuse(module)
                    self._module = module if self.error is None else None
                if self.error is not None:
                    log.warning("%s is not available (%s): %s", self.what, self.error, self.instead)
        return self._module


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m orin_llm.kernels.native",
                                description="Build our C++ ops for this machine (the install step).")
    p.add_argument("command", choices=["build"])
    p.add_argument("--verbose", action="store_true", help="show the compiler's commands")
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    so = build(verbose=args.verbose)
    module, error = installed()
    if module is None:
        print(error, file=sys.stderr)
        return 1
    prompt = "yes" if module.prefill_simd() else "no (torch's bf16 GEMMs)"
    print(f"{so} ({time.perf_counter() - t0:.0f} s): q8 kernels {module.simd()}, decode attention "
          f"{module.attention_simd()}, prompt attention op {prompt}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
