"""Our integer dot-product kernels (kernels/q8_dot.py): the GGUF's Q4_1 values (and int8 rows) times
the activations as the kernels quantize them, to float32 rounding; rows bit for bit independent of
the batch and of the thread count (what keeps speculation exactly lossless); the plain-loop build
agreeing with the SIMD one; refusals that say what is wrong; and torch's kernels where the op is
turned off."""

import sys
import threading
import time

import pytest
import torch

from orin_llm.errors import OrinError
from orin_llm.kernels import q8_dot
from orin_llm.kernels.quant import QuantLinear, quantize_int4, quantize_int8, recover_q4_1
from orin_llm.runtime.kernel_plan import CpuFeatures, KernelSwitches, plan_kernels
from tests.conftest import tiny_fixture
from tests.runtime import native_builds
from tests.runtime.test_quant import _q4_1_weight

tiny_engine = tiny_fixture("engine")  # random weights do here (tests/conftest.py)

pytestmark = pytest.mark.skipif(q8_dot.op() is None, reason=f"q8_dot does not build here: {q8_dot.unavailable()}")


def _q4_1(out: int, inp: int, seed: int = 0) -> QuantLinear:
    """A Q4_1 layer as a GGUF holds one (fp16 scale and min per 32 weights)."""
    packed, scales, mins = recover_q4_1(_q4_1_weight(out, inp, seed)[3])
    return QuantLinear(packed, scales, torch.float32, mins)


def _quantized(x: torch.Tensor, qmax: int) -> torch.Tensor:
    """x as the kernels see it: blocks of 32, d = amax/qmax, round(x · (1/d)) · d (float32 steps)."""
    b = x.view(x.shape[0], -1, 32)
    d = b.abs().amax(-1, keepdim=True) / qmax
    inv = torch.where(d > 0, 1 / d, torch.zeros_like(d))
    return (torch.round(b * inv) * d).view_as(x)


@pytest.mark.parametrize("out,inp", [(64, 128), (960, 576), (96, 1536)])
def test_q4_1_layer_is_its_gguf_values_times_the_16_bit_activations(out, inp):
    lin = _q4_1(out, inp)
    w = lin.dequantize()
    x = torch.randn(5, inp) * torch.linspace(0.1, 4, inp)  # blocks of different scales
    x[:, 7] = 40.0  # an outlier feature, as hidden states have
    assert lin.pack() and lin.q8 is not None and lin.int4 is None
    got = lin(x)
    want = _quantized(x, q8_dot.SPLIT_QMAX).double() @ w.double().T
    assert got.dtype == torch.float32 and got.shape == (5, out)
    assert float((got.double() - want).abs().max() / want.abs().max()) < 1e-6  # float32 sums
    # and the 16-bit rounding of x is what separates it from the float layer: within its bound
    err = (got.double() - x.double() @ w.double().T).abs()
    bound = (x.double() - _quantized(x, q8_dot.SPLIT_QMAX).double()).abs() @ w.double().abs().T
    assert bool((err <= bound * (1 + 1e-6) + 1e-5).all())


def test_q4_1_activations_are_16_bit_codes_in_two_bytes():
    """The split codes stand for round(x/d), d = amax/SPLIT_QMAX per block (what the kernels' two byte
    planes sum back to): far finer than int8's, whose rounding changed the embedded model's answers."""
    x = torch.randn(3, 128) * torch.linspace(0.1, 4, 128)
    x[:, 7] = 40.0
    q, d = q8_dot.op().quantize_activations(x, 15)
    b = x.view(3, -1, 32)
    want_d = b.abs().amax(-1) / q8_dot.SPLIT_QMAX
    assert torch.equal(d, want_d)
    assert torch.equal(q.long(), _quantized(x, q8_dot.SPLIT_QMAX).div(want_d.repeat_interleave(32, 1)).round().long())
    assert int(q.abs().max()) == q8_dot.SPLIT_QMAX  # each block's largest value takes the largest code
    step = (x - _quantized(x, q8_dot.SPLIT_QMAX)).abs().max() / x.abs().max()
    assert float(step) <= 0.5 / q8_dot.SPLIT_QMAX


