"""A decode step's small ops, fused: one kernel each where torch launches several (runtime/llama.py's
fixed-shape step on CUDA, kernel_plan's `fused_step_ops`). A decode step of a small model on a GPU
is bound by how many kernels it launches, not by their bytes: the last H200 profile had ~400 small
kernels in a batch-1 step besides the linears. Per layer these replace

- `add_rms_norm`: the residual add and the next RMSNorm (x + delta; float32 mean of squares, rsqrt,
  scale, round to x's dtype, times the weight): ~7 launches → 1, twice a layer;
- `rope_write`: RoPE on q and k (the signed-sin tables, llama.rope_tables), and K and V written into
  the paged pool at their slots, quantized with the static per-KV-head scales for an INT8 pool
  (round half to even, clamp to ±127) or converted for a float one: ~12 launches → 1;
- `silu_mul`: SiLU(gate) · up: 3 → 1.

Each rounds where torch's ops round (to x's dtype after every op torch runs in it), so the fused step
follows the unfused one to the last bits in most elements; the tests (tests/kernels/test_triton_step_ops.py)
compare them with `reference`'s torch versions. Both decode and verify rows run the same fused step,
so greedy speculation stays identical to plain decoding.
"""

from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl

from .common import check_float, check_same_device

ROUND = tl.constexpr(12582912.0)  # 1.5 · 2^23: v + ROUND - ROUND rounds a float32 |v| < 2^22 half to even


