"""K smoothing: per-channel factors folded into the q and k rows of each layer's qkv projection, so
that one static INT8 scale per KV head fits every channel of its keys.

Why: a Llama's keys have a few channels far larger than the rest, and one scale per head (what the
INT8 KV pool, its C++ and Triton kernels and TensorRT-LLM's INT8 KV all take) is set by the largest:
the small channels keep a few of the 255 codes. On the embedded model that rounding moved the
logprobs by more than the margin of close greedy choices (docs/BENCHMARKS.md, kernel quality).
Per-channel K scales (KIVI's way) would fix it inside every attention kernel; multiplying key
channel c by s_c and the query channel by 1/s_c leaves every score q·k as it is (SmoothQuant's idea,
for K), needs no kernel change, and holds for every backend that runs the rows.

RoPE rotates channel pairs (c, c + D/2) (llama.py, HF's rotate_half), so both channels of a pair
share one factor, and the scaling commutes with the rotation. s_c = (head's largest pair absmax /
pair c's absmax), clamped to [1, MAX_FACTOR]: the largest channels keep their values, so the head's
K scale is unchanged; the cap bounds how far a channel calibration saw small may be blown up (a
channel larger at run time than in calibration is clipped, as the largest one already is). The
factor is applied to whole weight rows: a Q4_1 (or int8, int4) row's scales and mins, a float row's
weights, so the quantized weights stay exact. The draft's rows get their own factors.

Applied where the model's KV cache is INT8 (the only place it changes anything), before packing."""

from __future__ import annotations

from typing import Optional

import torch

from ..arch import Arch

# at most 3 bits of the INT8 range won back for a small channel: a bound on how far a channel that
# calibration saw small is trusted, not a tuned value (caps 4 to none rounded alike: the commit says)
MAX_FACTOR = 8.0
KEY = "k_smooth"  # its tensor in the KV scales file (build/calibrate.py), [layers, kv_heads, head_dim]


def factors(k_channel_absmax: torch.Tensor) -> torch.Tensor:
    """[L, KV, D] per-channel K absmax (calibration) → [L, KV, D] factors, equal within RoPE pairs."""
    half = k_channel_absmax.shape[-1] // 2
    pair = torch.maximum(k_channel_absmax[..., :half], k_channel_absmax[..., half:])
    top = pair.amax(-1, keepdim=True)
    s = torch.clamp(top / pair.clamp_min(torch.finfo(torch.float32).tiny), 1.0, MAX_FACTOR)
    return torch.cat([s, s], dim=-1).float().contiguous()


def smoothed_absmax(k_channel_absmax: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """[L, KV] per-head K absmax of the smoothed keys (what the head's INT8 scale is made from)."""
    return (k_channel_absmax * s).amax(-1)


def row_factors(s: torch.Tensor, arch: Arch) -> torch.Tensor:
    """[L, KV, D] factors → [L, rows of qkv_proj]: 1/s on each query head's rows (every head of a KV
    group takes its group's factors), s on the key rows, 1 on the value rows."""
    rep = arch.num_heads // arch.num_kv_heads
    q = (1.0 / s).repeat_interleave(rep, dim=1).flatten(1)
    return torch.cat([q, s.flatten(1), torch.ones_like(s.flatten(1))], dim=1)


def apply(state: dict[str, torch.Tensor], s: Optional[torch.Tensor], arch: Arch) -> None:
    """Scale each layer's qkv_proj rows in `state` (weights.py's fused names) in place. A float layer
    is `.weight` [rows, in]; a quantized one has per-row `.scales` (and `.mins`) [rows, groups]."""
    if s is None:
        return
    expected = (arch.num_layers, arch.num_kv_heads, arch.head_dim)
    if tuple(s.shape) != expected:
        raise ValueError(f"K smoothing factors have shape {tuple(s.shape)}, the model needs {expected}")
    rows = row_factors(s, arch)
    for layer in range(arch.num_layers):
        name = f"layers.{layer}.self_attn.qkv_proj"
        for suffix in ("weight", "scales", "mins"):
            t = state.get(f"{name}.{suffix}")
            if t is not None and t.is_floating_point():
                # one factor per row: [rows] (an int8 layer's scales) or [rows, ...] (groups, inputs)
                f = rows[layer].view(-1, *([1] * (t.dim() - 1)))
                state[f"{name}.{suffix}"] = (t.float() * f).to(torch.float32 if t.dtype == torch.float16 else t.dtype)
