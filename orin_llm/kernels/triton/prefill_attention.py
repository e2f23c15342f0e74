"""Prefill / extend attention over the paged KV pool (INT8 with static scales, or float), in Triton:
several sequences' new rows at once, each causal over its cached prefix and its own new rows.

Same layout and scales as decode_attention.py. The new rows' K/V are in the pool already (the
runtime writes a chunk's K/V, then attends, as attention_layer.py does). Rows are packed: sequence
b's queries are q[q_start[b]:q_start[b+1]] at positions seq_lens[b] - n_b .. seq_lens[b] - 1.

Each program runs BLOCK_M query rows of one sequence and one query head over key tiles up to its
last row's position (tiles past it are never read), online softmax in float32. Rows of a verify step
that must equal one-token decode steps bit for bit go through paged_decode_attention instead
(decode_attention.py: one row per position): the tiling here differs.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
import triton
import triton.language as tl

from .common import check_float, codes_mode, dense_rows, dot, dot_mode, operand, pow2

BLOCK_M = 32  # query rows per program
BLOCK_N = 32  # keys per tile


@triton.jit
def _prefill(Q, K, V, BT, LENS, QSTART, KS, VS, OUT, qk_scale,
             stride_qt, stride_qh, stride_kh, stride_ks, stride_vh, stride_vs, stride_bt, stride_ot, stride_oh,
             G: tl.constexpr, D: tl.constexpr, D_PAD: tl.constexpr, BS: tl.constexpr, BLOCK_M: tl.constexpr,
             BLOCK_N: tl.constexpr, SCALED: tl.constexpr, DOT: tl.constexpr):
    b = tl.program_id(0)
    h = tl.program_id(1)
    mb = tl.program_id(2)
    kvh = h // G
    first = tl.load(QSTART + b)
    q_len = tl.load(QSTART + b + 1) - first
    seq_len = tl.load(LENS + b)
    prefix = seq_len - q_len
    rows = mb * BLOCK_M + tl.arange(0, BLOCK_M)
    rmask = rows < q_len
    pos = prefix + rows
    d = tl.arange(0, D_PAD)
    dmask = d < D
    q = tl.load(Q + (first + rows)[:, None].to(tl.int64) * stride_qt + h * stride_qh + d[None, :],
                mask=rmask[:, None] & dmask[None, :], other=0.0)
    q = operand(q, q.dtype, DOT)  # (float16 under F16_CODES; else as loaded)
    scale = tl.cast(qk_scale, tl.float32)  # (torch.compile passes a Python float as float64: see decode_attention)
    if SCALED:
        scale = scale * tl.load(KS + kvh).to(tl.float32)
    # keys up to this block's last row (none when the block is past the sequence's rows)
    hi = tl.where(mb * BLOCK_M < q_len, tl.minimum(seq_len, prefix + (mb + 1) * BLOCK_M), 0)
    m = tl.full([BLOCK_M], -1.0e30, tl.float32)
    l_sum = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D_PAD], tl.float32)
    k_base = K + kvh * stride_kh
    v_base = V + kvh * stride_vh
    for start in range(0, hi, BLOCK_N):
        n = start + tl.arange(0, BLOCK_N)
        nmask = n < hi
        page = tl.load(BT + b * stride_bt + n // BS, mask=nmask, other=0).to(tl.int64)
        slot = page * BS + n % BS
        kv_mask = nmask[:, None] & dmask[None, :]
        k = operand(tl.load(k_base + slot[:, None] * stride_ks + d[None, :], mask=kv_mask, other=0), q.dtype, DOT)
        qk = dot(q, tl.trans(k), DOT) * scale
        qk = tl.where(nmask[None, :] & (n[None, :] <= pos[:, None]), qk, float("-inf"))
        m_new = tl.maximum(m, tl.max(qk, 1))
        alpha = tl.exp2(m - m_new)
        p = tl.exp2(qk - m_new[:, None])
        l_sum = l_sum * alpha + tl.sum(p, 1)
        v = operand(tl.load(v_base + slot[:, None] * stride_vs + d[None, :], mask=kv_mask, other=0), q.dtype, DOT)
        acc = acc * alpha[:, None] + dot(operand(p, q.dtype, DOT), v, DOT)
        m = m_new
    out = acc / tl.where(l_sum > 0, l_sum, 1.0)[:, None]
    if SCALED:
        out = out * tl.load(VS + kvh).to(tl.float32)
    tl.store(OUT + (first + rows)[:, None].to(tl.int64) * stride_ot + h * stride_oh + d[None, :],
             out.to(OUT.dtype.element_ty), mask=rmask[:, None] & dmask[None, :])


def paged_prefill_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                            block_tables: torch.Tensor, seq_lens: torch.Tensor, q_start: torch.Tensor,
                            block_size: int, k_scale: Optional[torch.Tensor] = None,
                            v_scale: Optional[torch.Tensor] = None, sm_scale: Optional[float] = None,
                            max_q_len: Optional[int] = None, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """q: [T, H, D], the new rows of B sequences packed (after RoPE, their K/V already written);
    q_start: [B+1] int32 offsets of each sequence's rows in q (q_start[0] = 0); seq_lens: [B] int32,
    each sequence's length including its new rows; block_tables: [B, max_blocks] int32; k_cache,
    v_cache: one layer of the pool, [KV, slots, D]; k_scale, v_scale: [KV] for an INT8 cache.
    max_q_len: the most rows of one sequence (read from q_start when not given: a host sync).
    Returns [T, H, D] in q's dtype."""
    check_float("q", q)
    t, h, d = q.shape
    kv, _, dk = k_cache.shape
    bsz = seq_lens.shape[0]
    if dk != d or v_cache.shape != k_cache.shape or h % kv:
        raise ValueError(f"q {tuple(q.shape)} and cache {tuple(k_cache.shape)}/{tuple(v_cache.shape)} do not "
                         "fit: [T, H, D] and [KV, slots, D] with H a multiple of KV")
    if q_start.shape[0] != bsz + 1 or block_tables.shape[0] != bsz:
        raise ValueError(f"q_start needs {bsz + 1} offsets and block_tables {bsz} rows (one per sequence)")
    scaled = k_cache.dtype == torch.int8
    if scaled and (k_scale is None or v_scale is None):
        raise ValueError("an INT8 cache needs k_scale and v_scale ([KV] each)")
    if not scaled and k_cache.dtype != q.dtype:
        raise ValueError(f"a float cache must be in q's dtype ({q.dtype}), not {k_cache.dtype}")
    if k_cache.stride(2) != 1 or v_cache.stride(2) != 1 or q.stride(2) != 1:
        raise ValueError("q and the cache need a contiguous head_dim")
    # the kernel steps through these densely (no copy when they already are: views of the pool's scales are)
    block_tables, seq_lens = dense_rows(block_tables), seq_lens.contiguous()
    q_start = q_start.contiguous()
    if scaled:
        k_scale, v_scale = k_scale.contiguous(), v_scale.contiguous()
    if out is None:
        out = torch.empty_like(q)
    if max_q_len is None:
        max_q_len = int((q_start[1:] - q_start[:-1]).max()) if bsz else 0
    if t == 0 or max_q_len == 0:
        return out
    sm_scale = d ** -0.5 if sm_scale is None else sm_scale
    dummy = q
    _prefill[(bsz, h, triton.cdiv(max_q_len, BLOCK_M))](
        q, k_cache, v_cache, block_tables, seq_lens, q_start, k_scale if scaled else dummy,
        v_scale if scaled else dummy, out, sm_scale * math.log2(math.e),
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), v_cache.stride(0), v_cache.stride(1),
        block_tables.stride(0), out.stride(0), out.stride(1),
        G=h // kv, D=d, D_PAD=pow2(d), BS=block_size, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, SCALED=scaled,
        DOT=codes_mode(q.dtype) if scaled else dot_mode(q.dtype))
    return out
