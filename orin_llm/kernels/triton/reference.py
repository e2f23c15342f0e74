"""Torch references for the Triton kernels: the same layouts and scales, computed the plain way in
float32 (tests compare the kernels with these; any device, no Triton)."""

from __future__ import annotations

from typing import Optional

import torch


def slots_of(block_table: torch.Tensor, length: int, block_size: int) -> torch.Tensor:
    """The pool slots holding positions [0, length) of a sequence (kv_pool.PagedView.slots)."""
    pos = torch.arange(length, device=block_table.device)
    return block_table.long()[pos // block_size] * block_size + pos % block_size


def gather_kv(cache: torch.Tensor, scale: Optional[torch.Tensor], slots: torch.Tensor) -> torch.Tensor:
    """[KV, n, D] float32 values of the slots: int8 codes times their KV head's scale."""
    x = cache[:, slots].float()
    return x if scale is None else x * scale.float()[:, None, None]


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pos0: int, sm_scale: float) -> torch.Tensor:
    """q: [T, H, D] at positions pos0 .. pos0+T-1; k, v: [KV, n, D] with n = pos0 + T. Causal, GQA.
    Returns [T, H, D] float32."""
    t, h, _ = q.shape
    rep = h // k.shape[0]
    k, v = k.repeat_interleave(rep, 0), v.repeat_interleave(rep, 0)
    scores = torch.einsum("thd,hnd->htn", q.float(), k) * sm_scale
    n = k.shape[1]
    future = torch.arange(n, device=q.device)[None, :] > (pos0 + torch.arange(t, device=q.device))[:, None]
    scores = scores.masked_fill(future[None], float("-inf"))
    return torch.einsum("htn,hnd->thd", torch.softmax(scores, -1), v)


def paged_decode_attention(q, k_cache, v_cache, block_tables, seq_lens, block_size, k_scale=None, v_scale=None,
                           sm_scale=None):
    sm_scale = q.shape[-1] ** -0.5 if sm_scale is None else sm_scale
    out = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    for b in range(q.shape[0]):
        n = int(seq_lens[b])
        if n == 0:
            continue
        slots = slots_of(block_tables[b], n, block_size)
        k, v = gather_kv(k_cache, k_scale, slots), gather_kv(v_cache, v_scale, slots)
        out[b] = attend(q[b:b + 1], k, v, n - 1, sm_scale)[0]
    return out


def paged_prefill_attention(q, k_cache, v_cache, block_tables, seq_lens, q_start, block_size, k_scale=None,
                            v_scale=None, sm_scale=None):
    sm_scale = q.shape[-1] ** -0.5 if sm_scale is None else sm_scale
    out = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    for b in range(seq_lens.shape[0]):
        a, e, n = int(q_start[b]), int(q_start[b + 1]), int(seq_lens[b])
        if e == a:
            continue
        slots = slots_of(block_tables[b], n, block_size)
        k, v = gather_kv(k_cache, k_scale, slots), gather_kv(v_cache, v_scale, slots)
        out[a:e] = attend(q[a:e], k, v, n - (e - a), sm_scale)
    return out


def q4_1_dequantize(qweight: torch.Tensor, scales: torch.Tensor, mins: torch.Tensor) -> torch.Tensor:
    """[N, K] float32 from quant.recover_q4_1's blocks: codes [N, K/2] (even column in the low
    nibble), scales and mins [N, K/32]: w = scale·code + min."""
    codes = torch.stack((qweight & 0xF, qweight >> 4), dim=-1).view(qweight.shape[0], -1).float()
    group = codes.shape[1] // scales.shape[1]
    return codes * scales.float().repeat_interleave(group, 1) + mins.float().repeat_interleave(group, 1)


def int4_linear(x, qweight, scales, mins):
    return x.float() @ q4_1_dequantize(qweight, scales, mins).T


def int8_head(x, qweight, scales):
    """x @ (codes · scales).T: per-row scales [V] or per-block scales [V, K/group] (a Q8_0 matrix)."""
    w = qweight.float()
    s = scales.float()
    w = w * (s[:, None] if s.dim() == 1 else s.repeat_interleave(w.shape[1] // s.shape[1], 1))
    return x.float() @ w.T


def add_rms_norm(x, weight, eps, delta=None):
    """The residual add and llama.RMSNorm as the unfused step runs them, in x's dtype."""
    if delta is not None:
        x = x + delta
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return x, weight * h.to(x.dtype)


def rope_write(qkv, positions, cos, sin, k_cache, v_cache, slots, heads, kv_heads, k_scale=None, v_scale=None):
    """attention_layer.Attention.forward_static's RoPE and kv_pool.KVPool.write, unfused: returns q
    [T, heads, D] and writes k_cache/v_cache in place."""
    t, d = qkv.shape[0], k_cache.shape[-1]
    c, s = cos[positions].to(qkv.dtype), sin[positions].to(qkv.dtype)
    qk, v = qkv.split([(heads + kv_heads) * d, kv_heads * d], dim=-1)
    qk = qk.reshape(t, heads + kv_heads, d)
    qk = qk * c + qk.unflatten(-1, (2, -1)).flip(-2).flatten(-2) * s
    q, k = qk[:, :heads], qk[:, heads:]
    k, v = k.transpose(0, 1), v.reshape(t, kv_heads, d).transpose(0, 1)
    if k_cache.dtype == torch.int8:
        k = torch.clamp(torch.round(k / k_scale.float().view(-1, 1, 1)), -127, 127).to(torch.int8)
        v = torch.clamp(torch.round(v / v_scale.float().view(-1, 1, 1)), -127, 127).to(torch.int8)
    k_cache.index_copy_(1, slots, k.to(k_cache.dtype))
    v_cache.index_copy_(1, slots, v.to(v_cache.dtype))
    return q


def silu_mul(gate_up):
    gate, up = gate_up.chunk(2, dim=-1)
    return torch.nn.functional.silu(gate) * up
