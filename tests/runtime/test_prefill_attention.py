"""Prompt attention straight over the INT8 cache (the C++ op): the same attention as float64 over the
scaled int8 values, closer to it than the bf16 GEMMs it replaces, causal, each row independent of the
rows that share its call (so a prompt block's K/V do not depend on how the prompt was chunked or what
was cached), used by the model exactly where the bf16 path ran, and refused loudly, with the bf16
GEMMs taking over, where it is turned off."""

import dataclasses

import pytest
import torch

import orin_llm.kernels.prefill_attention as pa
from orin_llm.kernels.attention import MIN_KEYS, int8_attention_bf16
from orin_llm.runtime.attention_layer import Attention
from orin_llm.runtime.kernel_plan import CpuFeatures, KernelSwitches, plan_kernels
from orin_llm.runtime.llama import Item
from tests.conftest import tiny_fixture
from tests.runtime.test_int8_attention import KV, H, _case, _reference
from tests.runtime.test_q8_dot import waits_for_the_gil

tiny_engine = tiny_fixture("engine")  # random weights do here (tests/conftest.py)

pytestmark = pytest.mark.skipif(pa.op() is None, reason=f"the op does not build or run here: {pa.unavailable()}")


@pytest.mark.parametrize("pos,t,d", [(0, 1, 64), (0, 21, 64), (600, 16, 64), (3000, 40, 64), (250, 7, 128)])
def test_matches_float64_attention_and_beats_the_bf16_gemms(pos, t, d):
    q, k, v, table, ks, vs = _case(pos, t, d=d)
    got = pa.op()(q, k, v, table, pos, ks, vs)
    want = _reference(q, k, v, table, pos, ks, vs)
    assert got.shape == (t, H, d) and got.dtype == torch.float32
    err = float((got.double() - want).abs().max() / want.abs().max())
    assert err < 3e-3  # the bf16 weights' rounding (2^-9 relative), ~1e-3 measured
    # what it replaces: the same int8 values through attention.py's bf16 GEMMs (q, scores and weights in bf16)
    rep = H // KV
    qs = q.transpose(0, 1) * ks.repeat_interleave(rep)[:, None, None]
    gemm = int8_attention_bf16(qs, k[:, table], v[:, table], pos) * vs.repeat_interleave(rep)[:, None, None]
    assert err <= float((gemm.transpose(0, 1).double() - want).abs().max() / want.abs().max())


def test_rows_do_not_depend_on_the_rows_beside_them():
    """Row t of a call equals that query computed alone, or in any other split of the chunk: a block's
    K/V are then the same however the prompt was chunked and whatever was cached before it."""
    pos, t = 1000, 37
    q, k, v, table, ks, vs = _case(pos, t)
    together = pa.op()(q, k, v, table, pos, ks, vs)
    for a, b in [(0, 1), (5, 6), (36, 37), (0, 16), (3, 29), (16, 37)]:
        part = pa.op()(q[a:b].contiguous(), k, v, table, pos + a, ks, vs)
        assert torch.equal(part, together[a:b]), (a, b)


def test_a_query_never_sees_later_keys():
    pos, t = 700, 20
    q, k, v, table, ks, vs = _case(pos, t)
    before = pa.op()(q, k, v, table, pos, ks, vs)
    k2, v2 = k.clone(), v.clone()
    k2[:, table[pos + 10:]] = 127  # the keys of positions past query 9
    v2[:, table[pos + 10:]] = -127
    after = pa.op()(q, k2, v2, table, pos, ks, vs)
    assert torch.equal(before[:10], after[:10]) and not torch.equal(before[10:], after[10:])


def test_bad_input_is_refused_with_what_is_wrong():
    q, k, v, table, ks, vs = _case(100, 4)
    op = pa.op()
    with pytest.raises(RuntimeError, match="q: \\[T, H, D\\] float32"):
        op(q.double(), k, v, table, 100, ks, vs)
    with pytest.raises(RuntimeError, match="head_dim"):
        op(q[..., :32].contiguous(), k[..., :32].contiguous(), v[..., :32].contiguous(), table, 100, ks, vs)
    with pytest.raises(RuntimeError, match="slots must cover"):
        op(q, k, v, table[:50], 100, ks, vs)
    with pytest.raises(RuntimeError, match="slot out of range"):
        bad = table.clone()
        bad[3] = k.shape[1]
        op(q, k, v, bad, 100, ks, vs)