@triton.jit
def _add_rms_norm(X, R, W, XOUT, H, N, stride_x, stride_r, stride_xo, stride_h, eps,
                  BLOCK: tl.constexpr, ADD: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    i = tl.arange(0, BLOCK)
    mask = i < N
    x = tl.load(X + row * stride_x + i, mask=mask, other=0.0)
    if ADD:
        x = (x.to(tl.float32) + tl.load(R + row * stride_r + i, mask=mask, other=0.0).to(tl.float32)).to(x.dtype)
        tl.store(XOUT + row * stride_xo + i, x, mask=mask)
    h = x.to(tl.float32)
    ms = tl.sum(h * h, axis=0) / N
    h = (h * (1.0 / tl.sqrt(ms + eps))).to(x.dtype)
    w = tl.load(W + i, mask=mask, other=0.0)
    tl.store(H + row * stride_h + i, (h.to(tl.float32) * w.to(tl.float32)).to(H.dtype.element_ty), mask=mask)


def add_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, delta: Optional[torch.Tensor] = None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """(x + delta, RMSNorm(x + delta)) for x [T, N] (delta None: (x, RMSNorm(x))), as llama.RMSNorm
    computes it: float32 statistics, the normalized rows rounded to x's dtype, times the weight."""
    check_float("x", x)
    if x.dim() != 2 or x.stride(1) != 1 or weight.shape != (x.shape[1],):
        raise ValueError(f"x must be [T, N] with unit stride and weight [N]: {tuple(x.shape)}, {tuple(weight.shape)}")
    if delta is not None and (delta.shape != x.shape or delta.stride(1) != 1):
        raise ValueError(f"delta {tuple(delta.shape)} must be x's shape {tuple(x.shape)} with unit stride")
    check_same_device(x=x, weight=weight, delta=delta)
    t, n = x.shape
    out = torch.empty_like(x) if delta is not None else x
    h = torch.empty(t, n, dtype=torch.promote_types(x.dtype, weight.dtype), device=x.device)
    if t:
        r = delta if delta is not None else x
        _add_rms_norm[(t,)](x, r, weight, out, h, n, x.stride(0), r.stride(0), out.stride(0), h.stride(0), eps,
                            BLOCK=triton.next_power_of_2(n), ADD=delta is not None,
                            num_warps=4 if n <= 4096 else 8)
    return out, h


@triton.jit
def _rope_write(QKV, POS, COS, SIN, SLOTS, KC, VC, KS, VS, QOUT, stride_qkv, stride_cos, stride_kh, stride_q,
                HEADS: tl.constexpr, KV: tl.constexpr, D: tl.constexpr, INT8: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)  # 0 .. HEADS-1: a query head; HEADS .. HEADS+KV-1: a KV head's k and v
    d = tl.arange(0, D)
    half: tl.constexpr = D // 2
    partner = tl.where(d < half, d + half, d - half)
    pos = tl.load(POS + t)
    row = QKV + t * stride_qkv + head * D
    x = tl.load(row + d)
    xs = tl.load(row + partner)
    # the tables are float32; torch rounds them to x's dtype, then rounds each product and the sum
    c = tl.load(COS + pos * stride_cos + d).to(x.dtype).to(tl.float32)
    s = tl.load(SIN + pos * stride_cos + d).to(x.dtype).to(tl.float32)
    a = (x.to(tl.float32) * c).to(x.dtype).to(tl.float32)
    b = (xs.to(tl.float32) * s).to(x.dtype).to(tl.float32)
    y = (a + b).to(x.dtype)
    if head < HEADS:
        tl.store(QOUT + t * stride_q + head * D + d, y)
    else:
        j = head - HEADS
        v = tl.load(QKV + t * stride_qkv + (HEADS + KV + j) * D + d)
        slot = tl.load(SLOTS + t).to(tl.int64)
        dest = j.to(tl.int64) * stride_kh + slot * D + d
        if INT8:
            # (IEEE division as torch's; clamped first, then rounded: the same codes, as ±127 are integers)
            kq = tl.minimum(tl.maximum(tl.math.div_rn(y.to(tl.float32), tl.load(KS + j)), -127.0), 127.0)
            vq = tl.minimum(tl.maximum(tl.math.div_rn(v.to(tl.float32), tl.load(VS + j)), -127.0), 127.0)
            tl.store(KC + dest, ((kq + ROUND) - ROUND).to(tl.int8))
            tl.store(VC + dest, ((vq + ROUND) - ROUND).to(tl.int8))
        else:
            tl.store(KC + dest, y.to(KC.dtype.element_ty))
            tl.store(VC + dest, v.to(VC.dtype.element_ty))


def rope_write(qkv: torch.Tensor, positions: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
               k_cache: torch.Tensor, v_cache: torch.Tensor, slots: torch.Tensor, heads: int, kv_heads: int,
               k_scale: Optional[torch.Tensor] = None, v_scale: Optional[torch.Tensor] = None) -> torch.Tensor:
    """qkv [T, (heads + 2·kv_heads)·D] (q, k, v heads in that order) at `positions` [T]: returns q with
    RoPE applied, [T, heads, D] in qkv's dtype, and writes k (with RoPE) and v into one layer of the
    pool, k_cache/v_cache [kv_heads, slots, D], at `slots` [T]; int8 caches with their scales [kv_heads]
    (code = round(x / scale) clamped to ±127, kv_pool._quantize's), float caches converted.
    cos/sin: llama.rope_tables' float32 [P, 1, D] (sin's first half negated)."""
    check_float("qkv", qkv)
    t = qkv.shape[0]
    d = k_cache.shape[-1]
    if qkv.dim() != 2 or qkv.stride(1) != 1 or qkv.shape[1] != (heads + 2 * kv_heads) * d:
        raise ValueError(f"qkv {tuple(qkv.shape)} must be [T, (heads + 2·kv_heads)·{d}] with unit stride")
    if d & (d - 1) or d < 2:
        raise ValueError(f"head_dim {d} must be a power of two")
    int8 = k_cache.dtype == torch.int8
    if int8 and (k_scale is None or v_scale is None):
        raise ValueError("an int8 cache needs its k_scale and v_scale")
    if k_cache.shape[0] != kv_heads or k_cache.stride(-1) != 1 or k_cache.stride(1) != d \
            or v_cache.stride() != k_cache.stride():
        raise ValueError(f"caches must be [kv_heads={kv_heads}, slots, {d}] contiguous per head, the same layout")
    check_same_device(qkv=qkv, positions=positions, cos=cos, slots=slots, k_cache=k_cache, k_scale=k_scale)
    q = torch.empty(t, heads, d, dtype=qkv.dtype, device=qkv.device)
    if t:
        # no FP fusion: the compiler would fuse x·cos into the sum (one bf16 FMA, one rounding where torch
        # rounds twice), which on an H200 put 14 % of q a bf16 unit off the unfused step's
        ks = k_scale.reshape(-1).float().contiguous() if int8 else k_cache
        vs = v_scale.reshape(-1).float().contiguous() if int8 else v_cache
        _rope_write[(t, heads + kv_heads)](qkv, positions, cos, sin, slots, k_cache, v_cache, ks, vs, q,
                                           qkv.stride(0), cos.stride(0), k_cache.stride(0), q.stride(0),
                                           HEADS=heads, KV=kv_heads, D=d, INT8=int8,
                                           num_warps=1 if d <= 128 else 2, enable_fp_fusion=False)
    return q


@triton.jit
def _silu_mul(GU, OUT, N, stride_gu, stride_out, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    i = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = i < N
    g = tl.load(GU + row * stride_gu + i, mask=mask, other=0.0)
    u = tl.load(GU + row * stride_gu + N + i, mask=mask, other=0.0)
    gf = g.to(tl.float32)
    act = tl.math.div_rn(gf, 1.0 + tl.exp(-gf)).to(g.dtype)  # (IEEE division, as torch's silu)
    tl.store(OUT + row * stride_out + i, (act.to(tl.float32) * u.to(tl.float32)).to(OUT.dtype.element_ty), mask=mask)


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """gate_up [T, 2·I] (gate, then up) → SiLU(gate) · up [T, I], rounded as F.silu(gate) * up is."""
    check_float("gate_up", gate_up)
    if gate_up.dim() != 2 or gate_up.shape[1] % 2 or gate_up.stride(1) != 1:
        raise ValueError(f"gate_up {tuple(gate_up.shape)} must be [T, 2·I] with unit stride")
    t, n = gate_up.shape[0], gate_up.shape[1] // 2
    out = torch.empty(t, n, dtype=gate_up.dtype, device=gate_up.device)
    if t:
        block = min(1024, triton.next_power_of_2(n))
        _silu_mul[(t, triton.cdiv(n, block))](gate_up, out, n, gate_up.stride(0), out.stride(0), BLOCK=block)
    return out
