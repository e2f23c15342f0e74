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
import platform
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

import torch

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


def _cpu_id() -> str:
    """What a native build depends on: the architecture and the CPU's feature flags."""
    flags = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                flags = line
                break
    except OSError:
        pass
    return f"{platform.machine()} {flags}"


def _flags(defines: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """(compiler flags, OpenMP flags) of a build."""
    native = "-mcpu=native" if platform.machine() in ("aarch64", "arm64") else "-march=native"
    # -fno-trapping-math: no FP exception is ever looked at, and it lets loops with clamps vectorize
    flags = ["-O3", native, "-fno-trapping-math"] + [f"-D{d}" for d in defines]
    # -fopenmp: at::parallel_for is a header template whose threads are `#pragma omp parallel`;
    # without the flag the pragma is ignored and every op runs on one thread (as ours all did
    # before). The module then needs libgomp.so.1, which torch has already loaded (the dynamic
    # linker matches it by soname): one OpenMP runtime, torch's threads.
    omp = ["-fopenmp"] if "parallel backend: OpenMP" in torch.__config__.parallel_info() else []
    return flags, omp


def build_name(defines: tuple[str, ...] = ()) -> str:
    """The module's name for these sources, this torch, this CPU and these flags."""
    flags, omp = _flags(defines)
    src = SOURCE.read_bytes() + b"".join(p.read_bytes() for p in sorted(CSRC.rglob("*.h")))
    key = hashlib.sha256(src + torch.__version__.encode() + _cpu_id().encode()
                         + " ".join(flags + omp).encode()).hexdigest()[:12]
    return f"orin_llm_ops_{key}"


def _compile(name: str, build_dir: Path, defines: tuple[str, ...], verbose: bool = False):
    from torch.utils import cpp_extension

    flags, omp = _flags(defines)
    with build_lock(build_dir):
        return cpp_extension.load(name=name, sources=[str(SOURCE)], extra_cflags=flags + omp, extra_ldflags=omp,
                                  build_directory=str(build_dir), verbose=verbose)


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


def installed() -> tuple[Optional[object], Optional[str]]:
    """(the built module, None), or (None, why not): loaded once per process, never built here."""
    global _installed
    with _installed_lock:
        if _installed is None:
            t0 = time.perf_counter()
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
        from torch.utils import cpp_extension

        name = self.build_name = build_name(self.defines)
        return _compile(name, Path(cpp_extension._get_build_directory(name, verbose=False)), self.defines)

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
