"""The fused decode layer (C++): the same layer as torch's ops around the same kernels to float32
rounding, the very same K/V codes written, rows independent of what else shares the step (one
sequence or several, beside a prefill chunk or not), used for every decode step of a q4_1 engine,
bad input refused with what is wrong, and turned off on request with torch's ops taking over."""

import dataclasses

import pytest
import torch

from orin_llm.kernels import decode_layer as dl
from orin_llm.kernels.attention import MIN_KEYS
from orin_llm.runtime.kernel_plan import CpuFeatures, KernelSwitches, plan_kernels
from orin_llm.runtime.llama import Item
from orin_llm.runtime.sampling import SamplingParams
from tests.conftest import tiny_fixture

tiny_engine = tiny_fixture("engine")  # random weights do here (tests/conftest.py)

pytestmark = pytest.mark.skipif(dl.op() is None, reason=f"the op does not build here: {dl.unavailable()}")


@pytest.fixture
def model(engine):
    m = engine.model
    if not m.plan.fused_decode:
        pytest.skip("this engine's layers do not run on q8_dot's kernels here")
    return m


def _prefilled(engine, text: str, extra: int = 16):
    ids = engine.encode(text)
    cache = engine.contiguous_cache(len(ids) + extra)
    engine.model(torch.tensor(ids), cache)
    return cache


@pytest.mark.parametrize("layer", [0, 7, 29])
def test_a_layer_matches_torchs_ops_and_writes_the_same_kv_codes(engine, model, layer):
    cache = _prefilled(engine, "The robot keeps a tidy home. " * 20)
    n, t = cache.length, 3
    x = model.embed_tokens(torch.tensor([1000, 17, 4242])).float().contiguous()
    step = model._step(n, t, 0, cache, 0, True)
    assert step.int8_op
    want = model.layers[layer](x.clone(), model.cos[n:n + t], model.sin[n:n + t], [cache], layer, [step], 0)
    k_want, v_want = cache.k[layer, :, n:n + t].clone(), cache.v[layer, :, n:n + t].clone()
    cache.k[layer, :, n:n + t], cache.v[layer, :, n:n + t] = 0, 0  # the op must write them again
    got = x.clone()
    dl.op()(got, *model.fused_args[layer], model.cos, model.sin, model.arch.num_heads, model.arch.num_kv_heads,
            [*cache.int8_layer(layer), cache.slot_table(n + t)], [n], [t], [t])
    # float32 rounding of the small ops (their order differs) can move a linear's 16-bit activation code
    # by a step (1/32639 of its block's largest value): 3e-7 with int8 codes, which hid it, 1e-5 now
    assert float((got - want).abs().max() / want.abs().max()) < 1e-4
    assert torch.equal(cache.k[layer, :, n:n + t], k_want) and torch.equal(cache.v[layer, :, n:n + t], v_want)


@pytest.mark.parametrize("layer", [0, 29])
def test_a_prompt_chunk_layer_matches_torchs_ops_around_the_prompt_op(engine, model, layer):
    """A prompt chunk past MIN_KEYS keys (a warm request's task over a long home): the layer with the
    INT8 prompt op inside, against torch's ops around the same op, and the K/V codes it writes."""
    if not model.plan.int8_prompt:
        pytest.skip("the INT8 prompt op does not run here")
    cache = _prefilled(engine, "The robot keeps a tidy home with many rooms and doors. " * 60, extra=40)
    n, t = cache.length, 21
    assert n >= MIN_KEYS
    x = model.embed_tokens(torch.tensor(engine.encode("Bring the red mug from the kitchen to the sink. " * 3))[:t])
    x = x.float().contiguous()
    step = model._step(n, t, 0, cache, block=engine.cache.block_size)
    assert step.prompt_op
    want = model.layers[layer](x.clone(), model.cos[n:n + t], model.sin[n:n + t], [cache], layer, [step], 0)
    k_want, v_want = cache.k[layer, :, n:n + t].clone(), cache.v[layer, :, n:n + t].clone()
    cache.k[layer, :, n:n + t], cache.v[layer, :, n:n + t] = 0, 0
    got = x.clone()
    dl.op()(got, *model.fused_args[layer], model.cos, model.sin, model.arch.num_heads, model.arch.num_kv_heads,
            [*cache.int8_layer(layer), cache.slot_table(n + t)], [n], [t], [0])
    # Most rows agree to float32 rounding. Over 21 rows, a last-bit difference (the norm's summation
    # order) now and then moves an int8 activation code of a linear layer by one, and its row by that
    # code's share (1e-4 to 2e-3 of the largest output measured); a wrong layer is off by the outputs' size.
    row_err = ((got - want).abs().amax(-1) / want.abs().max()).tolist()
    assert sum(e < 1e-5 for e in row_err) >= t // 2 and max(row_err) < 1e-2, row_err
    for got_kv, want_kv in ((cache.k[layer, :, n:n + t], k_want), (cache.v[layer, :, n:n + t], v_want)):
        diff = (got_kv.int() - want_kv.int()).abs()
        assert int(diff.max()) <= 1 and float((diff == 0).float().mean()) > 0.99  # the same codes, or one step


