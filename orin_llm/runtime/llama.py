"""Llama forward pass over our own KV caches, gpt-fast style, for one or several sequences.

Module names follow the HF checkpoint so `load_state_dict` takes an exported model dir
as is; q/k/v and gate/up are fused at load time (fewer, larger matmuls: the decode step of a
small model on a CPU is dominated by per-op overhead).

Several sequences share one forward (`forward_batch`): their rows go through the linear layers
together, and attention runs per sequence over that sequence's own cache (a contiguous KVCache or
a PagedView of the KV pool). Where the linear kernels are row-independent (packed.py, checked at
load) a sequence's numbers are then bit for bit those of the same sequence run alone: what else is
in the batch cannot change a greedy answer.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from ..arch import Arch
from ..errors import OrinError
from . import decode_layer
from .attention import MIN_KEYS, int8_attention_bf16
from .head import Q8Head, vocab_mask
from .int8_attention import int8_decode_attention, usable
from .kv_cache import KVCache
from .prefill_attention import int8_prefill_attention
from .prefill_attention import usable as prefill_usable

# enable_gqa arrived in torch 2.5; JetPack 6.0 ships 2.4, where K/V heads are repeated instead.
_SDPA_GQA = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 5)


def rope_inv_freq(arch: Arch) -> torch.Tensor:
    d = arch.head_dim
    inv = 1.0 / (arch.rope_theta ** (torch.arange(0, d, 2, dtype=torch.int64, device="cpu").float() / d))
    sc = arch.rope_scaling
    kind = (sc or {}).get("rope_type", (sc or {}).get("type", "default"))
    if kind == "default":
        return inv
    if kind != "llama3":
        raise OrinError(f"rope scaling {kind!r} is not supported (default and llama3 are)")
    # Llama 3.1+ frequency-dependent scaling, as published with the model.
    factor, low, high = sc["factor"], sc["low_freq_factor"], sc["high_freq_factor"]
    old = sc["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv
    inv_l = torch.where(wavelen > old / low, inv / factor, inv)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * inv_l / factor + smooth * inv_l
    medium = ~(wavelen < old / high) & ~(wavelen > old / low)
    return torch.where(medium, smoothed, inv_l)


def rope_tables(arch: Arch, positions: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and signed sin for every position, [P, 1, head_dim], float32 as HF computes them, on the
    CPU (moved with the model). The device is explicit because the model is built under
    torch.device("meta"), where arange imports torch._dynamo and triton.

    The sin table's first half is negated: HF's rotate_half(x)·sin = [-x2, x1]·sin equals
    [x2, x1]·[-sin, sin] bit for bit (negation is exact), and [x2, x1] is one flip of x's halves,
    where rotate_half takes a chunk, a neg and a cat (ops are what a small model's decode step costs)."""
    freqs = torch.outer(torch.arange(positions, dtype=torch.float32, device="cpu"), rope_inv_freq(arch))
    emb = torch.cat((freqs, freqs), dim=-1)
    sin = emb.sin()
    sin[:, : sin.shape[1] // 2].neg_()
    return emb.cos()[:, None, :], sin[:, None, :]


def padded(linear: nn.Module, x: torch.Tensor, width: int) -> torch.Tensor:
    """linear(x) computed at a fixed row count: a row's result then does not depend on how many
    rows share the call (gemm kernels differ by M; at one fixed M, rows are independent)."""
    if not width:
        return linear(x)
    xp = x.new_zeros(width, x.shape[-1])
    xp[: x.shape[0]] = x
    return linear(xp)[: x.shape[0]]


def _swap_halves(x: torch.Tensor) -> torch.Tensor:
    """[x1, x2] → [x2, x1] along the last dim (rope_tables' signed sin makes it rotate_half)."""
    return x.unflatten(-1, (2, -1)).flip(-2).flatten(-2)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x if x.dtype == torch.float32 else x.float()  # (no conversion op where there is none to make)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * (h if h.dtype == x.dtype else h.to(x.dtype))


@dataclass(frozen=True)
class Step:
    """What one forward call decides once for all its layers, per sequence."""
    pos: int  # position of its first token
    rows: slice  # its rows in the batch
    mask: Optional[torch.Tensor]  # SDPA's boolean mask; None where each query sees every key
    exact: bool  # a decode or verify step, computed batch-invariant (see Llama.decode_width)
    bf16: bool  # a prefill over an INT8 cache: attention as bf16 GEMMs (attention.py)
    blocks: int = 0  # > 0: a prompt chunk whose attention runs per aligned block of this many tokens
    int8_op: bool = False  # a decode-sized step over an INT8 cache: int8_attention's op reads it directly
    prompt_op: bool = False  # a bf16 step's rows run prefill_attention's op instead of the GEMMs (Llama.int8_prefill)


@dataclass
class Item:
    """One sequence's part of a forward: its new token ids ([T]), the cache they extend (anything
    with reserve / write / read_unscaled / length / dtype / device), and how many of the last
    positions need logits (0: none, e.g. a prefill chunk that does not end the prompt).

    `block` > 0 marks a prompt chunk computed block by block: its attention runs once per aligned
    block of `block` positions (queries of block b see keys 0 .. the block's end), so each block's
    K/V are the same whatever was cached before it and however the prompt was split into steps.
    That is what lets the engine serve a prompt's blocks from the cache without changing a single
    bit of the answer (cache.py). Chunks must then start and end on block boundaries (or at the
    prompt's end)."""
    ids: torch.Tensor
    cache: object
    num_logits: int = 1
    block: int = 0
    decode: bool = False  # a decode or verify step (a request's last token, forced tokens, its draft)
    # Only the argmax of each logits row is used (a greedy request): a head that can (head.py) returns
    # rows exact where that argmax can be, over the tokens `allowed` allows ([num_logits, n] bool,
    # a grammar's masks; None: all), and lower elsewhere. False: every logit, in float32.
    greedy: bool = False
    allowed: Optional[torch.Tensor] = None


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
            elif step.prompt_op:
                outs.append(self._attend_prompt(qs, cache, layer, step))
            else:
                outs.append(self._attend_cached(qs, cache, layer, step))
        out = outs[0] if len(outs) == 1 else torch.cat(outs)
        return padded(self.o_proj, out, width)

    def _attend_prompt(self, q, cache, layer: int, step: Step):
        """q: [T, H, D] of one sequence → [T, H·D]: the rows the bf16 GEMMs would take, on the INT8 prompt
        attention op. Its rows do not depend on each other, so one call serves every block; in a block
        step, the blocks that end before MIN_KEYS keys (a short prompt's first ones) keep their SDPA."""
        n = _prompt_from(step, q.shape[0])
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


def _prompt_from(step: Step, rows: int) -> int:
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


class MLP(nn.Module):
    def __init__(self, arch: Arch):
        super().__init__()
        self.inter = arch.intermediate_size
        self.gate_up_proj = nn.Linear(arch.hidden_size, 2 * self.inter, bias=False)
        self.down_proj = nn.Linear(self.inter, arch.hidden_size, bias=False)

    def forward(self, x, width: int):
        gate, up = padded(self.gate_up_proj, x, width).split(self.inter, dim=-1)
        return padded(self.down_proj, F.silu(gate) * up, width)


class Block(nn.Module):
    def __init__(self, arch: Arch):
        super().__init__()
        self.input_layernorm = RMSNorm(arch.hidden_size, arch.rms_norm_eps)
        self.self_attn = Attention(arch)
        self.post_attention_layernorm = RMSNorm(arch.hidden_size, arch.rms_norm_eps)
        self.mlp = MLP(arch)

    def forward(self, x, cos, sin, caches, layer, steps: list[Step], width: int):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, caches, layer, steps, width)
        return x + self.mlp(self.post_attention_layernorm(x), width)


