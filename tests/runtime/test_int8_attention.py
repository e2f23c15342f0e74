"""Decode attention straight over the INT8 cache (the C++ op): the same attention as SDPA over the
scaled int8 values, causal, rows independent of what else is in the call (what keeps speculation
exactly lossless), reading through a paged sequence's slots, used by the model for decode-sized
steps only, and refused loudly, with torch's ops taking over, where it is turned off."""

import dataclasses

import pytest
import torch
import torch.nn.functional as F

import orin_llm.kernels.int8_attention as ia
from orin_llm.runtime.kernel_plan import CpuFeatures, KernelSwitches, plan_kernels
from orin_llm.runtime.kv_cache import Int8KVCache
from orin_llm.runtime.llama import Item
from orin_llm.runtime.sampling import SamplingParams
from tests.conftest import tiny_fixture
from tests.runtime import native_builds

tiny_engine = tiny_fixture("engine")  # random weights do here (tests/conftest.py)

H, KV, D = 9, 3, 64  # SmolLM2's heads: 3 query heads per KV head

pytestmark = pytest.mark.skipif(ia.op() is None, reason=f"the op does not build here: {ia.unavailable()}")


def _case(pos: int, t: int, slots: int = 4096, d: int = D, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(t, H, d, generator=gen)
    k = torch.randint(-127, 128, (KV, slots, d), dtype=torch.int8, generator=gen)
    v = torch.randint(-127, 128, (KV, slots, d), dtype=torch.int8, generator=gen)
    table = torch.randperm(slots, generator=gen)[:pos + t].contiguous()  # a paged sequence's scattered slots
    ks, vs = torch.rand(KV, generator=gen) * 0.04 + 0.01, torch.rand(KV, generator=gen) * 0.04 + 0.01
    return q, k, v, table, ks, vs


def _reference(q, k, v, table, pos, ks, vs):
    t = q.shape[0]
    kf = k[:, table].double() * ks.double()[:, None, None]
    vf = v[:, table].double() * vs.double()[:, None, None]
    mask = torch.ones(t, pos + t, dtype=torch.bool).tril(diagonal=pos)
    rep = H // KV
    out = F.scaled_dot_product_attention(q.double().transpose(0, 1)[None], kf.repeat_interleave(rep, 0)[None],
                                         vf.repeat_interleave(rep, 0)[None], attn_mask=mask)
    return out[0].transpose(0, 1)


@pytest.mark.parametrize("pos,t,d", [(0, 1, 64), (600, 1, 64), (700, 5, 64), (3000, 9, 64), (250, 3, 128)])
def test_matches_sdpa_over_the_scaled_int8_values(pos, t, d):
    q, k, v, table, ks, vs = _case(pos, t, d=d)
    got = ia.op()(q, k, v, table, pos, ks, vs)
    want = _reference(q, k, v, table, pos, ks, vs)
    assert got.shape == (t, H, d) and got.dtype == torch.float32
    assert float((got.double() - want).abs().max() / want.abs().max()) < 1e-5  # float32 sums, ~1e-6 measured


def test_each_row_is_bit_for_bit_a_one_query_step():
    """A verify step's row t equals the decode step at that position: the exactness speculation needs."""
    pos, t = 517, 9
    q, k, v, table, ks, vs = _case(pos, t)
    together = ia.op()(q, k, v, table, pos, ks, vs)
    for i in range(t):
        alone = ia.op()(q[i:i + 1].contiguous(), k, v, table, pos + i, ks, vs)
        assert torch.equal(alone[0], together[i]), i


def test_the_portable_loops_agree_with_this_cpus_kernels():
    """The key loop's portable code (ORIN_LLM_GENERIC; what a CPU without x86 or NEON kernels
    compiles) computes the same scores: the same sums in the same order per key and head, so the
    same bits (tests/native checks the NEON kernels against the same loops under qemu)."""
    generic = native_builds.generic().get()
    assert generic is not None, native_builds.generic().error
    assert generic.attention_simd() == "generic"
    for pos, t, d in [(600, 1, 64), (517, 9, 64), (40, 3, 128), (0, 1, 64)]:  # full and partial blocks of 16 keys
        q, k, v, table, ks, vs = _case(pos, t, d=d, seed=pos)
        a = generic.int8_decode_attention(q, k, v, table, pos, ks, vs)
        b = ia.op()(q, k, v, table, pos, ks, vs)
        assert torch.equal(a, b)


def test_a_query_never_sees_later_keys():
    pos, t = 300, 6
    q, k, v, table, ks, vs = _case(pos, t)
    before = ia.op()(q, k, v, table, pos, ks, vs)
    k[:, table[pos + 3:]], v[:, table[pos + 3:]] = 127, -127  # what queries 0..2 must not see
    after = ia.op()(q, k, v, table, pos, ks, vs)
    assert torch.equal(after[:3], before[:3])
    assert not torch.equal(after[3:], before[3:])


def test_bad_input_is_refused_with_what_is_wrong():
    q, k, v, table, ks, vs = _case(10, 2)
    with pytest.raises(RuntimeError, match="slots must cover"):
        ia.op()(q, k, v, table[:5], 10, ks, vs)
    with pytest.raises(RuntimeError, match="slot out of range"):
        ia.op()(q, k, v, torch.full((12,), 5000), 10, ks, vs)
    with pytest.raises(RuntimeError, match="head_dim"):
        ia.op()(q[..., :32].contiguous(), k[..., :32].contiguous(), v[..., :32].contiguous(), table, 10, ks, vs)
    with pytest.raises(RuntimeError, match="int8"):
        ia.op()(q, k.float(), v, table, 10, ks, vs)


def test_the_model_uses_it_for_decode_steps_and_matches_torchs_ops(engine):
    """Every layer's attention of a decode step over the engine's INT8 paged cache, with the op and
    with the torch ops it replaces (gather, convert, SDPA): the same to float32 rounding, i.e. within
    a bf16 step of their scale after o_proj (the q4_1 kernel takes bf16 inputs). Greedy choices agree
    but at near-ties.
    With the fused decode layer off: it runs this op inside its own call (tests/runtime/test_decode_layer.py)."""
    model = engine.model
    assert model.plan.int8_decode  # an INT8 engine on this CPU: the plan runs it
    plan, model.plan = model.plan, dataclasses.replace(model.plan, fused_decode=False)
    try:
        _compare_with_torchs_ops(engine, model)
    finally:
        model.plan = plan


def _compare_with_torchs_ops(engine, model):
    ids = engine.encode("The kitchen has a fridge, a sink and a mug. Put the mug in the sink.")
    errors, busy = [], []

    def compare(m, args, out):  # during the step, while the sequence's cache is live
        x, cos, sin, caches, layer, steps, width = args
        if busy or not steps[0].int8_op:
            return
        busy.append(1)  # (the recomputation below runs this hook too)
        try:  # writing the step's K/V again is idempotent
            ref = m(x, cos, sin, caches, layer, [dataclasses.replace(s, int8_op=False) for s in steps], width)
        finally:
            busy.clear()
        # o_proj (the q4_1 kernel) takes bf16 inputs: a float32 difference may move one input by a
        # bf16 step (2^-8), and the outputs by that much of their scale; a wrong attention moves them by ~1
        errors.append(float((out - ref).abs().max() / ref.abs().max()))

    hooks = [b.self_attn.register_forward_hook(compare) for b in model.layers]
    try:
        engine.run(engine.generate(ids, SamplingParams(max_tokens=4, temperature=0.0), "none"))
    finally:
        for h in hooks:
            h.remove()
    assert len(errors) >= 2 * len(model.layers)  # every layer of the decode steps took the op
    assert max(errors) <= 2 ** -7
    # Greedy choices: each decode step of the op's plan computed with the op and with torch's ops over
    # the same cache (the op's K/V kept, so differences do not accumulate). Where the two choose
    # differently it is a near-tie that float32 rounding (amplified by the int8 activation codes of the
    # next linear layer) decides, never a wrong layer.
    plan = engine.run(engine.generate(ids, SamplingParams(max_tokens=24, temperature=0.0), "none")).token_ids
    cache = engine.contiguous_cache(len(ids) + len(plan) + 1)
    model(torch.tensor(ids), cache)
    logits = {True: [], False: []}
    kernels = model.plan
    try:
        for tok in plan:
            n = cache.length
            for on in (False, True):  # the op last: its K/V stay in the cache
                model.plan = dataclasses.replace(kernels, int8_decode=on)
                cache.crop(n)
                logits[on].append(model.forward_batch([Item(torch.tensor([tok]), cache, 1, decode=True)])[0][0])
    finally:
        model.plan = kernels
    a, b = torch.stack(logits[True]), torch.stack(logits[False])
    gap = (a - b).abs()
    # per step, the mean logit difference: most steps ~0.1 or ~0 (0.49 at worst measured, where a code
    # flipped early); a wrong attention moves logits by whole units
    per_step = gap.mean(-1)
    assert float(per_step.median()) < 0.25 and float(per_step.max()) < 1.0
    for i in (a.argmax(-1) != b.argmax(-1)).nonzero().flatten().tolist():
        top = b[i].topk(2).values
        assert float(top[0] - top[1]) <= 2 * float(gap[i].max()), i  # a tie within the two paths' difference


def test_turned_off_the_plan_says_why_and_the_model_keeps_torchs_ops(monkeypatch, engine):
    model, off = engine.model, KernelSwitches(int8_attention=False)
    plan = plan_kernels(CpuFeatures.probe("cpu", off, True), model.arch, "int8", "cpu", off, "q4_1")
    assert not plan.int8_decode and not plan.fused_decode
    assert dict(plan.why_not)["int8_decode_attention"] == "turned off (ORIN_LLM_INT8_ATTN=0)"
    cache = engine.contiguous_cache(64)
    assert isinstance(cache, Int8KVCache) and engine.model._step(0, 1, 0, cache, decode=True).int8_op
    monkeypatch.setattr(model, "plan", plan)
    step = engine.model._step(0, 1, 0, cache, decode=True)
    assert not step.int8_op  # the torch ops run the step
