"""oneDNN-packed linears: same math as F.linear, and the row-independence check that decides
whether decode steps need padding to stay batch-invariant (bit-exact speculation)."""

import dataclasses

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from orin_llm.kernels.packed import PackedLinear, pack_linears, packing_available, rows_independent
from orin_llm.runtime.head import Q8Head
from tests.conftest import tiny_fixture

tiny_engine = tiny_fixture("engine")  # random weights do here (tests/conftest.py)

needs_packing = pytest.mark.skipif(not packing_available("cpu", torch.float32), reason="no oneDNN here")


@needs_packing
@pytest.mark.parametrize("rows", [1, 2, 9, 40])
def test_packed_linear_is_the_linear_layer_to_float32_precision(rows):
    torch.manual_seed(0)
    w, x = torch.randn(96, 64) * 0.1, torch.randn(rows, 64)
    exact = F.linear(x.double(), w.double())
    got = PackedLinear(w)(x)
    assert got.shape == (rows, 96) and got.dtype == torch.float32
    # as close to the float64 result as torch's own float32 matmul is, within a small factor
    assert (got.double() - exact).abs().max() <= 8 * (F.linear(x, w).double() - exact).abs().max() + 1e-7


@needs_packing
def test_pack_linears_replaces_bias_free_linears_only():
    model = nn.Sequential(nn.Linear(8, 16, bias=False), nn.Linear(16, 4, bias=True))
    x = torch.randn(3, 8)
    ref = model(x)
    assert pack_linears(model) == 1
    assert isinstance(model[0], PackedLinear) and type(model[1]) is nn.Linear
    assert not hasattr(model[0], "weight")  # the unpacked copy is released
    assert torch.allclose(model(x), ref, atol=1e-5)


class RowCountDependent(nn.Linear):
    """A kernel whose result depends on how many rows share the call, as torch's default CPU
    matmul does (gemv at one row, other blockings at others)."""

    def forward(self, x):
        return super().forward(x) * (1 + 1e-6 * x.shape[0])


def test_rows_independent_detects_a_row_count_dependent_kernel():
    assert rows_independent(nn.Sequential(nn.Identity(), RowCountDependent(8, 8, bias=False)), 4) is False
    assert rows_independent(nn.Sequential(nn.Identity()), 4) is False  # nothing checked, nothing claimed


@needs_packing
def test_engine_packs_its_target_and_records_what_it_found(engine):
    model = engine.model
    head = model.lm_head
    if isinstance(head, Q8Head):  # a q4_1 target: int8 and exact top; its float32 head, made on demand, is packed
        head.full(torch.zeros(1, head.in_features))
        head = head.full_head
    assert isinstance(head, PackedLinear)
    assert model.plan.rows_independent == rows_independent(model, 16)


def test_padding_fallback_keeps_verify_equal_to_one_token_steps(engine):
    """Where the kernels are not row-independent the decode steps are padded to decode_width rows:
    a k+1-token verify then still yields, at every position, the logits of one-token steps."""
    model, cache = engine.model, engine.contiguous_cache(256)
    ids = torch.tensor(engine.chat_ids([{"role": "user", "content": "Put the cup in the sink."}]))
    cont = torch.tensor([100, 2000, 300, 4000, 50])
    saved = model.plan
    try:
        for independent in (saved.rows_independent, False):
            model.plan = dataclasses.replace(saved, rows_independent=independent)
            cache.crop(0)
            model(ids, cache)
            steps = torch.cat([model(cont[i:i + 1], cache) for i in range(len(cont))])
            cache.crop(len(ids))
            verify = model(cont, cache, num_logits=len(cont))
            assert torch.equal(verify, steps), f"rows_independent={independent}"
    finally:
        model.plan = saved
        cache.crop(0)


def test_pack_applies_to_float32_on_cpus():
    assert not packing_available("cpu", torch.bfloat16)
    assert not packing_available("meta", torch.float32)
