"""paged_prefill_attention against the torch reference: several sequences' new rows packed in one call,
each causal over a cached prefix (none, partial blocks, whole blocks) and its own rows, INT8 with its
static scales and float caches, GQA, a sequence with no new rows, one row after a long prefix."""

from __future__ import annotations

import pytest
import torch

from orin_llm.kernels.triton import paged_decode_attention, paged_prefill_attention, reference
from tests.kernels.paged import BLOCK, arch, close, fill, layer_args, pool

# (length in all, new rows): a cold prompt crossing BLOCK_M, an extend after a partial block, a 1-token
# prompt, a sequence with nothing new this step, a single row after a 30-token prefix
SEQS = [(37, 37), (13, 6), (1, 1), (9, 0), (31, 1)]
MAX_BLOCKS = 10


def packed(seqs, device):
    q_len = torch.tensor([n for _, n in seqs])
    q_start = torch.cat([torch.zeros(1, dtype=torch.long), q_len.cumsum(0)]).to(device, torch.int32)
    lens = torch.tensor([t for t, _ in seqs], dtype=torch.int32, device=device)
    return q_start, lens


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("int8", [True, False], ids=["int8", "float"])
def test_matches_reference(device, dtype, int8):
    a = arch()
    p = pool(a, dtype, int8, device=device)
    _, tables = fill(p, [t for t, _ in SEQS], MAX_BLOCKS)
    q_start, lens = packed(SEQS, device)
    rows = int(q_start[-1])
    q = torch.randn(rows, a.num_heads, a.head_dim, generator=torch.Generator().manual_seed(5)).to(device, dtype)
    k, v, ks, vs = layer_args(p, 1)
    out = paged_prefill_attention(q, k, v, tables, lens, q_start, BLOCK, ks, vs)
    assert out.dtype == dtype and out.shape == q.shape
    ref = reference.paged_prefill_attention(q, k, v, tables, lens, q_start, BLOCK, ks, vs)
    close(out, ref, dtype)


def test_last_row_is_the_decode_step(device):
    """A prompt's last row attends over the whole sequence: the decode kernel's answer for it."""
    a = arch()
    p = pool(a, torch.float32, True, device=device)
    _, tables = fill(p, [22], MAX_BLOCKS)
    q_start, lens = packed([(22, 8)], device)
    q = torch.randn(8, a.num_heads, a.head_dim, device=device)
    k, v, ks, vs = layer_args(p, 0)
    out = paged_prefill_attention(q, k, v, tables, lens, q_start, BLOCK, ks, vs, max_q_len=8)
    step = paged_decode_attention(q[-1:], k, v, tables, lens, BLOCK, ks, vs)
    close(out[-1:], step, torch.float32)


def test_bad_arguments(device):
    a = arch()
    p = pool(a, torch.float16, False, device=device)
    k, v, _, _ = layer_args(p, 0)
    q = torch.randn(3, a.num_heads, a.head_dim, device=device, dtype=torch.float16)
    tables = torch.zeros(1, 2, dtype=torch.int32, device=device)
    q_start, lens = packed([(3, 3)], device)
    with pytest.raises(ValueError, match="q_start needs 2 offsets"):
        paged_prefill_attention(q, k, v, tables, lens, q_start[:1], BLOCK)
    with pytest.raises(ValueError, match="q's dtype"):
        paged_prefill_attention(q.float(), k, v, tables, lens, q_start, BLOCK)
