"""Llama forward pass over our own KV cache (batch 1), gpt-fast style.

Module names follow the HF checkpoint so `load_state_dict` takes an exported model dir
as is; q/k/v and gate/up are fused at load time (fewer, larger matmuls: the decode step of a
small model on a CPU is dominated by per-op overhead).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from torch import nn

from ..arch import Arch
from ..errors import OrinError
from .attention import MIN_KEYS, bf16_attention_available, int8_attention_bf16
from .kv_cache import KVCache
from .packed import pack_linears, packing_available, rows_independent
from .quant import QuantLinear

log = logging.getLogger(__name__)

# enable_gqa arrived in torch 2.5; JetPack 6.0 ships 2.4, where K/V heads are repeated instead.
_SDPA_GQA = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 5)


def rope_inv_freq(arch: Arch) -> torch.Tensor:
    d = arch.head_dim
    inv = 1.0 / (arch.rope_theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
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
    """cos and sin for every position, [P, 1, head_dim], float32 as HF computes them."""
    freqs = torch.outer(torch.arange(positions, dtype=torch.float32), rope_inv_freq(arch))
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos()[:, None, :], emb.sin()[:, None, :]


def padded(linear: nn.Module, x: torch.Tensor, width: int) -> torch.Tensor:
    """linear(x) computed at a fixed row count: a row's result then does not depend on how many
    rows share the call (gemm kernels differ by M; at one fixed M, rows are independent)."""
    if not width:
        return linear(x)
    xp = x.new_zeros(width, x.shape[-1])
    xp[: x.shape[0]] = x
    return linear(xp)[: x.shape[0]]


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


@dataclass(frozen=True)
class Step:
    """What one forward call decides once for all its layers."""
    pos: int  # position of its first token
    mask: Optional[torch.Tensor]  # SDPA's boolean mask; None where each query sees every key
    exact: bool  # a decode or verify step, computed batch-invariant (see Llama.decode_width)
    width: int  # rows to pad the linear layers to (0: none)
    bf16: bool  # a prefill over an INT8 cache: attention as bf16 GEMMs (attention.py)


class Attention(nn.Module):
    def __init__(self, arch: Arch):
        super().__init__()
        self.h, self.kv, self.d = arch.num_heads, arch.num_kv_heads, arch.head_dim
        self.rep = self.h // self.kv  # query heads per KV head (GQA)
        self.qkv_proj = nn.Linear(arch.hidden_size, (self.h + 2 * self.kv) * self.d, bias=False)
        self.o_proj = nn.Linear(self.h * self.d, arch.hidden_size, bias=False)

    def forward(self, x, cos, sin, cache: KVCache, layer: int, step: Step):
        t, pos = x.shape[0], step.pos
        qkv = padded(self.qkv_proj, x, step.width)
        q, k, v = qkv.split([self.h * self.d, self.kv * self.d, self.kv * self.d], dim=-1)
        q = q.view(t, self.h, self.d)
        k = k.view(t, self.kv, self.d)
        v = v.view(t, self.kv, self.d)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        cache.write(layer, pos, k, v)
        q = q.transpose(0, 1).unsqueeze(0)  # [1, H, T, D]
        keys, values, k_scale, v_scale = cache.read_unscaled(layer, pos + t)  # once per layer
        rep = self.rep
        if k_scale is not None:  # INT8 cache: its per-KV-head scales go onto q, and onto out below
            q = q * k_scale.repeat_interleave(rep)[None, :, None, None].to(q.dtype)
        out = self._attend(q, keys, values, step)
        if v_scale is not None:
            out = out * v_scale.repeat_interleave(rep)[None, :, None, None].to(out.dtype)
        return padded(self.o_proj, out[0].transpose(0, 1).reshape(t, self.h * self.d), step.width)

    def _attend(self, q, keys, values, step: Step):
        """q: [1, H, T, D]; keys, values: [KV, pos+T, D] as stored. Returns [1, H, T, D]."""
        pos, t = step.pos, q.shape[2]
        if step.bf16:
            return int8_attention_bf16(q[0], keys, values, pos).unsqueeze(0)
        keys, values = keys.unsqueeze(0).to(q.dtype), values.unsqueeze(0).to(q.dtype)
        if not _SDPA_GQA:
            keys = keys.repeat_interleave(self.rep, dim=1)
            values = values.repeat_interleave(self.rep, dim=1)
        if step.exact:  # each query exactly as a one-token decode step computes it: its own key range
            return torch.cat([_sdpa(q[:, :, i:i + 1], keys[:, :, :pos + i + 1], values[:, :, :pos + i + 1], None)
                             for i in range(t)], dim=2)
        return _sdpa(q, keys, values, step.mask)


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

    def forward(self, x, cos, sin, cache, layer, step: Step):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, cache, layer, step)
        return x + self.mlp(self.post_attention_layernorm(x), step.width)


class Llama(nn.Module):
    def __init__(self, arch: Arch, max_positions: int):
        super().__init__()
        self.arch = arch
        self.embed_tokens = nn.Embedding(arch.vocab_size, arch.hidden_size)
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
        cos, sin = rope_tables(arch, max_positions)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    @torch.inference_mode()
    def forward(self, ids: torch.Tensor, cache: KVCache, num_logits: int = 1) -> torch.Tensor:
        """Run ids ([T]) at positions cache.length.., append their K/V, and return float32
        logits for the last `num_logits` positions ([num_logits, vocab])."""
        t = ids.shape[0]
        pos = cache.reserve(t)
        x = self.embed_tokens(ids)
        cos = self.cos[pos:pos + t].to(x.dtype)
        sin = self.sin[pos:pos + t].to(x.dtype)
        exact = t <= self.decode_width
        width = self.decode_width if exact and not self.rows_independent else 0  # rows to pad linears to
        bf16 = (self.bf16_prefill and cache.k.dtype == torch.int8 and t > PROBE_ROWS and not exact
                and pos + t >= MIN_KEYS)
        mask = None
        if t > 1 and not exact and not bf16:  # query i sees keys 0 .. pos+i (the prefix and its own past)
            mask = torch.ones(t, pos + t, dtype=torch.bool, device=ids.device).tril(diagonal=pos)
        step = Step(pos, mask, exact, width, bf16)
        for i, block in enumerate(self.layers):
            x = block(x, cos, sin, cache, i, step)
        cache.length = pos + t
        return padded(self.lm_head, self.norm(x[-num_logits:]), width).float()


PROBE_ROWS = 16  # row independence is checked up to this many rows: past any draft length we run

_FUSED = {"q_proj": ("qkv_proj", ("q_proj", "k_proj", "v_proj")),
          "gate_proj": ("gate_up_proj", ("gate_proj", "up_proj"))}
_FOLDED = {"k_proj", "v_proj", "up_proj"}  # concatenated into the layer above


def _fuse(state: dict[str, torch.Tensor], arch: Arch) -> dict[str, torch.Tensor]:
    """HF names → ours: q|k|v and gate|up concatenated row-wise, for plain and quantized tensors."""
    out = {}
    for name, w in state.items():
        name = name.removeprefix("model.")
        module, _, suffix = name.rpartition(".")
        parent, _, leaf = module.rpartition(".")
        if leaf in _FOLDED:
            continue
        if leaf in _FUSED:
            fused, parts = _FUSED[leaf]
            name = f"{parent}.{fused}.{suffix}"
            w = torch.cat([state[f"model.{parent}.{p}.{suffix}"] for p in parts])
        out[name] = w
    if arch.tie_word_embeddings or "lm_head.weight" not in out:
        out["lm_head.weight"] = out["embed_tokens.weight"]
    return out


def load_llama(model_dir: Path, arch: Arch, dtype: torch.dtype, device: str, max_positions: int) -> Llama:
    state: dict[str, torch.Tensor] = {}
    for f in sorted(model_dir.glob("model*.safetensors")):  # not kv_scales.safetensors
        state.update(load_file(str(f)))
    if not state:
        raise OrinError(f"{model_dir}: no *.safetensors weights")
    with torch.device("meta"):
        model = Llama(arch, max_positions)
    fused = _fuse(state, arch)
    quantized = [n[: -len(".qweight")] for n in fused if n.endswith(".qweight")]
    for name in quantized:  # weight-only quantized layers (the draft model)
        qweight, scales = fused.pop(name + ".qweight"), fused.pop(name + ".scales")
        model.set_submodule(name, QuantLinear(qweight, scales, dtype))
    missing, unexpected = model.load_state_dict({k: v.to(dtype) for k, v in fused.items()},
                                                strict=False, assign=True)
    missing = [m for m in missing if m not in ("cos", "sin") and m.rpartition(".")[0] not in quantized]
    if missing or unexpected:
        raise OrinError(f"{model_dir}: weights do not match a Llama of this config "
                        f"(missing {missing[:3]}, unexpected {unexpected[:3]})")
    model.cos, model.sin = rope_tables(arch, max_positions)  # buffers built on meta: make them real
    model = model.to(device).eval()
    if packing_available(device, dtype):
        if not pack_linears(model):
            log.warning("oneDNN could not pack the linear layers on this CPU: torch's default ones run (slower)")
        elif not rows_independent(model, PROBE_ROWS):
            log.info("oneDNN's kernels are not row-independent here: exact decode steps are padded")
        else:
            model.rows_independent = True
    model.bf16_prefill = bf16_attention_available(device)
    if torch.device(device).type == "cpu" and not model.bf16_prefill:
        log.info("no bf16 dot products on this CPU (or ORIN_LLM_BF16_ATTN=0): prefill attention over an "
                 "INT8 KV cache runs float32 SDPA (slower at long prompts, same results to rounding)")
    return model
