"""The kernel cores (orin_llm/kernels/csrc/kernels), torch-free, built with plain compilers: this
machine's kernels against the reference loops (tests/native/kernels_test.cpp), and the ARM (NEON)
kernels cross-compiled for the Orin's core and run under qemu-aarch64 with a CPU that has the
dot-product instructions. No ARM machine is needed: Debian's g++-aarch64-linux-gnu and
qemu-user-static (.ci/run installs them)."""

from __future__ import annotations

import platform
import shutil
import subprocess
from pathlib import Path

import pytest

from ..conftest import ROOT

DRIVER = ROOT / "tests" / "native" / "kernels_test.cpp"
INSTALL = "apt-get update && apt-get install -y g++-aarch64-linux-gnu qemu-user-static"
FLAGS = ["-std=c++17", "-O3", "-fno-trapping-math", "-Wall"]


def _tool(*names: str) -> str:
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    pytest.fail(f"{' or '.join(names)} is not installed: the ARM kernels are tested by cross-compiling them "
                f"and running them under qemu ({INSTALL})")


def _build_and_run(compiler: list[str], out: Path, runner: list[str]) -> str:
    build = subprocess.run([*compiler, *FLAGS, "-o", str(out), str(DRIVER)], capture_output=True, text=True,
                           timeout=600)
    assert build.returncode == 0, build.stderr[-4000:]
    run = subprocess.run([*runner, str(out)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and run.stdout.rstrip().endswith(" 0 failed"), run.stdout[-4000:] + run.stderr
    return run.stdout


def _cpu_flags() -> set[str]:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith(("flags", "Features")):
            return set(line.split(":", 1)[1].split())
    return set()


def test_this_cpus_kernels_are_bit_for_bit_the_reference_loops(tmp_path):
    out = _build_and_run([_tool("g++"), "-march=native" if platform.machine() == "x86_64" else "-mcpu=native"],
                         tmp_path / "kernels_test", [])
    first = out.splitlines()[0]
    if {"avx2", "fma", "f16c"} <= _cpu_flags():  # the x86 kernels, not the reference twice
        assert "q8 avx2" in first, first
    if "avx512f" in _cpu_flags():
        assert "attention avx512" in first, first
    assert out.count("\nok ") >= 40


def test_the_arm_kernels_are_bit_for_bit_the_reference_loops_under_qemu(tmp_path):
    """-mcpu=cortex-a78ae: the Jetson AGX Orin's core (NEON with sdot); qemu's `max` CPU runs it."""
    gxx = _tool("aarch64-linux-gnu-g++")
    qemu = _tool("qemu-aarch64", "qemu-aarch64-static")
    sysroot = Path("/usr/aarch64-linux-gnu")
    assert sysroot.is_dir(), f"no AArch64 libraries at {sysroot} ({INSTALL})"
    out = _build_and_run([gxx, "-mcpu=cortex-a78ae"], tmp_path / "kernels_test_arm",
                         [qemu, "-cpu", "max", "-L", str(sysroot)])
    assert out.splitlines()[0] == "kernels: q8 neon-dotprod, attention neon, prompt op no", out.splitlines()[0]
    assert out.count("\nok ") >= 30
    # The Q4_1 tiles (the embedded model's every linear layer) are among what is compared: this is
    # why the reference family's quality (tests/runtime/test_kernel_quality.py) covers NEON too
    assert out.count("\nok q4_1 float16 ") >= 6 and out.count("\nok q4_1 float32 ") >= 6, out[-4000:]


def test_the_avx2_only_kernels_are_bit_for_bit_the_reference_loops(tmp_path):
    """-march=x86-64-v3, the x86-avx2 kernel family's target (kernels/native.py): the q8 tiles an
    AVX2-only CPU runs, without VNNI, whatever CPU runs the tests (one with AVX2 at least)."""
    if platform.machine() != "x86_64" or not {"avx2", "fma", "f16c", "bmi2", "movbe"} <= _cpu_flags():
        pytest.skip("not an x86-64 CPU with AVX2")
    out = _build_and_run([_tool("g++"), "-march=x86-64-v3"], tmp_path / "kernels_test_avx2", [])
    assert out.splitlines()[0] == "kernels: q8 avx2, attention generic, prompt op no", out.splitlines()[0]
    assert out.count("\nok q4_1 float16 ") >= 6 and out.count("\nok ") >= 30