def test_every_decode_step_and_prompt_chunk_takes_it(engine, model):
    """No Block.forward runs in a decode step (the op ran every layer), nor in the prompt's chunks where
    the INT8 prompt op runs; without that op, the prompt's chunks run the Blocks and decode steps still not."""
    calls = []  # per Block call: whether its steps (args: x, cos, sin, caches, layer, steps, width) hold an op step
    hooks = [b.register_forward_hook(lambda m, a, o: calls.append(any(s.int8_op for s in a[5])))
             for b in model.layers]
    saved = model.plan
    try:
        for prompt_op in ({saved.int8_prompt, False}):
            model.plan = dataclasses.replace(saved, int8_prompt=prompt_op)
            calls.clear()
            params = SamplingParams(max_tokens=6, temperature=0.0)
            r = engine.run(engine.generate(engine.encode("Put the mug in the sink."), params, "none"))
            assert len(r.token_ids) == 6
            assert not any(calls)  # no decode step ran the Blocks
            assert bool(calls) == (not prompt_op)  # the prompt's chunks did, unless fused
    finally:
        model.plan = saved
        for h in hooks:
            h.remove()


def test_rows_do_not_depend_on_the_batch(engine, model):
    """Two sequences' decode rows in one step (4 + 1 rows), and beside a prefill chunk: each row bit
    for bit the one-token step at its position, alone."""
    texts = ["The kitchen has a fridge and a sink. " * 6, "A hallway leads to the bedroom. " * 9]
    feeds = [torch.tensor([1000, 17, 4242, 9]), torch.tensor([511])]
    alone = []
    for text, feed in zip(texts, feeds, strict=True):
        cache = _prefilled(engine, text)
        n, rows = cache.length, []
        for i in range(len(feed)):
            rows.append(model.forward_batch([Item(feed[i:i + 1], cache, 1, decode=True)])[0][0])
        cache.crop(n)
        alone.append(torch.stack(rows))
    caches = [_prefilled(engine, text) for text in texts]
    together = model.forward_batch([Item(f, c, len(f), decode=True) for f, c in zip(feeds, caches, strict=True)])
    for a, b in zip(alone, together, strict=True):
        assert torch.equal(a, b)
    # beside a prefill chunk of a third sequence (the scheduler's mixed steps): the op still runs the decode rows
    caches = [_prefilled(engine, texts[0])]
    chunk = engine.contiguous_cache(64)
    block = engine.cache.block_size
    ids = torch.tensor(engine.encode("Someone left the window open in the study. " * 4)[:block])
    mixed = model.forward_batch([Item(feeds[0], caches[0], len(feeds[0]), decode=True),
                                 Item(ids, chunk, 1, block=block)])
    assert torch.equal(mixed[0], alone[0])