class Llama(nn.Module):
    def __init__(self, arch: Arch, max_positions: int):
        super().__init__()
        self.arch = arch
        # an explicit (empty) weight: nn.Embedding's own init draws normal_ values, and on the meta
        # device that imports torch._dynamo and triton (65 MB resident, 1 s) to make nothing
        self.embed_tokens = nn.Embedding(arch.vocab_size, arch.hidden_size,
                                         _weight=torch.empty(arch.vocab_size, arch.hidden_size))
        self.layers = nn.ModuleList(Block(arch) for _ in range(arch.num_layers))
        self.norm = RMSNorm(arch.hidden_size, arch.rms_norm_eps)
        self.lm_head = nn.Linear(arch.hidden_size, arch.vocab_size, bias=False)
        # Batch invariance for decode steps of up to `decode_width` tokens (0: off). With it, a
        # speculative verify over k+1 tokens computes each position bit for bit as a one-token
        # decode step does, which is what makes greedy speculation exactly lossless: attention runs
        # per query over its own key range, and the linear layers either have row-independent
        # kernels (packed.py, checked at load) or are padded to decode_width rows.
        self.decode_width = 0
        self.rows_independent = False
        # Prefill (more tokens than any decode or verify step, over at least MIN_KEYS keys) over an
        # INT8 cache runs attention as bf16 GEMMs; set at load where the CPU has bf16 dot products
        # (attention.py).
        self.bf16_prefill = False
        # Decode and verify steps over an INT8 cache read it directly (int8_attention.py); set at load
        # on CPUs where the op builds. Its rows are independent by construction, so exact steps use it.
        self.int8_decode = False
        # Those bf16 prefill steps over an INT8 cache read it directly instead (prefill_attention.py); set
        # at load on CPUs where that op builds.
        self.int8_prefill = False
        # Those steps' layers in one C++ call each (decode_layer.py): per layer, the op's weight
        # arguments; set at load where every layer runs on q8_dot's kernels, else None.
        self.fused_layers: Optional[list[tuple]] = None
        cos, sin = rope_tables(arch, max_positions)  # real even when the rest is built on meta
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    @property
    def device(self) -> torch.device:
        """Where the model runs (its rope tables live there; the embedding may be int8, quant.py)."""
        return self.cos.device

    @torch.inference_mode()
    def forward(self, ids: torch.Tensor, cache: KVCache, num_logits: int = 1) -> torch.Tensor:
        """Run ids ([T]) at positions cache.length.., append their K/V, and return float32
        logits for the last `num_logits` positions ([num_logits, vocab])."""
        return self.forward_batch([Item(ids, cache, num_logits)])[0]

    @torch.inference_mode()
    def forward_batch(self, items: list[Item]) -> list[torch.Tensor]:
        """One forward over several sequences: each item's ids run at positions cache.length..,
        its K/V are appended to its cache, and its last `num_logits` positions' float32 logits
        are returned ([num_logits, vocab]; [0, vocab] for 0)."""
        if not items:
            return []
        if len(items) > 1 and self.decode_width and not self.rows_independent:
            # padding to a fixed width keeps one sequence exact, not a batch of them
            return [self.forward_batch([it])[0] for it in items]
        fused = [self._fusable(it) for it in items] if self.fused_layers is not None else [False]
        if any(fused) and not all(fused):  # the fused items take the fused op even beside the others
            outs = {}
            for kind in (True, False):
                idx = [i for i, f in enumerate(fused) if f == kind]
                outs.update(zip(idx, self.forward_batch([items[i] for i in idx]), strict=True))
            return [outs[i] for i in range(len(items))]
        steps, starts, at = [], [], 0
        for it in items:
            t = it.ids.shape[0]
            pos = it.cache.reserve(t)
            steps.append(self._step(pos, t, at, it.cache, it.block, it.decode))
            starts.append(torch.arange(pos, pos + t))
            at += t
        ids = items[0].ids if len(items) == 1 else torch.cat([it.ids for it in items])
        x = self.embed_tokens(ids)
        positions = starts[0] if len(starts) == 1 else torch.cat(starts)
        if len(items) == 1:
            p = steps[0].pos
            cos, sin = self.cos[p:p + at].to(x.dtype), self.sin[p:p + at].to(x.dtype)
        else:
            cos, sin = self.cos[positions].to(x.dtype), self.sin[positions].to(x.dtype)
        # rows to pad the linear layers to (0: none): one exact decode step on kernels whose rows
        # are not independent of the row count
        width = self.decode_width if (len(items) == 1 and steps[0].exact and not self.rows_independent) else 0
        caches = [it.cache for it in items]
        if all(fused) and x.dtype == torch.float32:
            self._fused_layers(x, caches, steps)
        else:
            for i, block in enumerate(self.layers):
                x = block(x, cos, sin, caches, i, steps, width)
        for it, step in zip(items, steps, strict=False):
            it.cache.length = step.pos + (step.rows.stop - step.rows.start)
        want = [(s.rows.stop - it.num_logits, s.rows.stop)
                for it, s in zip(items, steps, strict=True) if it.num_logits]
        if not want:
            return [x.new_zeros(0, self.arch.vocab_size, dtype=torch.float32) for _ in items]
        sel = x[want[0][0]:want[0][1]] if len(want) == 1 else torch.cat([x[a:b] for a, b in want])
        logits = self._logits(self.norm(sel), [it for it in items if it.num_logits], width)
        out, at = [], 0
        for it in items:
            out.append(logits[at:at + it.num_logits])
            at += it.num_logits
        return out

    def _fused_layers(self, x: torch.Tensor, caches: list, steps: list[Step]) -> None:
        """Every layer of a decode step, one C++ call each, on x in place (decode_layer.py)."""
        run = decode_layer.op()
        rows = [s.rows.stop - s.rows.start for s in steps]
        pos = [s.pos for s in steps]
        slots = [c.slot_table(p + n) for c, p, n in zip(caches, pos, rows, strict=True)]
        # per sequence, its first row on the prompt op (rows: none): a decode step's none; a prompt
        # chunk's rows where the unfused path runs the op (_attend_prompt), the rows before on the decode op
        prompt = [_prompt_from(s, n) if s.blocks and s.bf16 else n for s, n in zip(steps, rows, strict=True)]
        h, kv = self.arch.num_heads, self.arch.num_kv_heads
        for i, args in enumerate(self.fused_layers):
            layer = []
            for c, sl in zip(caches, slots, strict=True):
                layer += [*c.int8_layer(i), sl]
            run(x, *args, self.cos, self.sin, h, kv, layer, pos, rows, prompt)

    def _fusable(self, it: Item) -> bool:
        """Whether an item's step runs the fused layer: a decode-sized step on the INT8 attention op, or
        a prompt chunk over an INT8 cache where the prompt op runs too (a model with fused layers runs
        all of those steps fused: the small ops round differently from torch's)."""
        if self._int8_op(it.ids.shape[0], it.cache, it.block):
            return True
        d = self.arch.head_dim
        return bool(it.block) and self.int8_prefill and usable(it.cache, d) and prefill_usable(it.cache, d)

    def _int8_op(self, t: int, cache, block: int) -> bool:
        """Whether a step of t tokens over this cache runs the INT8 attention op (and so the fused layers)."""
        return not block and self.int8_decode and t <= PROBE_ROWS and usable(cache, self.arch.head_dim)

    def _prompt_op(self, bf16: bool, cache) -> bool:
        """Whether a step whose attention would run as bf16 GEMMs runs the INT8 prompt op instead."""
        return bf16 and self.int8_prefill and prefill_usable(cache, self.arch.head_dim)

    def _logits(self, h: torch.Tensor, items: list[Item], width: int) -> torch.Tensor:
        """Float32 logits of h's rows ([R, vocab]), the items' rows in order. An int8 head (head.py)
        gives greedy items exact argmaxes in one pass and the others their float32 logits."""
        if not isinstance(self.lm_head, Q8Head):
            return padded(self.lm_head, h, width).float()
        if all(it.greedy for it in items):
            allowed = None
            if any(it.allowed is not None for it in items):
                vocab = self.lm_head.out_features
                allowed = torch.cat([vocab_mask(it.allowed, it.num_logits, vocab, h.device) for it in items])
            return self.lm_head(h, allowed)
        if not any(it.greedy for it in items):
            return padded(self.lm_head.full, h, width)
        out, at = [], 0  # a mixed batch: each item its own way
        for it in items:
            out.append(self._logits(h[at:at + it.num_logits], [it], width))
            at += it.num_logits
        return torch.cat(out)

    def _step(self, pos: int, t: int, row: int, cache, block: int = 0, decode: bool = False) -> Step:
        int8 = cache.dtype == torch.int8
        if block:  # a prompt chunk, per aligned block; bf16 GEMMs for the blocks past MIN_KEYS keys
            bf16 = self.bf16_prefill and int8 and pos + t >= MIN_KEYS
            return Step(pos, slice(row, row + t), None, False, bf16, block, prompt_op=self._prompt_op(bf16, cache))
        # exact (per query, as a one-token step computes it): every decode step of an exact model,
        # whatever its rows (the engine keeps them within decode_width); else by the row count alone
        exact = bool(self.decode_width) and (decode or t <= self.decode_width)
        bf16 = self.bf16_prefill and int8 and t > PROBE_ROWS and not exact and pos + t >= MIN_KEYS
        if self._int8_op(t, cache, block):
            return Step(pos, slice(row, row + t), None, exact, False, int8_op=True)
        if self._prompt_op(bf16, cache):
            return Step(pos, slice(row, row + t), None, False, True, prompt_op=True)
        mask = None
        if t > 1 and not exact and not bf16:  # query i sees keys 0 .. pos+i (the prefix and its own past)
            mask = torch.ones(t, pos + t, dtype=torch.bool, device=cache.device).tril(diagonal=pos)
        return Step(pos, slice(row, row + t), mask, exact, bf16)


PROBE_ROWS = 16  # row independence is checked up to this many rows: past any draft length we run