def test_int8_rows_take_int16_activations():
    w = torch.randn(64, 96)
    lin = QuantLinear(*quantize_int8(w), torch.float32)
    ref_w = lin.dequantize()
    assert lin.pack() and lin.q8 is not None
    x = torch.randn(3, 96) * 5
    got = lin(x)
    want = _quantized(x, 32767).double() @ ref_w.double().T
    assert float((got.double() - want).abs().max() / want.abs().max()) < 1e-6
    # an embedding's lookups read the same codes back from the tiles
    ids = torch.tensor([0, 3, 17, 63])
    assert torch.equal(lin.int8_rows(ids), quantize_int8(w)[0][ids])


def test_a_symmetric_int4_draft_layer_with_larger_groups_runs_as_q4_1():
    w = torch.randn(32, 256)
    lin = QuantLinear(*quantize_int4(w, 64), torch.float32)
    ref_w = lin.dequantize()  # (code - 8)·scale, one scale per 64
    assert lin.pack() and lin.q8 is not None
    x = torch.randn(4, 256)
    want = _quantized(x, q8_dot.SPLIT_QMAX).double() @ ref_w.double().T
    assert float((lin(x).double() - want).abs().max() / want.abs().max()) < 1e-6
    with pytest.raises(OrinError, match="tiles"):
        lin.dequantize()


def test_rows_are_bit_for_bit_independent_of_the_batch_and_the_threads():
    """A verify step's rows equal one-row decode steps: the property speculation's exactness needs."""
    q4, q8 = _q4_1(256, 576, seed=1), QuantLinear(*quantize_int8(torch.randn(128, 576)), torch.float32)
    assert q4.pack() and q8.pack()
    x = torch.randn(16, 576)
    threads = torch.get_num_threads()
    for lin in (q4, q8):
        full = lin(x)
        for n in range(1, 16):
            assert torch.equal(lin(x[n - 1:n]), full[n - 1:n]) and torch.equal(lin(x[:n]), full[:n]), n
        torch.set_num_threads(2)
        try:
            assert torch.equal(lin(x), full)  # outputs split between two threads: the same bits
        finally:
            torch.set_num_threads(threads)


def test_gguf_scales_are_held_as_fp16_and_others_as_fp32_with_the_same_results():
    """A GGUF's Q4_1 scales and mins are fp16 values: the tiles keep them as fp16 (half the bytes),
    and the kernel gives bit for bit what it gives on the same values in float32. A symmetric int4
    layer's float32 scales are not fp16 values: they stay float32."""
    lin = _q4_1(64, 576, seed=3)
    assert lin.pack()
    codes, scales, mins = lin.q8
    assert scales.dtype == mins.dtype == torch.float16
    x = torch.randn(6, 576)
    assert torch.equal(q8_dot.op().q4_1_linear(x, codes, scales, mins),
                       q8_dot.op().q4_1_linear(x, codes, scales.float(), mins.float()))
    draft = QuantLinear(*quantize_int4(torch.randn(64, 128), 64), torch.float32)
    assert draft.pack() and draft.q8[1].dtype == draft.q8[2].dtype == torch.float32
    with pytest.raises(RuntimeError, match="both float32 or both float16"):
        q8_dot.op().q4_1_linear(x, codes, scales, mins.float())


def test_the_plain_loop_build_agrees_with_the_simd_one():
    """The portable code (ORIN_LLM_GENERIC; what another CPU would compile) computes the same
    products on the same tiles, bit for bit: its float steps are the SIMD lanes' steps, one output at a
    time (both kinds of tiles hold the output rows in the lanes)."""
    generic = native_builds.generic().get()
    assert generic is not None, native_builds.generic().error
    assert generic.simd() == "generic" and q8_dot.op().simd() != "generic"
    lin = _q4_1(64, 576, seed=2)
    assert lin.pack()
    x = torch.randn(3, 576)
    a, b = generic.q4_1_linear(x, *lin.q8), q8_dot.op().q4_1_linear(x, *lin.q8)
    assert torch.equal(a, b)
    head = QuantLinear(*quantize_int8(torch.randn(32, 576)), torch.float32)
    assert head.pack()
    a, b = generic.q8_linear(x, *head.q8), q8_dot.op().q8_linear(x, *head.q8)
    assert torch.equal(a, b)