def test_greedy_plans_stay_close_to_torchs_ops(engine, model):
    """The op rounds its small ops differently, not wrongly: the next-token logits of a decode step
    agree with torch's ops to within what the int8 activation rounding moves (a wrong layer moves
    them by whole logits everywhere), and their argmax is the same. (A last-bit difference that flips
    one activation code in an early layer moves a row's logits by a few tenths: 0.65 on this row
    with the 8-row Q4_1 tiles, 0.25 on another with the 4-row ones. The bound is per row, at 1.)"""
    cache = _prefilled(engine, "Bring the remote from the living room to the bedroom. " * 4)
    n, feed = cache.length, torch.tensor([1000, 17, 4242])
    fused = model.forward_batch([Item(feed, cache, 3, decode=True)])[0]
    cache.crop(n)
    saved, model.plan = model.plan, dataclasses.replace(model.plan, fused_decode=False)
    try:
        ops = model.forward_batch([Item(feed, cache, 3, decode=True)])[0]
    finally:
        model.plan = saved
    assert torch.equal(fused.argmax(-1), ops.argmax(-1))
    assert float((fused - ops).abs().mean(-1).max()) < 1.0


def test_the_op_takes_a_layer_object_and_named_arguments(engine, model):
    """One LayerWeights per layer (made at load) instead of a dozen weight arguments, and every argument
    by name: the same bits as the positional call (llama.py's)."""
    cache = _prefilled(engine, "A short home.")
    n, t = cache.length, 2
    x = model.embed_tokens(torch.tensor([1000, 17])).float().contiguous()
    (layer,) = model.fused_args[0]
    assert layer.eps == model.layers[0].input_layernorm.eps
    h, kv = model.arch.num_heads, model.arch.num_kv_heads
    caches = [*cache.int8_layer(0), cache.slot_table(n + t)]
    a, b = x.clone(), x.clone()
    dl.op()(a, layer, model.cos, model.sin, h, kv, caches, [n], [t], [t])
    dl.op()(x=b, layer=layer, cos=model.cos, sin=model.sin, heads=h, kv_heads=kv, caches=caches, pos=[n], rows=[t],
            prompt_from=[t])
    assert torch.equal(a, b) and not torch.equal(a, x)


def test_bad_input_is_refused_with_what_is_wrong(engine, model):
    cache = _prefilled(engine, "A short home.")
    n, args = cache.length, model.fused_args[0]
    x = torch.zeros(2, model.arch.hidden_size)
    run = dl.op()
    h, kv = model.arch.num_heads, model.arch.num_kv_heads

    def call(x=x, caches=None, pos=(n,), rows=(2,), cos=model.cos, prompt_from=(2,)):
        caches = caches if caches is not None else [*cache.int8_layer(0), cache.slot_table(n + 2)]
        run(x, *args, cos, model.sin, h, kv, caches, list(pos), list(rows), list(prompt_from))

    with pytest.raises(RuntimeError, match="prompt_from per sequence"):
        call(prompt_from=())

    with pytest.raises(RuntimeError, match="add up"):
        call(rows=(3,))
    with pytest.raises(RuntimeError, match="slots"):
        call(caches=[*cache.int8_layer(0), cache.slot_table(n)])
    with pytest.raises(RuntimeError, match="int8"):
        k, v, ks, vs = cache.int8_layer(0)
        call(caches=[k.float(), v, ks, vs, cache.slot_table(n + 2)])
    with pytest.raises(RuntimeError, match="rope tables"):
        call(pos=(model.cos.shape[0] - 1,))
    with pytest.raises(RuntimeError, match="float32"):
        call(x=x.double())


def test_turned_off_the_plan_says_why_and_the_model_keeps_torchs_ops(monkeypatch, engine, model):
    off = KernelSwitches(fused_decode=False)
    plan = plan_kernels(CpuFeatures.probe("cpu", off, True), model.arch, "int8", "cpu", off, "q4_1")
    assert plan.q8_dot and plan.int8_decode and not plan.fused_decode
    assert dict(plan.why_not)["fused_decode_layer"] == "turned off (ORIN_LLM_FUSED_DECODE=0)"
    cache = _prefilled(engine, "A short home.")
    item = Item(torch.tensor([1000]), cache, 1, decode=True)
    assert model._fusable(item)
    monkeypatch.setattr(model, "plan", plan)
    calls = []  # the Blocks run (torch's ops around the same kernels) where the fused op ran them
    hooks = [b.register_forward_hook(lambda m, a, o: calls.append(1)) for b in model.layers]
    try:
        model.forward_batch([item])
    finally:
        for h in hooks:
            h.remove()
    assert len(calls) == len(model.layers)
