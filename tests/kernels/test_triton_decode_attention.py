"""paged_decode_attention against the torch reference and against the runtime's own read of the
pool: INT8 with its static scales and float caches, GQA, scattered blocks, partial last blocks,
lengths that differ across the batch, a length-1 sequence and a padded row (length 0)."""

from __future__ import annotations

import pytest
import torch

from orin_llm.kernels.triton import paged_decode_attention, reference
from tests.kernels.paged import BLOCK, arch, close, fill, layer_args, pool

LENGTHS = [1, 7, 13, 30, 0]  # 13: 3 full blocks and 1 of 4; 0: a padded batch row
MAX_BLOCKS = 9


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("int8", [True, False], ids=["int8", "float"])
@pytest.mark.parametrize("split_blocks", [2, 16], ids=["split", "whole"])
def test_matches_reference(device, dtype, int8, split_blocks):
    a = arch()
    p = pool(a, dtype, int8, device=device)
    _, tables = fill(p, LENGTHS, MAX_BLOCKS)
    lens = torch.tensor(LENGTHS, dtype=torch.int32, device=device)
    q = torch.randn(len(LENGTHS), a.num_heads, a.head_dim, generator=torch.Generator().manual_seed(3)).to(device, dtype)
    for layer in range(a.num_layers):
        k, v, ks, vs = layer_args(p, layer)
        out = paged_decode_attention(q, k, v, tables, lens, BLOCK, ks, vs, split_blocks=split_blocks)
        assert out.dtype == dtype and out.shape == q.shape
        ref = reference.paged_decode_attention(q, k, v, tables, lens, BLOCK, ks, vs)
        close(out, ref, dtype)
        assert torch.all(out[-1] == 0), "a padded row (length 0) must give zeros, not NaN"


def test_the_runtimes_own_read(device):
    """The kernel's view of an INT8 pool is the runtime's: PagedView.read_unscaled and the scales."""
    a = arch()
    p = pool(a, torch.float32, True, device=device)
    views, tables = fill(p, [11, 5], MAX_BLOCKS)
    lens = torch.tensor([11, 5], dtype=torch.int32, device=device)
    q = torch.randn(2, a.num_heads, a.head_dim, device=device)
    k, v, ks, vs = layer_args(p, 1)
    out = paged_decode_attention(q, k, v, tables, lens, BLOCK, ks, vs)
    rep = a.num_heads // a.num_kv_heads
    for b, view in enumerate(views):
        kk, vv, s_k, s_v = view.read_unscaled(1, view.length, torch.float32)
        kk = (kk * s_k[:, None, None]).repeat_interleave(rep, 0)
        vv = (vv * s_v[:, None, None]).repeat_interleave(rep, 0)
        want = torch.nn.functional.scaled_dot_product_attention(q[b][:, None], kk, vv)[:, 0]
        close(out[b], want, torch.float32)


def test_rows_do_not_depend_on_the_batch(device):
    """A sequence's row is bit for bit the same alone, in a batch, and as a verify step's rows (one row
    per position, the block table repeated): speculation's lossless verify rests on it."""
    a = arch()
    p = pool(a, torch.float16, True, device=device)
    _, tables = fill(p, [30, 9, 17], MAX_BLOCKS)
    q = torch.randn(3, a.num_heads, a.head_dim, device=device, dtype=torch.float16)
    k, v, ks, vs = layer_args(p, 0)
    lens = torch.tensor([30, 9, 17], dtype=torch.int32, device=device)
    batch = paged_decode_attention(q, k, v, tables, lens, BLOCK, ks, vs, split_blocks=2)
    alone = paged_decode_attention(q[:1], k, v, tables[:1], lens[:1], BLOCK, ks, vs, split_blocks=2)
    assert torch.equal(batch[0], alone[0])
    # a verify step of 3 positions of sequence 0 (27, 28, 29 keys): row 2 is the 30-key step
    rows = paged_decode_attention(q[:1].expand(3, -1, -1).contiguous(), k, v, tables[:1].expand(3, -1),
                                  torch.tensor([28, 29, 30], dtype=torch.int32, device=device), BLOCK, ks, vs,
                                  split_blocks=2)
    assert torch.equal(rows[2], batch[0])


def test_bad_arguments(device):
    a = arch()
    p = pool(a, torch.float32, True, device=device)
    k, v, ks, vs = layer_args(p, 0)
    q = torch.randn(1, a.num_heads, a.head_dim, device=device)
    tables = torch.zeros(1, 2, dtype=torch.int32, device=device)
    lens = torch.ones(1, dtype=torch.int32, device=device)
    with pytest.raises(ValueError, match="k_scale and v_scale"):
        paged_decode_attention(q, k, v, tables, lens, BLOCK)
    with pytest.raises(ValueError, match="multiple of KV"):
        paged_decode_attention(q[:, :5], k, v, tables, lens, BLOCK, ks, vs)
    with pytest.raises(ValueError, match="float16, bfloat16 or float32"):
        paged_decode_attention(q.to(torch.float64), k, v, tables, lens, BLOCK, ks, vs)
