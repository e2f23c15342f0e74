"""Building our C++ ops (runtime/native.py): a process killed while it built one must not leave every
later start waiting forever. torch's cpp_extension marks a build with a `lock` file that only the
builder deletes; the daemon's first start stopped mid-build left one, and the next start sat at no
CPU for 10 minutes (found measuring the 3B-shaped engine). Builds now serialize on a kernel lock,
which dies with its holder, and under it such a file is known stale and removed."""

from __future__ import annotations

import fcntl
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from torch.utils import cpp_extension

from orin_llm.runtime.native import NativeLib, build_lock

from ..conftest import ROOT


def small_lib() -> NativeLib:
    """The q8_dot plain-loop build: small, and tests/runtime/test_q8_dot.py builds it anyway."""
    return NativeLib("q8_dot", "ORIN_LLM_Q8_DOT", "q8_dot (plain loops)", "-", defines=("ORIN_LLM_Q8_GENERIC",))


def test_a_lock_left_by_a_killed_build_does_not_hang_the_next_load():
    lib = small_lib()
    if lib.get() is None:
        pytest.skip(f"q8_dot does not build here: {lib.error}")
    stale = Path(cpp_extension._get_build_directory(lib.build_name, verbose=False)) / "lock"
    stale.touch()  # as a builder killed mid-build leaves it
    code = ("from tests.runtime.test_native import small_lib\n"
            "lib = small_lib()\nassert lib.get() is not None, lib.error\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert not stale.exists() and "removing a build lock left by a process that died" in r.stderr


def test_the_build_lock_excludes_others_and_dies_with_its_holder(tmp_path):
    build_dir = tmp_path / "orin_llm_x_0"
    code = ("import time\nfrom pathlib import Path\nfrom orin_llm.runtime.native import build_lock\n"
            f"with build_lock(Path({str(build_dir)!r})):\n    print('held', flush=True)\n    time.sleep(120)\n")
    holder = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with open(tmp_path / ".orin_llm_x_0.flock", "a") as f, pytest.raises(BlockingIOError):
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a live builder holds it
        (build_dir / "lock").touch()  # what a builder killed now leaves
    finally:
        holder.kill()
        holder.wait()
    got = threading.Event()

    def take():
        with build_lock(build_dir):
            got.set()

    t = threading.Thread(target=take, daemon=True)
    t.start()
    assert got.wait(30), "the lock outlived the process that held it"
    assert not (build_dir / "lock").exists()