def test_bad_operands_are_refused_with_what_is_wrong():
    lin = _q4_1(64, 128)
    assert lin.pack()
    codes, scales, mins = lin.q8
    op = q8_dot.op()
    with pytest.raises(RuntimeError, match="x has 64 columns, the weights 128"):
        op.q4_1_linear(torch.randn(2, 64), codes, scales, mins)
    with pytest.raises(RuntimeError, match=r"x: \[M, K\] float32"):
        op.q4_1_linear(torch.randn(2, 128, dtype=torch.float64), codes, scales, mins)
    with pytest.raises(RuntimeError, match="scales and mins"):
        op.q4_1_linear(torch.randn(2, 128), codes, scales[:, :2].contiguous(), mins)
    with pytest.raises(RuntimeError, match="codes"):
        op.q8_linear(torch.randn(2, 128), codes, scales)
    with pytest.raises(RuntimeError, match="bits"):
        op.quantize_activations(torch.randn(2, 128), 8)
    # shapes outside the tiles stay on torch's kernels (or dequantize): never a wrong answer
    odd = QuantLinear(*quantize_int8(torch.randn(6, 64)), torch.float32)
    assert not odd._pack_q8_dot() and odd.q8 is None


def test_turned_off_torch_kernels_run_and_the_reason_is_kept(engine):
    off = KernelSwitches(q8_dot=False)
    plan = plan_kernels(CpuFeatures.probe("cpu", off, True), engine.model.arch, "int8", "cpu", off, "q4_1")
    assert not plan.q8_dot and dict(plan.why_not)["q8_dot"] == "turned off (ORIN_LLM_Q8_DOT=0)"
    lin = _q4_1(64, 128)
    assert lin.pack(plan.q8_dot) and lin.q8 is None and lin.int4 is not None


def test_the_engine_runs_every_q4_1_layer_on_them(engine):
    """Every Q4_1 layer of the target on q8_dot, its rows checked independent at load (packed.py)."""
    model = engine.model
    layers = [m for m in model.modules() if isinstance(m, QuantLinear)]
    assert layers and all(m.q8 is not None for m in layers) and model.plan.rows_independent
    assert model.lm_head.on_q8_dot  # the head's candidate pass too (head.py)


def waits_for_the_gil(call) -> tuple[float, float]:
    """(ms this thread waited to run Python once `call` had begun in another thread, ms the call takes
    alone). An op that holds the GIL keeps this thread out for the whole call, as it would keep the
    daemon's event loop; one that releases it lets it in at once. The switch interval is set longer
    than the call, so that only a release lets this thread in during it."""
    started, began = threading.Event(), []
    t0 = time.perf_counter()
    call()
    alone = (time.perf_counter() - t0) * 1e3

    def work():
        began.append(time.perf_counter())
        started.set()
        call()

    interval = sys.getswitchinterval()
    sys.setswitchinterval(max(0.5, 4 * alone / 1e3))
    try:
        t = threading.Thread(target=work)
        t.start()
        started.wait()  # returns once this thread holds the GIL again
        waited = (time.perf_counter() - began[0]) * 1e3
        t.join()
    finally:
        sys.setswitchinterval(interval)
    return waited, alone


def test_the_kernels_let_other_python_threads_run():
    """The daemon's HTTP loop shares the process with the engine: our C++ calls release the GIL while
    they compute (a 3B prompt chunk's layer runs for ~0.5 s), as torch's own ops do."""
    lin = _q4_1(3072, 576)
    assert lin.pack()
    x = torch.randn(4096, 576)  # ~7 G multiply-adds: tens of ms or more
    waited, alone = waits_for_the_gil(lambda: q8_dot.op().q4_1_linear(x, *lin.q8))
    assert waited < alone / 2, (waited, alone)  # ~0.1 against ~60 ms here; holding it: ~60