def test_the_model_runs_it_where_the_bf16_gemms_ran_and_agrees_with_them(engine):
    """A long prompt in block-aligned chunks over an INT8 cache, with torch's ops between the layers'
    kernels: the chunks whose blocks end past MIN_KEYS keys take the op, for those blocks only (the
    blocks before them keep SDPA); the last position's logits agree with the bf16 GEMM path's, and with
    the fused layer's (which runs the op inside, test_decode_layer.py), and so does the greedy next token."""
    model = engine.model
    assert model.plan.int8_prompt  # an INT8 engine on a CPU with the instructions: the plan runs it
    ids = engine.encode("The kitchen has a fridge, a sink and a mug; the hall has a coat rack. " * 60)[:MIN_KEYS + 90]
    bs = engine.cache.block_size
    chunk = 3 * bs + 5  # a chunk boundary inside a block, and one block that straddles MIN_KEYS's
    calls, logits = [], {}
    real = Attention._attend_prompt

    def spy(self, q, cache, layer, step):
        calls.append((step.pos, q.shape[0]))
        return real(self, q, cache, layer, step)

    plan = model.plan
    # torch's ops around the op, or the fused layer
    for on, fused in ((True, False), (False, False), ("fused", plan.fused_decode)):
        model.plan = dataclasses.replace(plan, int8_prompt=bool(on), fused_decode=fused)
        cache = engine.contiguous_cache(len(ids) + 8)
        Attention._attend_prompt = spy
        try:
            for a in range(0, len(ids), chunk):
                out = model.forward_batch([Item(torch.tensor(ids[a:a + chunk]), cache, 1, block=bs)])[0]
            logits[on] = out
        finally:
            Attention._attend_prompt = real
            model.plan = plan
    # every chunk that ends at or past MIN_KEYS keys called the op in each layer, and only those
    expect = [(a, min(chunk, len(ids) - a)) for a in range(0, len(ids), chunk)
              if min(a + chunk, len(ids)) >= MIN_KEYS]
    assert calls == [c for c in expect for _ in model.layers]
    for other in (False, "fused"):  # (the fused layer's small ops round differently: the same bound)
        assert torch.equal(logits[True].argmax(-1), logits[other].argmax(-1))
        assert float((logits[True] - logits[other]).abs().max()) < 1.0


def test_turned_off_the_plan_says_why_and_the_bf16_gemms_run(monkeypatch, engine):
    model, off = engine.model, KernelSwitches(prefill_attention=False)
    plan = plan_kernels(CpuFeatures.probe("cpu", off, True), model.arch, "int8", "cpu", off, "q4_1")
    assert plan.bf16_prompt and not plan.int8_prompt
    assert dict(plan.why_not)["int8_prompt_attention"] == "turned off (ORIN_LLM_PREFILL_ATTN=0)"
    cache = engine.contiguous_cache(MIN_KEYS + 64)
    assert model._step(MIN_KEYS, 32, 0, cache, block=16).prompt_op
    monkeypatch.setattr(model, "plan", plan)
    step = model._step(MIN_KEYS, 32, 0, cache, block=16)
    assert step.bf16 and not step.prompt_op  # the bf16 GEMMs run the step


def test_it_lets_other_python_threads_run():
    """A cold prompt's chunks run this op for tens of ms a layer: it releases the GIL while it computes,
    so the daemon's HTTP loop keeps answering (/health, the queue, other streams) meanwhile."""
    q, k, v, table, ks, vs = _case(3000, 256)
    waited, alone = waits_for_the_gil(lambda: pa.op()(q, k, v, table, 3000, ks, vs))
    assert waited < alone / 2, (waited, alone)
