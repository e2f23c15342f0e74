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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from ..arch import Arch
from ..errors import OrinError
from ..kernels import decode_layer
from ..kernels.attention import MIN_KEYS
from ..kernels.cuda_linear import decode_rows
from ..kernels.packed import padded
from .attention_layer import Attention, FixedStep, Step, prompt_from
from .cuda_graphs import StaticInputs
from .head import Q8Head, vocab_mask
from .kernel_plan import PROBE_ROWS, TORCH_ONLY, KernelPlan
from .kv_cache import KVCache


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


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x if x.dtype == torch.float32 else x.float()  # (no conversion op where there is none to make)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * (h if h.dtype == x.dtype else h.to(x.dtype))


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

    def forward_static(self, x, cos, sin, pool, layer: int, fixed: FixedStep):
        """The block in a fixed-shape decode step (cuda_graphs.py)."""
        x = x + self.self_attn.forward_static(self.input_layernorm(x), cos, sin, pool, layer, fixed)
        return x + self.mlp(self.post_attention_layernorm(x), 0)


def _decode_step(step, inp: StaticInputs, pool) -> torch.Tensor:
    """A fixed-shape step (Llama.static_step, compiled or not) with its layers told they run a decode
    step's rows (cuda_linear.decode_rows: a layer whose decode and prompt kernels differ picks by it)."""
    with decode_rows():
        return step(inp, pool=pool)


