"""Every Triton kernel configuration compiles for sm_87 (the Orin) and sm_90 (the bench GPUs), on any
machine: compile_kernels.py, in a process without TRITON_INTERPRET. Minutes on the 2-core VM: full tier."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.full


def test_kernels_compile_for_sm87_and_sm90():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-m", "tests.kernels.compile_kernels", "87", "90"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=1200)
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    for kernel in ("_decode_split", "_decode_merge", "_prefill", "_int4_linear", "_sum_splits", "_int8_head",
                   "_q4_gemv", "_decode_gemv", "_add_rms_norm", "_rope_write", "_silu_mul"):
        for arch in (87, 90):
            compiled = any(line.startswith(f"ok sm_{arch} {kernel} ") for line in lines)
            assert compiled, f"{kernel} not compiled for sm_{arch}"
    for kernel in ("_decode_split", "_prefill", "_add_rms_norm"):  # its float argument as torch.compile passes it
        assert any(line.startswith(f"ok sm_90 {kernel} ") and "fp64" in line for line in lines), kernel
