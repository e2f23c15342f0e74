"""Decode attention over the paged KV pool (INT8 with static scales, or float), one query row per
sequence, in Triton.

Layout (runtime/kv_pool.py): one layer of the pool is K and V [kv_heads, slots, head_dim], slot =
block_id · block_size + offset; a sequence's block table lists its block ids in order. An INT8 pool
holds round(x / scale) with one scale per KV head (calibrated, static), so the kernel folds K's scale
into the scores and V's into the output: q·(s·k) = s·(q·k), Σ p·(s·v) = s·Σ p·v.

Each program runs one (sequence, KV head, split): the KV head's G query heads together (GQA: its K/V
tiles are read once for all of them) over the split's fixed range of logical blocks, online softmax
in float32. Splits cover a fixed number of blocks whatever the batch (flash-decoding's split-K, so a
batch of one long sequence still fills the GPU): a row's arithmetic depends on its own length alone,
not on the batch or its bucket, so a verify row computed here (one row per position, its block table
repeated) equals the one-token step bit for bit (speculation stays lossless). A second kernel merges
the splits. No host value depends on the lengths: the launch is CUDA-graph capturable.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
import triton
import triton.language as tl

from .common import check_float, codes_mode, dense_rows, dot, dot_mode, launch_options, operand, pow2

SPLIT_BLOCKS = 16  # logical KV blocks per split (256 tokens of a 16-token block)
BLOCK_N = 32  # keys per tile


@triton.jit
def _decode_split(Q, K, V, BT, LENS, KS, VS, OUT, PM, PL, PO, qk_scale,
                  stride_qb, stride_qh, stride_kh, stride_ks, stride_vh, stride_vs, stride_bt,
                  stride_ob, stride_oh, blocks_per_split, num_splits,
                  G: tl.constexpr, G_PAD: tl.constexpr, D: tl.constexpr, D_PAD: tl.constexpr,
                  BS: tl.constexpr, BLOCK_N: tl.constexpr, SCALED: tl.constexpr, SPLIT: tl.constexpr,
                  DOT: tl.constexpr):
    b = tl.program_id(0)
    kvh = tl.program_id(1)
    s = tl.program_id(2)
    seq_len = tl.load(LENS + b)
    g = tl.arange(0, G_PAD)
    d = tl.arange(0, D_PAD)
    heads = kvh * G + g
    hmask = g < G
    dmask = d < D
    q = tl.load(Q + b * stride_qb + heads[:, None] * stride_qh + d[None, :],
                mask=hmask[:, None] & dmask[None, :], other=0.0)
    q = operand(q, q.dtype, DOT)  # (float16 under F16_CODES; else as loaded)
    # (float32 stated: torch.compile passes a Python float as float64, which the loop below cannot carry)
    scale = tl.cast(qk_scale, tl.float32)  # sm_scale · log2(e): exp2 below
    if SCALED:
        scale = scale * tl.load(KS + kvh).to(tl.float32)
    lo = s * blocks_per_split * BS
    hi = tl.minimum(seq_len, lo + blocks_per_split * BS)
    # finite start: a split (or a padded batch row) with no keys keeps l = 0 and no NaN
    m = tl.full([G_PAD], -1.0e30, tl.float32)
    l_sum = tl.zeros([G_PAD], tl.float32)
    acc = tl.zeros([G_PAD, D_PAD], tl.float32)
    k_base = K + kvh * stride_kh
    v_base = V + kvh * stride_vh
    for start in range(lo, hi, BLOCK_N):
        n = start + tl.arange(0, BLOCK_N)
        nmask = n < hi
        page = tl.load(BT + b * stride_bt + n // BS, mask=nmask, other=0).to(tl.int64)
        slot = page * BS + n % BS
        kv_mask = nmask[:, None] & dmask[None, :]
        k = tl.load(k_base + slot[:, None] * stride_ks + d[None, :], mask=kv_mask, other=0)
        k = operand(k, q.dtype, DOT)
        qk = dot(q, tl.trans(k), DOT) * scale
        qk = tl.where(nmask[None, :], qk, float("-inf"))
        m_new = tl.maximum(m, tl.max(qk, 1))
        alpha = tl.exp2(m - m_new)
        p = tl.exp2(qk - m_new[:, None])
        l_sum = l_sum * alpha + tl.sum(p, 1)
        v = tl.load(v_base + slot[:, None] * stride_vs + d[None, :], mask=kv_mask, other=0)
        v = operand(v, q.dtype, DOT)
        acc = acc * alpha[:, None] + dot(operand(p, q.dtype, DOT), v, DOT)
        m = m_new
    if SPLIT:
        row = (b * (tl.num_programs(1) * G) + heads) * num_splits + s  # [B, H, splits]
        tl.store(PM + row, m, mask=hmask)
        tl.store(PL + row, l_sum, mask=hmask)
        tl.store(PO + row[:, None] * D_PAD + d[None, :], acc, mask=hmask[:, None])
    else:
        out = acc / tl.where(l_sum > 0, l_sum, 1.0)[:, None]
        if SCALED:
            out = out * tl.load(VS + kvh).to(tl.float32)
        tl.store(OUT + b * stride_ob + heads[:, None] * stride_oh + d[None, :], out.to(OUT.dtype.element_ty),
                 mask=hmask[:, None] & dmask[None, :])


@triton.jit
def _decode_merge(PM, PL, PO, VS, OUT, stride_ob, stride_oh, num_splits,
                  H: tl.constexpr, G: tl.constexpr, D: tl.constexpr, D_PAD: tl.constexpr,
                  S_PAD: tl.constexpr, SCALED: tl.constexpr):
    b = tl.program_id(0)
    h = tl.program_id(1)
    s = tl.arange(0, S_PAD)
    d = tl.arange(0, D_PAD)
    smask = s < num_splits
    row = (b * H + h) * num_splits + s
    m = tl.load(PM + row, mask=smask, other=-1.0e30)
    l_sum = tl.load(PL + row, mask=smask, other=0.0)
    acc = tl.load(PO + row[:, None] * D_PAD + d[None, :], mask=smask[:, None], other=0.0)
    m_all = tl.max(m, 0)
    w = tl.exp2(m - m_all)
    total = tl.sum(l_sum * w, 0)
    out = tl.sum(acc * w[:, None], 0) / tl.where(total > 0, total, 1.0)
    if SCALED:
        out = out * tl.load(VS + h // G).to(tl.float32)
    tl.store(OUT + b * stride_ob + h * stride_oh + d, out.to(OUT.dtype.element_ty), mask=d < D)


def paged_decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           block_tables: torch.Tensor, seq_lens: torch.Tensor, block_size: int,
                           k_scale: Optional[torch.Tensor] = None, v_scale: Optional[torch.Tensor] = None,
                           sm_scale: Optional[float] = None, out: Optional[torch.Tensor] = None,
                           split_blocks: int = SPLIT_BLOCKS, num_warps: Optional[int] = None,
                           num_stages: Optional[int] = None) -> torch.Tensor:
    """q: [B, H, D] (one query per sequence, after RoPE, its own K/V already written); k_cache,
    v_cache: one layer of the pool, [KV, slots, D] (int8, or q's dtype); block_tables: [B, max_blocks]
    int32 (entries past a sequence's length are never read); seq_lens: [B] int32, the keys each query
    sees (0: a padded row, output 0); k_scale, v_scale: [KV] for an INT8 cache. Returns [B, H, D] in
    q's dtype (into `out` if given)."""
    check_float("q", q)
    bsz, h, d = q.shape
    kv, _, dk = k_cache.shape
    if dk != d or v_cache.shape != k_cache.shape or h % kv:
        raise ValueError(f"q {tuple(q.shape)} and cache {tuple(k_cache.shape)}/{tuple(v_cache.shape)} do not "
                         "fit: [B, H, D] and [KV, slots, D] with H a multiple of KV")
    scaled = k_cache.dtype == torch.int8
    if scaled and (k_scale is None or v_scale is None):
        raise ValueError("an INT8 cache needs k_scale and v_scale ([KV] each)")
    if not scaled and k_cache.dtype != q.dtype:
        raise ValueError(f"a float cache must be in q's dtype ({q.dtype}), not {k_cache.dtype}")
    if k_cache.stride(2) != 1 or v_cache.stride(2) != 1 or q.stride(2) != 1:
        raise ValueError("q and the cache need a contiguous head_dim")
    # the kernel steps through these densely (no copy when they already are: views of the pool's scales are)
    block_tables, seq_lens = dense_rows(block_tables), seq_lens.contiguous()
    if scaled:
        k_scale, v_scale = k_scale.contiguous(), v_scale.contiguous()
    if out is None:
        out = torch.empty_like(q)
    sm_scale = d ** -0.5 if sm_scale is None else sm_scale
    num_splits = triton.cdiv(block_tables.shape[1], split_blocks)
    g = h // kv
    d_pad = pow2(d)
    dummy = q  # (the scale pointers when the cache is float: never read)
    split = num_splits > 1
    if split:
        pm = torch.empty(bsz * h * num_splits, dtype=torch.float32, device=q.device)
        pl = torch.empty_like(pm)
        po = torch.empty(bsz * h * num_splits, d_pad, dtype=torch.float32, device=q.device)
    else:
        pm = pl = po = dummy
    _decode_split[(bsz, kv, num_splits)](
        q, k_cache, v_cache, block_tables, seq_lens, k_scale if scaled else dummy, v_scale if scaled else dummy,
        out, pm, pl, po, sm_scale * math.log2(math.e),
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), v_cache.stride(0), v_cache.stride(1),
        block_tables.stride(0), out.stride(0), out.stride(1), split_blocks, num_splits,
        G=g, G_PAD=pow2(g), D=d, D_PAD=d_pad, BS=block_size, BLOCK_N=BLOCK_N, SCALED=scaled, SPLIT=split,
        DOT=codes_mode(q.dtype) if scaled else dot_mode(q.dtype), **launch_options(num_warps, num_stages))
    if split:
        _decode_merge[(bsz, h)](pm, pl, po, v_scale if scaled else dummy, out, out.stride(0), out.stride(1),
                                num_splits, H=h, G=g, D=d, D_PAD=d_pad, S_PAD=pow2(num_splits, 1), SCALED=scaled)
    return out