class Llama(nn.Module):
    def __init__(self, arch: Arch, max_positions: int, plan: KernelPlan = TORCH_ONLY):
        super().__init__()
        self.arch = arch
        # an explicit (empty) weight: nn.Embedding's own init draws normal_ values, and on the meta
        # device that imports torch._dynamo and triton (time and resident memory) to make nothing
        self.embed_tokens = nn.Embedding(arch.vocab_size, arch.hidden_size,
                                         _weight=torch.empty(arch.vocab_size, arch.hidden_size))
        self.layers = nn.ModuleList(Block(arch) for _ in range(arch.num_layers))
        self.norm = RMSNorm(arch.hidden_size, arch.rms_norm_eps)
        self.lm_head = nn.Linear(arch.hidden_size, arch.vocab_size, bias=False)
        # Which kernel runs each step (kernel_plan.py), decided once at load (weights.load_llama).
        # Batch invariance for decode steps of up to plan.decode_width tokens (0: off): a speculative
        # verify over k+1 tokens then computes each position bit for bit as a one-token decode step
        # does, which is what makes greedy speculation exactly lossless: attention runs per query over
        # its own key range, and the linear layers either have row-independent kernels (packed.py,
        # checked at load: plan.rows_independent) or are padded to decode_width rows.
        self.plan = plan
        # Per layer, the fused decode op's weight arguments (decode_layer.layer_args), set at load where
        # the plan runs that op; None elsewhere.
        self.fused_args: Optional[list[tuple]] = None
        # the fixed-shape step's attention on the Triton kernel: settled by fixed_step (the model runner
        # runs those steps, in CUDA graphs: model_runner.py); None where no fixed-shape step is made
        self.triton_attention: Optional[bool] = None
        cos, sin = rope_tables(arch, max_positions)  # real even when the rest is built on meta
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    @property
    def compute_dtype(self) -> torch.dtype:
        """What the model computes in (its norms' dtype: the weights may be int8 or int4)."""
        return self.norm.weight.dtype

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
        plan = self.plan
        if len(items) > 1 and plan.decode_width and not plan.rows_independent:
            # padding to a fixed width keeps one sequence exact, not a batch of them
            return [self.forward_batch([it])[0] for it in items]
        fused = [self._fusable(it) for it in items] if plan.fused_decode else [False]
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
            starts.append(torch.arange(pos, pos + t, device=self.cos.device))
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
        width = plan.decode_width if (len(items) == 1 and steps[0].exact and not plan.rows_independent) else 0
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

    # ------------------------------------------------------------------ fixed-shape decode steps

    def fixed_step(self, pool) -> Callable[[StaticInputs], torch.Tensor]:
        """This model's decode step over `pool` (a KVPool) at fixed shapes (static_step, compiled where the
        plan says), for the model runner's graphs (model_runner.py, cuda_graphs.py); its attention kernel
        is settled here, once. Needs exact decode steps (plan.decode_width): their width is the graphs' W."""
        if not self.plan.decode_width:
            raise OrinError("fixed-shape decode steps need exact decode steps (decode_width > 0)")
        self.triton_attention = None
        if self.plan.triton_attention:
            why = _triton_attention_fits(pool, self.compute_dtype)
            if why is None:
                self.triton_attention = True
            else:
                from dataclasses import replace

                self.plan = replace(self.plan, triton_attention=False,
                                    why_not=(*self.plan.why_not, ("triton_decode_attention", why)))
        compiled = self.static_step
        if self.plan.torch_compile:
            compiled = torch.compile(self.static_step, dynamic=False)
        return functools.partial(_decode_step, compiled, pool=pool)

    def fixed_logits(self, outs: list[torch.Tensor], items: list[Item]) -> list[torch.Tensor]:
        """Each item's logits from a fixed-shape step's outputs: the head ran inside the step, except the
        exact int8 head, which picks its candidates by the data (head.py) and so runs here, outside."""
        if not isinstance(self.lm_head, Q8Head):
            return outs
        return [self._logits(h, [it], 0) if it.num_logits else h.new_zeros(0, self.arch.vocab_size)
                for h, it in zip(outs, items, strict=True)]

    def static_step(self, inp: StaticInputs, pool) -> torch.Tensor:
        """One fixed-shape decode step (cuda_graphs.py): B·W rows at `inp`'s positions, their K/V written
        to `inp.slots`, each attending over its sequence's block table up to its own position. Returns
        float32 logits [B·W, vocab] (the normed hidden states where the head is the exact int8 one)."""
        b, w, nb, bs = inp.batch, inp.width, inp.blocks, pool.block_size
        x = self.embed_tokens(inp.ids)
        if not self.plan.fused_step_ops:
            cos, sin = self.cos[inp.positions].to(x.dtype), self.sin[inp.positions].to(x.dtype)
        if self.triton_attention:
            fixed = FixedStep(b, w, inp.slots, None, None, inp.table.repeat_interleave(w, dim=0).int(),
                              inp.limits.int())
        else:
            keys = torch.arange(nb * bs, device=x.device)
            fixed = FixedStep(b, w, inp.slots, (inp.table[:, :, None] * bs + keys[:bs]).view(b, nb * bs),
                              (keys < inp.limits.view(b, w, 1)).unsqueeze(1))
        if self.plan.fused_step_ops:
            h = self._fused_static_layers(x, inp.positions, pool, fixed)
        else:
            for i, block in enumerate(self.layers):
                x = block.forward_static(x, cos, sin, pool, i, fixed)
            h = self.norm(x)
        return h if isinstance(self.lm_head, Q8Head) else self.lm_head(h).float()

    def _fused_static_layers(self, x: torch.Tensor, positions: torch.Tensor, pool, fixed) -> torch.Tensor:
        """The layers of a fixed-shape step with their small ops fused (kernels/triton/step_ops.py): each
        residual add with the RMSNorm after it, RoPE with the K/V write, SiLU with its product. The
        same computation as Block.forward_static, rounded where it rounds; returns the final norm's output."""
        from ..kernels.triton.step_ops import add_rms_norm, silu_mul

        layers = self.layers
        x, h = add_rms_norm(x, layers[0].input_layernorm.weight, layers[0].input_layernorm.eps)
        for i, block in enumerate(layers):
            a = block.self_attn.forward_static_fused(h, positions, self.cos, self.sin, pool, i, fixed)
            post = block.post_attention_layernorm
            x, h = add_rms_norm(x, post.weight, post.eps, a)
            m = block.mlp.down_proj(silu_mul(block.mlp.gate_up_proj(h)))
            nxt = layers[i + 1].input_layernorm if i + 1 < len(layers) else self.norm
            x, h = add_rms_norm(x, nxt.weight, nxt.eps, m)
        return h

    def _fused_layers(self, x: torch.Tensor, caches: list, steps: list[Step]) -> None:
        """Every layer of a decode step, one C++ call each, on x in place (decode_layer.py)."""
        run = decode_layer.op()
        rows = [s.rows.stop - s.rows.start for s in steps]
        pos = [s.pos for s in steps]
        slots = [c.slot_table(p + n) for c, p, n in zip(caches, pos, rows, strict=True)]
        # per sequence, its first row on the prompt op (rows: none): a decode step's none; a prompt
        # chunk's rows where the unfused path runs the op (_attend_prompt), the rows before on the decode op
        prompt = [prompt_from(s, n) if s.blocks and s.bf16 else n for s, n in zip(steps, rows, strict=True)]
        h, kv = self.arch.num_heads, self.arch.num_kv_heads
        for i, args in enumerate(self.fused_args):
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
        return bool(it.block) and self.plan.int8_decode and self.plan.int8_prompt and _reads_int8(it.cache)

    def _int8_op(self, t: int, cache, block: int) -> bool:
        """Whether a step of t tokens over this cache runs the INT8 attention op (and so the fused layers)."""
        return not block and self.plan.int8_decode and t <= PROBE_ROWS and _reads_int8(cache)

    def _prompt_op(self, bf16: bool, cache) -> bool:
        """Whether a step whose attention would run as bf16 GEMMs runs the INT8 prompt op instead."""
        return bf16 and self.plan.int8_prompt and _reads_int8(cache)

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
        plan, int8 = self.plan, cache.dtype == torch.int8
        if block:  # a prompt chunk, per aligned block; bf16 GEMMs for the blocks past MIN_KEYS keys
            if plan.triton_prefill and hasattr(cache, "prefill_args") and (int8 or cache.dtype == self.compute_dtype):
                return Step(pos, slice(row, row + t), None, False, False, block, paged_prompt=True)
            bf16 = plan.bf16_prompt and int8 and pos + t >= MIN_KEYS
            return Step(pos, slice(row, row + t), None, False, bf16, block, prompt_op=self._prompt_op(bf16, cache))
        # exact (per query, as a one-token step computes it): every decode step of an exact model,
        # whatever its rows (the engine keeps them within decode_width); else by the row count alone
        exact = bool(plan.decode_width) and (decode or t <= plan.decode_width)
        bf16 = plan.bf16_prompt and int8 and t > PROBE_ROWS and not exact and pos + t >= MIN_KEYS
        if self._int8_op(t, cache, block):
            return Step(pos, slice(row, row + t), None, exact, False, int8_op=True)
        if self._prompt_op(bf16, cache):
            return Step(pos, slice(row, row + t), None, False, True, prompt_op=True)
        mask = None
        if t > 1 and not exact and not bf16:  # query i sees keys 0 .. pos+i (the prefix and its own past)
            mask = torch.ones(t, pos + t, dtype=torch.bool, device=cache.device).tril(diagonal=pos)
        return Step(pos, slice(row, row + t), mask, exact, bf16)


