"""Our C++ ops (csrc/*.cpp), built on first use for this CPU by torch's cpp_extension.

What no library offers from torch: decode attention straight over the INT8 KV cache
(int8_attention.py), quantized weights times int8 activations in integer dot products (q8_dot.py), a
decode step's whole layer in one call over both (decode_layer.py), and prompt attention over the INT8
cache (prefill_attention.py).
Each is built once per machine with a C++ compiler and ninja (package dependencies; JetPack has
g++), with -O3 and -march/-mcpu=native. The build directory is named by the source, the torch
version, the CPU's feature flags and the defines, so a shared cache never hands a binary to another
CPU. Where a library cannot be built, or its switch is 0 (A/B measurements), `get()` returns None,
the caller runs torch's ops as before, and the log says why, once.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import platform
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

import torch

log = logging.getLogger(__name__)

CSRC = Path(__file__).with_name("csrc")


@contextmanager
def build_lock(build_dir: Path) -> Iterator[None]:
    """Hold a build directory for one process at a time, with a lock the kernel drops when its holder
    dies. torch's own lock is a file (`lock`) that the builder deletes when it is done: a process killed
    while building (a daemon stopped during its first start, a test timeout) leaves it behind, and
    every later load of that op then waits for it forever, at no CPU (measured: a daemon start hung
    10 minutes). Under this lock nobody else is building, so such a file is stale: it is removed."""
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


class NativeLib:
    """One csrc/<stem>.cpp, built on first `get()`; `switch`=0 in the environment turns it off, and
    `refuse(module)`, where given, may name a reason not to use a build that did succeed."""

    def __init__(self, stem: str, switch: str, what: str, instead: str, defines: tuple[str, ...] = (),
                 refuse: Optional[Callable[[object], Optional[str]]] = None):
        self.source = CSRC / f"{stem}.cpp"
        self.stem, self.switch, self.what, self.instead, self.defines = stem, switch, what, instead, defines
        self.refuse = refuse
        self._lock = threading.Lock()
        self._module = None
        self.build_name: Optional[str] = None  # the build directory's name, once get() has run
        self.error: Optional[str] = None  # why it is not used here (None: it is, or not asked for yet)

    def _build(self):
        from torch.utils import cpp_extension

        native = "-mcpu=native" if platform.machine() in ("aarch64", "arm64") else "-march=native"
        # -fno-trapping-math: no FP exception is ever looked at, and it lets loops with clamps vectorize
        flags = ["-O3", native, "-fno-trapping-math"] + [f"-D{d}" for d in self.defines]
        # -fopenmp: at::parallel_for is a header template whose threads are `#pragma omp parallel`;
        # without the flag the pragma is ignored and every op runs on one thread (as ours all did
        # before). The module then needs libgomp.so.1, which torch has already loaded (the dynamic
        # linker matches it by soname): one OpenMP runtime, torch's threads.
        omp = ["-fopenmp"] if "parallel backend: OpenMP" in torch.__config__.parallel_info() else []
        # the source and every header beside it (the kernels live in headers that several ops include)
        src = self.source.read_bytes() + b"".join(h.read_bytes() for h in sorted(CSRC.glob("*.h")))
        key = hashlib.sha256(src + torch.__version__.encode() + _cpu_id().encode()
                             + " ".join(flags + omp).encode()).hexdigest()[:12]
        name = f"orin_llm_{self.stem}_{key}"
        self.build_name = name
        with build_lock(Path(cpp_extension._get_build_directory(name, verbose=False))):
            return cpp_extension.load(name=name, sources=[str(self.source)], extra_cflags=flags + omp,
                                      extra_ldflags=omp, verbose=False)

    def get(self):
        """The compiled module, built on first call; None where it cannot be (the reason: `error`)."""
        if self._module is not None or self.error is not None:
            return self._module
        with self._lock:
            if self._module is None and self.error is None:
                if os.environ.get(self.switch, "1") == "0":
                    self.error = f"turned off ({self.switch}=0)"
                else:
                    try:  # (built once per machine and torch: later processes load it in a second)
                        log.info("loading %s (built on first use on this machine: ~30 s)", self.what)
                        module = self._build()
                    except Exception as e:  # noqa: BLE001 (no compiler, no ninja, a build error: say which)
                        text = str(e).strip()
                        self.error = f"{type(e).__name__}: {text.splitlines()[-1] if text else e}"
                    else:
                        self.error = self.refuse(module) if self.refuse else None
                        self._module = module if self.error is None else None
                if self.error is not None:
                    log.warning("%s is not available (%s): %s", self.what, self.error, self.instead)
        return self._module
