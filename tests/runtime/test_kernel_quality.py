"""The quantized path against the float model, for every kernel family this CPU runs (issue 44: on an
AVX2-only CPU the default kernels answered "L'Étoile, la Marseillaise, ..." to the README's question,
while every kernel test passed: they compared our kernels with our reference loops, never the model's
output with the float model's).

Each family (kernels/native.py FAMILIES: the reference loops, AVX2 without VNNI, AVX2 with VNNI, this
CPU's native build) runs in a process of its own with ORIN_LLM_KERNELS set (bench/kernel_quality.py), on
the embedded engine, against its float reference (the same GGUF's weights dequantized, a float32 KV
cache, torch's kernels): one calibration home's reference answers teacher-forced with a float32 cache
(what the linear kernels alone change), then the README's question through the engine's own INT8 cache
and serving path (its first token from one prefill; its greedy answer). The x86 AVX2 families also run
without torch's bf16 prompt GEMMs, as an AVX2-only CPU does (kernel_quality.EMULATE): with them off, the
x86-avx2 family gives the issue's wrong answer word for word on today's kernels.

NEON is not run here: the ARM kernels are checked bit for bit against the reference loops under qemu
(tests/native/test_kernels.py, which asserts the Q4_1 tiles are among what it compares), so the
reference family's result here is NEON's too.

In the full tier, on its real engine (tests/conftest.py `engine_dir`: `orin-llm build --embedded`, its
calibration included, built once per session), so that `make test` stays on the tiny engine. A family's
first run compiles it, then it is cached. The calibration is the build's own, not a shorter one: the
question's first token is nearly tied in the float model, and the K smoothing factors (k_smoothing.py) of
a one-prompt calibration were enough to tip torch's int4 kernel to "L" over the float32 cache.

The bounds (top-1 agreement, mean |Δ logprob|, max |Δ logit| over a float32 cache; the question's first
token and answer) are bench/kernel_quality.py's, which says why they are what they are; the results page
states the same ones.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from orin_llm.bench.kernel_quality import EMULATE, MAX_DLOGIT, MAX_MEAN_DLOGPROB, MIN_AGREEMENT, run_family, summary
from orin_llm.kernels import native

from ..conftest import ROOT

pytestmark = pytest.mark.full
HOMES, PER_HOME = 1, 4  # one home's prefix (~550 tokens) computed once, four answers on it (~220 positions)


@pytest.fixture(scope="module")
def quality_engine(engine_dir) -> Path:
    return Path(engine_dir)


@pytest.fixture(scope="module")
def reference(quality_engine, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("quality") / "reference.pt"
    cmd = [sys.executable, "-m", "orin_llm.bench.kernel_quality", "reference", str(quality_engine), str(out),
           "--homes", str(HOMES), "--per-home", str(PER_HOME)]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Paris" in r.stdout, r.stdout  # the float model's answer, which the families' must match
    return out


def check(got: dict, q8_dot: bool) -> None:
    assert "error" not in got, got["error"]
    kernels, t, q = got["kernels"], got["fp32_kv"], got["question"]
    # the family's own kernels ran (a refused build would measure torch's under the family's name)
    assert (kernels["plan"]["q8_dot"] is True) == q8_dot, kernels
    msg = (f"{got['family']} (q8 {kernels.get('q8')}, attention {kernels.get('attention')}): {summary(got)}; "
           f"the float model's first token {q['reference_top']}, answer {q['reference_answer']!r}")
    assert t["argmax_agreement"] >= MIN_AGREEMENT, msg
    assert t["mean_abs_dlogprob"] <= MAX_MEAN_DLOGPROB, msg
    assert t["max_abs_dlogit"] <= MAX_DLOGIT, msg
    # the question over a float32 cache: what the kernels alone do to its nearly tied first token
    assert q["fp32_kv"]["same_first_token"] and "Paris" in q["fp32_kv"]["answer"], msg
    # and through the serving path, over the engine's INT8 cache (whose scales move that tie too)
    assert "Paris" in q["int8_kv"]["answer"], msg


@pytest.mark.parametrize("family", list(native.FAMILIES))
def test_each_kernel_family_answers_as_the_float_model(family, quality_engine, reference):
    missing = native.family_missing(native.FAMILIES[family])
    if missing:
        pytest.skip(f"{family}: {missing}")
    got = run_family(family, quality_engine, reference, env=EMULATE.get(family), caches=("fp32",))
    assert got.get("kernels", {}).get("family") == family, got
    check(got, q8_dot=True)


def test_the_bounds_hold_for_torchs_int4_kernel(quality_engine, reference):
    """The bounds' anchor, measured as the families are (ORIN_LLM_Q8_DOT=0: torch's int4 kernel, bf16
    activations): a failure here is the bounds' or the harness's, not a kernel's. The bounds were set where
    bf16 has dot-product instructions; on a CPU without them (AVX2 alone) torch's kernel rounds its
    activations to bf16 all the same and lands below them: argmax agreement 0.982 against the float model on
    a 2-core AMD EPYC (2026-12-07), where every family of ours (the test above) holds them."""
    from orin_llm.kernels.attention import bf16_dot_products

    if not bf16_dot_products():
        pytest.skip("torch's int4 kernel without bf16 dot products (AVX2 alone) is below the bounds its "
                    "native bf16 run set: agreement 0.982 on an AMD EPYC; the bounds hold for our families")
    check(run_family("native", quality_engine, reference, env={"ORIN_LLM_Q8_DOT": "0"}, caches=("fp32",)),
          q8_dot=False)