def _triton_attention_fits(pool, dtype: torch.dtype) -> Optional[str]:
    """None where the Triton paged decode kernel runs over this pool in `dtype` (checked once on a few
    rows against its torch reference), else why not."""
    if not pool.int8 and pool.k.dtype != dtype:
        return f"a {pool.k.dtype} cache under {dtype} compute (the kernel reads float caches in q's dtype)"
    try:
        from ..kernels.triton import paged_decode_attention, reference

        kc, vc, ks, vs = pool.layer_tensors(0)
        h = kc.shape[0] * 2
        q = torch.randn(2, h, kc.shape[2], device=kc.device, dtype=dtype)
        tables = torch.full((2, 32), pool.scratch, dtype=torch.int32, device=kc.device)
        lens = torch.tensor([1, pool.block_size], dtype=torch.int32, device=kc.device)
        got = paged_decode_attention(q, kc, vc, tables, lens, pool.block_size, ks, vs).float()
        want = reference.paged_decode_attention(q, kc, vc, tables, lens, pool.block_size, ks, vs).float()
        err = (got - want).abs().max().item() / max(want.abs().max().item(), 1e-6)
    except Exception as e:  # noqa: BLE001 (a kernel that does not build here: the plan says why)
        return f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
    return None if err <= 0.05 else f"disagrees with its torch reference (relative error {err:.3g})"


def _reads_int8(cache) -> bool:
    """An INT8 cache our attention ops read (int8_layer, slot_table); the device and the head size are the plan's."""
    return cache.dtype == torch.int8 and hasattr(cache, "int8_layer")
