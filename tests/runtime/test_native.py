"""Our C++ ops (kernels/native.py): one module, built at install and only loaded at run time (a daemon
never compiles: its first start on a fresh machine once spent minutes compiling and did not answer
/health); a missing or stale build leaves the ops unavailable with how to build them; the module's
constants are checked against what the Python side packs for. And the build step's lock: a process
killed while it built must not leave every later build waiting forever (torch's cpp_extension marks
a build with a `lock` file that only the builder deletes; builds serialize on a kernel lock, which
dies with its holder, and under it such a file is known stale and removed)."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from torch.utils import cpp_extension

from orin_llm.errors import OrinError
from orin_llm.kernels import int8_attention, native, q8_dot
from orin_llm.kernels.native import NativeLib, build_lock
from tests.runtime import native_builds

from ..conftest import ROOT


def test_the_installed_module_loads_in_a_fresh_process_without_compiling():
    """What a daemon start does: import the built module. It must be there (`make install` builds it:
    this fails until it has run), load in seconds, and never import torch's compiler driver."""
    code = ("import sys, time\nimport torch\nfrom orin_llm.kernels import native\n"
            "t0 = time.perf_counter()\nmodule, error = native.installed()\nt = time.perf_counter() - t0\n"
            "assert module is not None, error\n"
            "assert 'torch.utils.cpp_extension' not in sys.modules, 'the load ran the compiler driver'\n"
            "print(t, module.simd(), module.attention_simd(), module.prefill_simd())\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    seconds = float(r.stdout.split()[0])
    assert seconds < 5, seconds  # ~0.1 s here; a build is minutes


def test_a_missing_or_stale_build_leaves_the_ops_off_and_says_how_to_build(monkeypatch, tmp_path):
    monkeypatch.setattr(native, "BUILD_ROOT", tmp_path)
    monkeypatch.setattr(native, "_installed", None)
    lib = NativeLib("q8_dot", "the kernels", "torch's kernels")
    assert lib.get() is None
    assert "not built" in lib.error and "make install" in lib.error and "orin_llm.kernels.native build" in lib.error
    (tmp_path / "orin_llm_ops_0123456789ab").mkdir()  # a build for other sources, CPU or torch
    monkeypatch.setattr(native, "_installed", None)
    lib = NativeLib("q8_dot", "the kernels", "torch's kernels")
    assert lib.get() is None and "stale" in lib.error and "make install" in lib.error


def test_the_module_constants_are_the_ones_python_packs_for():
    module, error = native.installed()
    assert module is not None, error
    c = module.constants()
    assert (c["BLOCK"], c["ROWS"], c["QROWS"]) == (q8_dot.BLOCK, q8_dot.ROWS, q8_dot.QROWS)
    assert tuple(c["HEAD_DIMS"]) == int8_attention.HEAD_DIMS


def test_a_constant_mismatch_is_an_error_not_wrong_numbers():
    """Python packing tiles of 4 rows for a module compiled for 8 would give wrong outputs silently:
    the op is refused instead, and the reason names the constant."""
    lib = NativeLib("q8_dot", "the kernels", "torch's kernels",
                    expects={"BLOCK": 32, "ROWS": 4, "QROWS": 8})
    assert lib.get() is None
    assert lib.error.startswith("constant mismatch (ROWS is 8 in the module, 4 in Python)"), lib.error
    lib = NativeLib("x", "the op", "-", expects={"HEAD_DIMS": (64, 96)})
    assert lib.get() is None and "HEAD_DIMS is (64, 128) in the module, (64, 96) in Python" in lib.error
    assert NativeLib("x", "the op", "-", expects={"HEAD_DIMS": (64, 128)}).get() is not None


def test_the_build_step_is_a_no_op_once_built():
    module, error = native.installed()
    assert module is not None, error
    r = subprocess.run([sys.executable, "-m", "orin_llm.kernels.native", "build"], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert native.build_name() in r.stdout and f"q8 kernels {module.simd()}" in r.stdout


def test_a_lock_left_by_a_killed_build_does_not_hang_the_next_build():
    lib = native_builds.generic()
    if lib.get() is None:
        pytest.skip(f"the reference build does not build here: {lib.error}")
    stale = Path(cpp_extension._get_build_directory(lib.build_name, verbose=False)) / "lock"
    stale.touch()  # as a builder killed mid-build leaves it
    code = ("from tests.runtime.native_builds import generic\n"
            "lib = generic()\nassert lib.get() is not None, lib.error\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert not stale.exists() and "removing a build lock left by a process that died" in r.stderr


def test_the_build_lock_excludes_others_and_dies_with_its_holder(tmp_path):
    build_dir = tmp_path / "orin_llm_x_0"
    code = ("import time\nfrom pathlib import Path\nfrom orin_llm.kernels.native import build_lock\n"
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


# Kernel families (native.FAMILIES): what each forced build must report it runs. The x86 families' q8
# tiles are x86.h's (AVX2, with VNNI where the family has it), their attention the reference loops (no
# AVX-512), and no prompt op (it needs AVX-512 VNNI and BF16); the reference family runs the loops
# everywhere, and q8_dot takes them (asked for: measured, not refused as slower than torch's).
FORCED = {"reference": ("generic", "generic", False), "x86-avx2": ("avx2", "generic", False),
          "x86-avx2-vnni": ("avx2-vnni", "generic", False)}
REPORT = ("import json\nfrom orin_llm.kernels import native, q8_dot\nmodule, error = native.installed()\n"
          "assert module is not None, error\n"
          "print(json.dumps([native.family(), module.simd(), module.attention_simd(), bool(module.prefill_simd()),"
          " q8_dot.op() is not None]))\n")


@pytest.mark.parametrize("family", sorted(FORCED))
def test_a_forced_family_is_built_on_first_use_and_reports_what_it_runs(family):
    missing = native.family_missing(native.FAMILIES[family])
    if missing:
        pytest.skip(f"{family}: {missing}")
    env = {**os.environ, native.FAMILY_VARIABLE: family}
    r = subprocess.run([sys.executable, "-c", REPORT], cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout.splitlines()[-1]) == [family, *FORCED[family], True]
    # the build is logged; a second process finds it in the cache (torch's extension cache, not ours)
    assert f"{native.FAMILY_VARIABLE}={family}" in r.stderr
    name = native.build_name(native.FAMILIES[family].defines, native.FAMILIES[family].arch)
    assert not (native.BUILD_ROOT / name).exists()


def test_every_family_has_a_build_name_of_its_own_and_the_reference_is_the_tests_build():
    names = {f.name: native.build_name(f.defines, f.arch) for f in native.FAMILIES.values()}
    assert len(set(names.values())) == len(names), names
    assert names["native"] == native.build_name()
    assert names["reference"] == native.build_name(native_builds.generic().defines)


def test_the_default_is_the_installed_build(monkeypatch):
    monkeypatch.delenv(native.FAMILY_VARIABLE, raising=False)
    monkeypatch.setattr(native, "_installed", None)
    monkeypatch.setattr(native, "_family", None)
    module, error = native.installed()
    assert module is not None, error
    assert native.family() == "native" and module.__name__ == native.build_name()


def test_a_family_this_cpu_lacks_is_not_loaded_and_says_which_instructions(monkeypatch):
    monkeypatch.setattr(native, "cpu_flags", lambda: {"avx", "avx2", "fma", "f16c", "sse2"})
    monkeypatch.setattr(native.platform, "machine", lambda: "x86_64")
    assert native.family_missing(native.FAMILIES["x86-avx2"]) == "this CPU lacks bmi1, bmi2, abm, movbe (/proc/cpuinfo)"
    assert native.runnable_families() == ["native", "reference"]
    monkeypatch.setenv(native.FAMILY_VARIABLE, "x86-avx2-vnni")
    monkeypatch.setattr(native, "_installed", None)
    monkeypatch.setattr(native, "_family", None)
    module, error = native.installed()
    assert module is None and error.startswith("ORIN_LLM_KERNELS=x86-avx2-vnni: not on this CPU (this CPU lacks bmi1")
    assert "avx_vnni" in error and native.family() == "x86-avx2-vnni"
    monkeypatch.setattr(native.platform, "machine", lambda: "aarch64")
    assert native.family_missing(native.FAMILIES["x86-avx2"]) == "it is for x86_64/AMD64, this machine is aarch64"


def test_an_unknown_family_is_an_error_that_lists_them(monkeypatch):
    monkeypatch.setenv(native.FAMILY_VARIABLE, "avx9")
    monkeypatch.setattr(native, "_installed", None)
    monkeypatch.setattr(native, "_family", None)
    with pytest.raises(OrinError, match="ORIN_LLM_KERNELS='avx9': not a kernel family; choose from native, "
                                        "reference, x86-avx2, x86-avx2-vnni"):
        native.installed()


def test_the_build_finds_the_venvs_own_ninja_when_the_venv_is_not_activated(monkeypatch):
    """A venv's python called by path (a systemd unit, a script) leaves its bin off PATH, where pip put
    ninja (a package dependency): cpp_extension then said "Ninja is required" (seen in the arm64 userland,
    jetson/aarch64_check.sh). The build puts that directory on PATH; a ninja already on PATH stays first."""
    import shutil

    here = Path(sys.executable).parent
    if not (here / "ninja").exists():
        pytest.skip(f"no ninja beside {sys.executable}: this interpreter's environment has none of its own")
    monkeypatch.setenv("PATH", "/nonexistent")
    assert shutil.which("ninja") is None
    native._ninja_on_path()
    assert shutil.which("ninja") == str(here / "ninja")
    monkeypatch.setenv("PATH", "/usr/bin")
    native._ninja_on_path()
    assert os.environ["PATH"].split(os.pathsep)[0] == ("/usr/bin" if shutil.which("ninja", path="/usr/bin")
                                                       else str(here))


def test_a_python_without_its_headers_is_told_to_install_them(monkeypatch, tmp_path):
    """Debian and JetPack ship Python.h in python3-dev, apart from the interpreter (seen in the arm64
    userland): the build says so before the compiler's error."""
    import sysconfig

    real = sysconfig.get_paths
    monkeypatch.setattr(sysconfig, "get_paths", lambda *a, **kw: {**real(*a, **kw), "include": str(tmp_path)})
    with pytest.raises(OrinError, match=r"no Python\.h in .*apt-get install python3-dev"):
        native._compile("never", tmp_path / "build", ())
