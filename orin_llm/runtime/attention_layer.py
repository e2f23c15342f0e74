"""A Llama block's attention, and which kernel each step's attention runs on.

A forward call decides once per sequence (`Step`, made by Llama._step) how its queries attend:
- decode and verify steps over an INT8 cache: the INT8 decode op (int8_attention.py), straight over
  the cache;
- prompt chunks over an INT8 cache past MIN_KEYS keys: the INT8 prompt op (prefill_attention.py),
  or bf16 GEMMs (attention.py) where that op does not build;
- everything else: torch's SDPA over the cache read in the compute dtype, per aligned block for a
  prompt chunk (llama.Item: a block's K/V do not depend on how the prompt was split) and per query
  for an exact step (each query as a one-token step computes it).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from ..arch import Arch
from ..kernels.attention import MIN_KEYS, int8_attention_bf16
from ..kernels.int8_attention import int8_decode_attention
from ..kernels.packed import padded
from ..kernels.prefill_attention import int8_prefill_attention

# enable_gqa arrived in torch 2.5; JetPack 6.0 ships 2.4, where K/V heads are repeated instead.
_SDPA_GQA = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 5)


@dataclass(frozen=True)
class Step:
    """What one forward call decides once for all its layers, per sequence."""
    pos: int  # position of its first token
    rows: slice  # its rows in the batch
    mask: Optional[torch.Tensor]  # SDPA's boolean mask; None where each query sees every key
    exact: bool  # a decode or verify step, computed batch-invariant (see KernelPlan.decode_width)
    bf16: bool  # a prefill over an INT8 cache: attention as bf16 GEMMs (attention.py)
    blocks: int = 0  # > 0: a prompt chunk whose attention runs per aligned block of this many tokens
    int8_op: bool = False  # a decode-sized step over an INT8 cache: int8_attention's op reads it directly
    prompt_op: bool = False  # a bf16 step's rows run prefill_attention's op instead of the GEMMs (plan.int8_prompt)
    paged_prompt: bool = False  # a prompt chunk's attention in one Triton call over the pool (plan.triton_prefill)


@dataclass(frozen=True)
class FixedStep:
    """A fixed-shape decode step's attention inputs (cuda_graphs.py), the same for every layer: B
    sequences of W rows, the slot each row's K/V goes to ([B·W]), each sequence's key slots ([B, N]: its
    block table expanded) and which keys each row sees ([B, 1, W, N] bool)."""
    batch: int
    width: int
    slots: torch.Tensor
    key_slots: Optional[torch.Tensor]  # (SDPA) [B, N]
    mask: Optional[torch.Tensor]  # (SDPA) [B, 1, W, N]
    tables: Optional[torch.Tensor] = None  # (Triton) each row's sequence's block table, [B·W, blocks] int32
    lens: Optional[torch.Tensor] = None  # (Triton) the keys each row sees, [B·W] int32


def _swap_halves(x: torch.Tensor) -> torch.Tensor:
    """[x1, x2] → [x2, x1] along the last dim (rope_tables' signed sin makes it rotate_half)."""
    return x.unflatten(-1, (2, -1)).flip(-2).flatten(-2)


class Attention(nn.Module):
    def __init__(self, arch: Arch):
        super().__init__()
        self.h, self.kv, self.d = arch.num_heads, arch.num_kv_heads, arch.head_dim
        self.rep = self.h // self.kv  # query heads per KV head (GQA)
        self.qkv_proj = nn.Linear(arch.hidden_size, (self.h + 2 * self.kv) * self.d, bias=False)
        self.o_proj = nn.Linear(self.h * self.d, arch.hidden_size, bias=False)

    def forward(self, x, cos, sin, caches, layer: int, steps: list[Step], width: int):
        t = x.shape[0]
        qkv = padded(self.qkv_proj, x, width)
        qk, v = qkv.split([(self.h + self.kv) * self.d, self.kv * self.d], dim=-1)
        v = v.view(t, self.kv, self.d)
        qk = qk.view(t, self.h + self.kv, self.d)  # q and k heads side by side: RoPE on both at once
        qk = qk * cos + _swap_halves(qk) * sin  # (sin signed: rope_tables)
        q, k = qk[:, :self.h], qk[:, self.h:]
        outs = []
        for cache, step in zip(caches, steps, strict=False):
            r = step.rows  # (one sequence holds every row: no slicing ops)
            qs, ks, vs = (q, k, v) if len(steps) == 1 else (q[r], k[r], v[r])
            cache.write(layer, step.pos, ks, vs)
            if step.int8_op:
                outs.append(int8_decode_attention(qs, cache, layer, step.pos))
            elif step.paged_prompt:
                outs.append(self._attend_paged_prompt(qs, cache, layer, step))
            elif step.prompt_op:
                outs.append(self._attend_prompt(qs, cache, layer, step))
            else:
                outs.append(self._attend_cached(qs, cache, layer, step))
        out = outs[0] if len(outs) == 1 else torch.cat(outs)
        return padded(self.o_proj, out, width)

    def forward_static(self, x, cos, sin, pool, layer: int, fixed: FixedStep):
        """Attention of a fixed-shape decode step over the pool (no per-sequence Python, no shape that
        depends on the data: what a CUDA graph can hold). Each query sees the keys up to its position
        (fixed.mask) out of its sequence's block table."""
        t = x.shape[0]
        qkv = self.qkv_proj(x)
        qk, v = qkv.split([(self.h + self.kv) * self.d, self.kv * self.d], dim=-1)
        v = v.view(t, self.kv, self.d)
        qk = qk.view(t, self.h + self.kv, self.d)
        qk = qk * cos + _swap_halves(qk) * sin
        q, k = qk[:, :self.h], qk[:, self.h:]
        pool.write(layer, fixed.slots, k, v)
        return self._attend_static(q, pool, layer, fixed)

    def forward_static_fused(self, x, positions, cos, sin, pool, layer: int, fixed: FixedStep):
        """forward_static with RoPE and the K/V write in one Triton kernel (kernels/triton/step_ops.py):
        `cos`, `sin` the model's float32 tables, `positions` each row's."""
        from ..kernels.triton.step_ops import rope_write

        kc, vc, ks, vs = pool.layer_tensors(layer)
        q = rope_write(self.qkv_proj(x), positions, cos, sin, kc, vc, fixed.slots, self.h, self.kv, ks, vs)
        return self._attend_static(q, pool, layer, fixed)

    def _attend_static(self, q, pool, layer: int, fixed: FixedStep):
        """q [T, H, D] of a fixed-shape step, its K/V written: attention and o_proj."""
        t = q.shape[0]
        if fixed.tables is not None:  # the Triton kernel reads the pool through the tables: one query a row
            from ..kernels.triton import paged_decode_attention

            kc, vc, ks, vs = pool.layer_tensors(layer)
            out = paged_decode_attention(q.contiguous(), kc, vc, fixed.tables, fixed.lens, pool.block_size, ks, vs)
            return self.o_proj(out.reshape(t, self.h * self.d))
        keys, values = pool.gather_slots(layer, fixed.key_slots, q.dtype)  # [B, KV, N, D]
        q = q.reshape(fixed.batch, fixed.width, self.h, self.d).transpose(1, 2)  # [B, H, W, D]
        if pool.int8:
            k_scale, v_scale = pool.head_scales(layer)
            q = q * k_scale.to(q.dtype)
        if not _SDPA_GQA:
            keys = keys.repeat_interleave(self.rep, dim=1)
            values = values.repeat_interleave(self.rep, dim=1)
        out = _sdpa(q, keys, values, fixed.mask)
        if pool.int8:
            out = out * v_scale.to(out.dtype)
        return self.o_proj(out.transpose(1, 2).reshape(t, self.h * self.d))

    def _attend_paged_prompt(self, q, cache, layer: int, step: Step):
        """q: [T, H, D] of a prompt chunk whose K/V are in the pool → [T, H·D]: every layer's attention in
        one Triton call (kernels/triton/prefill_attention.py), not an SDPA per 16-token block. Each row
        runs over key tiles from position 0 in one fixed order, whatever chunk it came in (rows past it
        in the tile add exact zeros): a block's K/V still do not depend on the chunking or the cache."""
        from ..kernels.triton import paged_prefill_attention

        t = q.shape[0]
        kc, vc, ks, vs = cache.pool.layer_tensors(layer)
        table, lens, starts = cache.prefill_args(step.pos, t)
        out = paged_prefill_attention(q.contiguous(), kc, vc, table, lens, starts, cache.pool.block_size, ks, vs,
                                      max_q_len=t)
        return out.reshape(t, self.h * self.d)

    def _attend_prompt(self, q, cache, layer: int, step: Step):
        """q: [T, H, D] of one sequence → [T, H·D]: the rows the bf16 GEMMs would take, on the INT8 prompt
        attention op. Its rows do not depend on each other, so one call serves every block; in a block
        step, the blocks that end before MIN_KEYS keys (a short prompt's first ones) keep their SDPA."""
        n = prompt_from(step, q.shape[0])
        out = int8_prefill_attention(q[n:], cache, layer, step.pos + n)
        if not n:
            return out
        head = Step(step.pos, slice(0, n), None, False, False, step.blocks)
        return torch.cat([self._attend_cached(q[:n], cache, layer, head), out])

    def _attend_cached(self, q, cache, layer: int, step: Step):
        """q: [T, H, D] of one sequence → [T, H·D], over its cache's keys 0 .. pos+T-1."""
        t = q.shape[0]
        q = q.transpose(0, 1).unsqueeze(0)  # [1, H, T, D]
        # once per layer; converted to what attention computes in, in the same copy
        read_dtype = torch.bfloat16 if step.bf16 else q.dtype  # (bf16: int8 values convert exactly)
        keys, values, k_scale, v_scale = cache.read_unscaled(layer, step.pos + t, read_dtype)
        if k_scale is not None:  # INT8 cache: its per-KV-head scales go onto q, and onto out below
            k_scale, v_scale = cache.head_scales(layer)  # ([1, H, 1, 1] each, in the compute dtype, made once)
            q = q * (k_scale if k_scale.dtype == q.dtype else k_scale.to(q.dtype))
        if step.blocks:
            out = self._attend_blocks(q, keys, values, step)
        else:
            out = self._attend(q, keys, values, step)
        if v_scale is not None:
            out = out * (v_scale if v_scale.dtype == out.dtype else v_scale.to(out.dtype))
        return out[0].transpose(0, 1).reshape(t, self.h * self.d)

    def _attend_blocks(self, q, keys, values, step: Step):
        """Prompt attention, one aligned block of queries at a time, each over exactly the keys up to
        its block's end: the same call for that block whatever chunk it came in."""
        pos, t, bs = step.pos, q.shape[2], step.blocks
        outs, a = [], pos
        while a < pos + t:
            b = min(pos + t, (a // bs + 1) * bs)
            n = b - a
            bf16 = step.bf16 and b >= MIN_KEYS  # by the block's end alone, never by the chunk
            sub = Step(a, slice(0, n), None if n == 1 else _causal(n, b, q.device), False, bf16)
            qb = q[:, :, a - pos:b - pos]
            if bf16:
                kb, vb = keys[:, :b], values[:, :b]  # already bf16 (read for the bf16 path)
            else:
                kb, vb = keys[:, :b].to(q.dtype), values[:, :b].to(q.dtype)
            outs.append(self._attend(qb, kb, vb, sub))
            a = b
        return outs[0] if len(outs) == 1 else torch.cat(outs, dim=2)

    def _attend(self, q, keys, values, step: Step):
        """q: [1, H, T, D]; keys, values: [KV, pos+T, D] in the compute dtype (bf16 for the bf16
        path). Returns [1, H, T, D]."""
        pos, t = step.pos, q.shape[2]
        if step.bf16:
            return int8_attention_bf16(q[0], keys, values, pos).unsqueeze(0)
        keys, values = keys.unsqueeze(0), values.unsqueeze(0)
        if not _SDPA_GQA:
            keys = keys.repeat_interleave(self.rep, dim=1)
            values = values.repeat_interleave(self.rep, dim=1)
        if step.exact:  # each query exactly as a one-token decode step computes it: its own key range
            if t == 1:  # (the cache was read up to pos + 1: every key is in view)
                return _sdpa(q, keys, values, None)
            return torch.cat([_sdpa(q[:, :, i:i + 1], keys[:, :, :pos + i + 1], values[:, :, :pos + i + 1], None)
                             for i in range(t)], dim=2)
        return _sdpa(q, keys, values, step.mask)


def prompt_from(step: Step, rows: int) -> int:
    """The first row of a bf16 prompt step that takes the INT8 prompt op: in a block step, the rows of
    blocks that end before MIN_KEYS keys attend as before (SDPA; in the fused layer, the decode op)."""
    if not step.blocks:
        return 0
    first = (-(-MIN_KEYS // step.blocks) - 1) * step.blocks  # the first block that ends at or past MIN_KEYS
    return min(rows, max(0, first - step.pos))


@functools.lru_cache(maxsize=64)
def _causal(n: int, keys: int, device: torch.device) -> torch.Tensor:
    """[n, keys] SDPA mask for n queries at the last n positions: query i sees keys 0 .. keys-n+i.
    The same for every layer of a forward, and for the same block shape in every step."""
    return torch.ones(n, keys, dtype=torch.bool, device=device).tril(diagonal=keys - n)


def _sdpa(q, keys, values, mask):
    if _SDPA_GQA:
        return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=True)
    return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)
