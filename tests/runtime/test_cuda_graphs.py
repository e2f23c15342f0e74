"""The fixed-shape decode step's bookkeeping (runtime/cuda_graphs.py), on a CPU: buckets, the static
inputs' layout (padding rows into the scratch block, block tables padded), one entry per bucket reused,
and on the tiny engine, the fixed-shape step run eagerly (what a CUDA graph replays) against the
engine's own decode step, and greedy speculation identical to plain decoding on it. Capturing and
replaying real graphs needs CUDA: tests/runtime/test_cuda.py."""

from __future__ import annotations

import pytest
import torch

from orin_llm.runtime.cuda_graphs import (
    DecodeGraphs,
    Row,
    StaticInputs,
    batch_buckets,
    block_buckets,
    bucket,
    layout,
)
from orin_llm.runtime.kernel_plan import KernelSwitches
from orin_llm.runtime.sampling import SamplingParams

TORCH_OPS = KernelSwitches(fused_decode=False, int8_attention=False)


def test_buckets_cover_every_size_up_to_the_largest():
    assert batch_buckets(1) == (1,)
    assert batch_buckets(8) == (1, 2, 4, 8)
    assert batch_buckets(6) == (1, 2, 4, 6)
    assert block_buckets(3) == (3,)
    assert block_buckets(40) == (4, 8, 16, 32, 40)
    assert block_buckets(300) == (4, 8, 16, 32, 64, 128, 192, 256, 300)
    assert block_buckets(100, smallest=32) == (32, 64, 100)
    for n in range(1, 41):
        b = bucket(n, block_buckets(40))
        assert n <= b and (b == 4 or b // 2 < n or b == 40)
    with pytest.raises(ValueError, match="past the largest"):
        bucket(9, batch_buckets(8))
    with pytest.raises(ValueError):
        batch_buckets(0)


def test_layout_pads_rows_and_sequences_into_the_scratch_block():
    bs, scratch = 4, 99
    rows = [Row([5, 6, 7], pos=6, blocks=[10, 11, 12], num_logits=2),  # positions 6, 7, 8
            Row([9], pos=1, blocks=[3], num_logits=1)]
    lay = layout(rows, width=4, block_size=bs, scratch_block=scratch, batches=(1, 2, 4), blocks=(2, 4))
    assert (lay.batch, lay.width, lay.blocks) == (2, 4, 4)  # 9 keys need 3 blocks: bucket 4
    assert lay.ids == [5, 6, 7, 0, 9, 0, 0, 0]
    assert lay.positions == [6, 7, 8, 0, 1, 0, 0, 0]
    s = scratch * bs
    assert lay.slots == [11 * bs + 2, 11 * bs + 3, 12 * bs + 0, s, 3 * bs + 1, s, s, s]
    assert lay.limits == [7, 8, 9, 1, 2, 1, 1, 1]
    assert lay.table == [10, 11, 12, scratch, 3, scratch, scratch, scratch]
    assert lay.logit_rows == [(1, 3), (4, 5)]
    three = layout(rows + [Row([1], 0, [7], 0)], 4, bs, scratch, (1, 2, 4), (2, 4))
    assert three.batch == 4 and three.ids[12:] == [0] * 4 and three.table[12:] == [scratch] * 4
    assert three.logit_rows[2] == (9, 9)  # no logits asked for: an empty slice after its one row
    with pytest.raises(ValueError, match="4 wide"):
        layout([Row([1] * 5, 0, [1, 2], 1)], 4, bs, scratch, (1,), (2,))


def test_static_inputs_are_views_of_one_buffer_filled_in_one_copy():
    lay = layout([Row([5, 6], 3, [2, 5], 1)], 2, 4, 9, (1, 2), (1, 2))
    inp = StaticInputs(lay.batch, lay.width, lay.blocks, "cpu")
    inp.fill(lay)
    assert inp.ids.tolist() == [5, 6] and inp.positions.tolist() == [3, 4]
    assert inp.slots.tolist() == [11, 20] and inp.limits.tolist() == [4, 5]
    assert inp.table.tolist() == [[2, 5]]
    assert all(t.untyped_storage().data_ptr() == inp.buffer.untyped_storage().data_ptr()
               for t in (inp.ids, inp.positions, inp.slots, inp.limits, inp.table))
    other = layout([Row([5], 3, [2, 5], 1), Row([1], 0, [1], 1)], 2, 4, 9, (1, 2), (1, 2))
    with pytest.raises(ValueError, match="buffers"):
        inp.fill(other)


def test_one_entry_per_bucket_reused_and_each_sequence_gets_its_rows():
    seen = []

    def step(inp: StaticInputs) -> torch.Tensor:
        seen.append((inp.batch, inp.blocks))
        # a row's "logits": its id and position, so the test can see which rows came back
        return torch.stack([inp.ids.float(), inp.positions.float()], dim=1)

    graphs = DecodeGraphs(step, width=3, block_size=4, scratch_block=50, max_batch=4, max_blocks=16,
                          device="cpu", capture=False)
    out = graphs.run([Row([7, 8], 4, [1, 2], 2), Row([9], 0, [3], 1)])
    assert [o.tolist() for o in out] == [[[7, 4], [8, 5]], [[9, 0]]]
    graphs.run([Row([1], 5, [1, 2], 1), Row([2], 1, [3], 1)])  # same bucket (2 sequences, 4 blocks)
    graphs.run([Row([1], 17, [1, 2, 3, 4, 5], 1)])  # 1 sequence, 5 blocks -> bucket 8
    assert seen == [(2, 4), (2, 4), (1, 8)]
    assert len(graphs.entries) == 2 and graphs.stats.eager_runs == 3 and graphs.stats.captures == 0
    assert graphs.report()["steps_by_bucket"] == {"2x4": 2, "1x8": 1}
    assert graphs.fits([Row([1] * 3, 60, [0] * 16, 1)])
    assert not graphs.fits([Row([1] * 4, 0, [0], 1)])  # wider than W
    assert not graphs.fits([Row([1], 64, [0] * 17, 1)])  # past the largest table
    assert not graphs.fits([Row([1], 0, [0], 1)] * 5)  # more sequences than max_batch


def test_narrow_graphs_run_one_row_steps_one_row_wide_and_the_rest_w_wide():
    seen = []

    def step(inp: StaticInputs) -> torch.Tensor:
        seen.append((inp.batch, inp.width, inp.blocks))
        return torch.stack([inp.ids.float(), inp.positions.float()], dim=1)

    def graphs(narrow: bool) -> DecodeGraphs:
        return DecodeGraphs(step, width=5, block_size=4, scratch_block=50, max_batch=4, max_blocks=16,
                            device="cpu", capture=False, narrow=narrow)

    g = graphs(True)
    assert g.widths == (1, 5)
    out = g.run([Row([7], 4, [1, 2], 1), Row([9], 0, [3], 1)])  # plain steps: one row each
    assert [o.tolist() for o in out] == [[[7, 4]], [[9, 0]]]
    out = g.run([Row([7, 8, 6], 5, [1, 2], 3), Row([9], 1, [3], 1)])  # a verify beside a plain step: W wide
    assert [o.tolist() for o in out] == [[[7, 5], [8, 6], [6, 7]], [[9, 1]]]
    g.run([Row([1], 6, [1, 2], 1), Row([2], 2, [3], 1)])
    assert seen == [(2, 1, 4), (2, 5, 4), (2, 1, 4)] and len(g.entries) == 2
    assert g.report()["steps_by_bucket"] == {"2x4w1": 2, "2x4": 1} and g.report()["widths"] == [1, 5]
    assert not g.fits([Row([1] * 6, 0, [0, 1], 1)])  # still no wider than W
    wide = graphs(False)
    assert wide.widths == (5,)
    wide.run([Row([7], 4, [1, 2], 1)])
    assert seen[-1] == (1, 5, 4) and list(wide.report()["steps_by_bucket"]) == ["1x4"]


@pytest.mark.parametrize("int8", [True, False])
def test_the_one_gather_read_equals_the_read_run_by_run(int8):
    """A GPU pool reads a sequence's K/V in one gather through its slot table (kv_pool.read_unscaled); it
    must give what the CPU's copy per run of contiguous blocks gives."""
    from orin_llm.runtime.kv_pool import KVPool, PagedView
    from tests.runtime.test_kernel_plan import _arch

    arch = _arch()
    scales = (torch.full((2, 1), 0.01), torch.full((2, 1), 0.02)) if int8 else (None, None)
    pool = KVPool(arch, 40, 4, torch.float32, "cpu", *scales)
    pool.k.copy_(torch.randint(-100, 100, pool.k.shape).to(pool.k.dtype))
    pool.v.copy_(torch.randint(-100, 100, pool.v.shape).to(pool.v.dtype))
    view = PagedView(pool, [7, 8, 3, 20, 21, 22, 5], length=26)
    assert len(view.runs(26)) == 4
    for layer in range(2):
        k, v = pool.gather(layer, view.runs(26), 26, torch.bfloat16)
        k2, v2 = pool.gather_index(layer, view.slots(0, 26), torch.bfloat16)
        assert torch.equal(k, k2) and torch.equal(v, v2)
    assert pool.nbytes == pool.bytes_per_token * 40 * 4  # the scratch block is not the pool's


@pytest.fixture(scope="module")
def fixed_engine(tiny_engine_dir):
    """The tiny engine with its decode steps on the fixed-shape path, run eagerly (no CUDA here)."""
    from orin_llm.runtime.engine import Engine

    eng = Engine.load(tiny_engine_dir, device="cpu", switches=TORCH_OPS)
    limits = eng.manifest.limits
    eng.runner.attach_graphs(eng.cache.target_pool, limits["max_batch_size"], eng.max_seq_len + eng.decode_rows,
                            capture=False)
    return eng


@pytest.fixture(scope="module")
def torch_engine(tiny_engine_dir):
    """The tiny engine on torch's ops (no fused C++ layer): the reference the fixed-shape step follows."""
    from orin_llm.runtime.engine import Engine

    return Engine.load(tiny_engine_dir, device="cpu", switches=TORCH_OPS)


def test_the_fixed_shape_step_matches_the_engines_own_decode_step(fixed_engine, torch_engine):
    """Each layer's attention output agrees with the engine's own step to float32 rounding (a wrong mask,
    slot or table is off by far more); the logits agree to a few percent only, because q8_dot rounds
    each layer's activations to int8 and a rounding flipped by 1e-7 moves an activation by 1/127."""
    from orin_llm.runtime.llama import Item

    ids = list(range(100, 140))
    logits, attn = [], []
    for eng in (torch_engine, fixed_engine):
        eng.clear_cache()
        seen = []
        hook = eng.model.layers[0].self_attn.o_proj.register_forward_hook(
            lambda m, i, o, seen=seen: seen.append(i[0]))
        kv = eng.cache.admit(ids, len(ids) + 1)
        try:
            eng.cache.grow(kv, len(ids) - 3)
            eng.runner.forward([Item(torch.tensor(ids[:-3]), kv.target, 0, block=16)])
            eng.cache.grow(kv, len(ids))
            seen.clear()
            logits.append(eng.runner.forward([Item(torch.tensor(ids[-3:]), kv.target, 3, decode=True)])[0])
        finally:
            eng.cache.release(kv)
            hook.remove()
        attn.append(seen[0][:3] if seen else None)
    assert fixed_engine.runner.graphs.stats.eager_runs >= 1
    if attn[0] is not None:  # (the engine's own step may run the fused C++ layer: no o_proj call to see)
        assert torch.allclose(attn[0], attn[1], atol=1e-5), (attn[0] - attn[1]).abs().max()
    assert logits[0].shape == logits[1].shape == (3, fixed_engine.model.arch.vocab_size)
    scale = logits[0].abs().max()
    assert (logits[0] - logits[1]).abs().max() < 0.05 * scale


@pytest.mark.parametrize("mode", ["lookup"])
def test_greedy_speculation_is_plain_decoding_on_the_fixed_shape_path(fixed_engine, mode):
    prompt = fixed_engine.tokenizer.encode("go to the kitchen and pick up the mug, then go to the kitchen")
    runs = fixed_engine.runner.graphs.stats.eager_runs
    plain = fixed_engine.run(fixed_engine.generate(prompt, SamplingParams(max_tokens=12), speculation="none"))
    spec = fixed_engine.run(fixed_engine.generate(prompt, SamplingParams(max_tokens=12), speculation=mode))
    assert fixed_engine.runner.graphs.stats.eager_runs > runs + 5
    assert spec.token_ids == plain.token_ids
