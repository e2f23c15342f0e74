"""The kernel cores (orin_llm/kernels/csrc/kernels), torch-free, built with plain compilers: each
kernel family this CPU runs (kernels/native.py FAMILIES: the installed build's, the AVX2-only ones, the
reference loops) against the reference loops (tests/native/kernels_test.cpp), and the ARM (NEON)
kernels cross-compiled for the Orin's core and run under qemu-aarch64 with a CPU that has the
dot-product instructions. No ARM machine is needed, but Debian's g++-aarch64-linux-gnu and
qemu-user-static are: only CI installs them (.ci/run), so that test is in the full tier (`make
test-full`, which CI runs after `make test`), where a missing tool fails it rather than skipping it."""

from __future__ import annotations

import platform
import shutil
import subprocess
from pathlib import Path

import pytest

from orin_llm.kernels.native import FAMILIES, NATIVE, family_missing

from ..conftest import ROOT

DRIVER = ROOT / "tests" / "native" / "kernels_test.cpp"
INSTALL = "apt-get update && apt-get install -y g++-aarch64-linux-gnu qemu-user-static"
FLAGS = ["-std=c++17", "-O3", "-fno-trapping-math", "-Wall"]
# The cases kernels_test.cpp's main() runs: 6 row counts × (split codes, 2 q4_1, 2 q8) and 4 positions
# × 3 decode attention shapes, plus the x86 prompt op beside each attention case where the build has
# it. Exact counts: a case that goes missing fails the test (update these with the driver).
CASES = 6 * 5 + 4 * 3
PROMPT_CASES = 4 * 3
# What each family's build runs, in the driver's first line (the native one: `native_kernels`)
FAMILY_KERNELS = {
    "reference": "kernels: q8 generic, attention generic, prompt op no",
    "x86-avx2": "kernels: q8 avx2, attention generic, prompt op no",
    "x86-avx2-vnni": "kernels: q8 avx2-vnni, attention generic, prompt op no",
}


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


def _cases(out: str) -> int:
    """The cases the driver's build should have run, from what its first line says it has."""
    return CASES + (PROMPT_CASES if out.splitlines()[0].endswith("prompt op yes") else 0)


def _assert_all_cases(out: str) -> None:
    want = _cases(out)
    assert out.count("\nok ") == want and out.rstrip().endswith(f"\n{want} passed, 0 failed"), \
        f"{out.splitlines()[0]}: {want} cases expected\n{out[-4000:]}"


def _cpu_flags() -> set[str]:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith(("flags", "Features")):
            return set(line.split(":", 1)[1].split())
    return set()


def native_kernels(flags: set[str], machine: str) -> str:
    """The first line of a -march/-mcpu=native build on a CPU with these /proc/cpuinfo flags (x86.h's
    and arm.h's conditions)."""
    if machine in ("aarch64", "arm64"):
        q8 = "neon-dotprod" if "asimddp" in flags else "generic"
        return f"kernels: q8 {q8}, attention neon, prompt op no"
    if machine not in ("x86_64", "AMD64"):
        return "kernels: q8 generic, attention generic, prompt op no"
    vnni = {"avx512_vnni", "avx512vl"} <= flags or "avx_vnni" in flags
    q8 = ("avx2-vnni" if vnni else "avx2") if {"avx2", "fma", "f16c"} <= flags else "generic"
    attention = "avx512" if "avx512f" in flags else "generic"
    prompt = "yes" if {"avx512f", "avx512bw", "avx512_vnni", "avx512_bf16"} <= flags else "no"
    return f"kernels: q8 {q8}, attention {attention}, prompt op {prompt}"


def test_the_expected_kernels_follow_the_cpu():
    """The oracle above, on the CPUs the tests meet: an AVX-512 Xeon, an AVX2-only EPYC, the Orin."""
    xeon = {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "avx_vnni"}
    assert native_kernels(xeon, "x86_64") == "kernels: q8 avx2-vnni, attention avx512, prompt op yes"
    assert native_kernels({"avx2", "fma", "f16c", "bmi2"}, "x86_64") == FAMILY_KERNELS["x86-avx2"]
    assert native_kernels({"avx2", "fma", "f16c", "avx_vnni"}, "x86_64") == FAMILY_KERNELS["x86-avx2-vnni"]
    assert native_kernels({"asimd", "asimddp"}, "aarch64") == "kernels: q8 neon-dotprod, attention neon, prompt op no"
    assert _cases("kernels: q8 avx2, attention generic, prompt op no\n") == 42
    assert _cases("kernels: q8 avx2-vnni, attention avx512, prompt op yes\n") == 54


@pytest.mark.parametrize("family", list(FAMILIES))
def test_each_kernel_family_is_bit_for_bit_the_reference_loops(family, tmp_path):
    """Each family this CPU can run, built as native.py builds it (its target flags and defines),
    against the reference loops: on one AVX-512 machine the native build's kernels and an AVX2-only
    CPU's (x86-avx2: without VNNI, x86-avx2-vnni: with AVX-VNNI), on an AVX2 one what it has."""
    f = FAMILIES[family]
    missing = family_missing(f)
    if missing:
        pytest.skip(f"{family}: {missing}")
    arch = list(f.arch) if f.arch is not None else \
        ["-mcpu=native" if platform.machine() in ("aarch64", "arm64") else "-march=native"]
    out = _build_and_run([_tool("g++"), *arch, *(f"-D{d}" for d in f.defines)], tmp_path / f"kernels_{family}", [])
    first = out.splitlines()[0]
    want = native_kernels(_cpu_flags(), platform.machine()) if family == NATIVE else FAMILY_KERNELS.get(family)
    assert first == want, f"{family}: {first!r}, expected {want!r}"
    _assert_all_cases(out)
    # The Q4_1 tiles (the embedded model's every linear layer) are among what is compared
    assert out.count("\nok q4_1 float16 ") == 6 and out.count("\nok q4_1 float32 ") == 6, out[-4000:]


@pytest.mark.full
def test_the_arm_kernels_are_bit_for_bit_the_reference_loops_under_qemu(tmp_path):
    """-mcpu=cortex-a78ae: the Jetson AGX Orin's core (NEON with sdot); qemu's `max` CPU runs it."""
    gxx = _tool("aarch64-linux-gnu-g++")
    qemu = _tool("qemu-aarch64", "qemu-aarch64-static")
    sysroot = Path("/usr/aarch64-linux-gnu")
    assert sysroot.is_dir(), f"no AArch64 libraries at {sysroot} ({INSTALL})"
    out = _build_and_run([gxx, "-mcpu=cortex-a78ae"], tmp_path / "kernels_test_arm",
                         [qemu, "-cpu", "max", "-L", str(sysroot)])
    assert out.splitlines()[0] == "kernels: q8 neon-dotprod, attention neon, prompt op no", out.splitlines()[0]
    _assert_all_cases(out)
    # The Q4_1 tiles (the embedded model's every linear layer) are among what is compared: this is
    # why the reference family's quality (tests/runtime/test_kernel_quality.py) covers NEON too
    assert out.count("\nok q4_1 float16 ") == 6 and out.count("\nok q4_1 float32 ") == 6, out[-4000:]
