"""The decode GEMV family's compiled code for sm_87 (the Orin) and sm_90, with no GPU (decode_gemv_ptx.py,
in a process without TRITON_INTERPRET): its codes come in 16-byte loads used where they land (no layout
conversion, so not staged through shared memory), one 32-bit load per output and group carries the
group's scale and min, no spills, no int-to-float instruction. Full tier: the compiles take a minute."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from orin_llm.kernels.triton.decode_gemv import FAMILY_CANDIDATES
from tests.conftest import ROOT

pytestmark = pytest.mark.full


@pytest.fixture(scope="module")
def compiled() -> list[dict]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-m", "tests.kernels.decode_gemv_ptx", "87", "90"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def test_every_candidate_compiles_for_both_architectures(compiled):
    got = {(r["arch"], r["BLOCK_N"], r["BLOCK_K"], r["num_warps"], r["K"], r["dtype"]) for r in compiled}
    for arch in (87, 90):
        for c in FAMILY_CANDIDATES:
            for k in (3072, 8192):
                for dtype in ("bfloat16", "float16"):
                    assert (arch, c.block_n, c.block_k, c.num_warps, k, dtype) in got
    assert any(r["HAS_RES"] for r in compiled)


def test_sixteen_byte_loads_of_the_codes_used_where_they_land(compiled):
    for r in compiled:
        assert r["codes_loads"] == 1 and r["codes_per_thread"] == ["1, 1, 4"], r  # 4 int32 words: 16 bytes
        assert r["ptx_loads"].get("v4.b32", 0) >= 1, r
        assert r["codes_converted"] == 0, r


def test_one_scale_and_min_load_per_group(compiled):
    for r in compiled:
        assert r["scale_loads"] == 1, r  # a [BLOCK_N, groups] tile of words: one per output and group
        assert r["ptx_loads"].get("b32", 0) == 1, r  # a thread's one 32-bit load a step: its group's word


def test_no_spills_and_no_int_to_float(compiled):
    for r in compiled:
        assert r["spill_stores"] == r["spill_loads"] == r["stack"] == 0, r
        assert r["int_to_float"] == 0, r
