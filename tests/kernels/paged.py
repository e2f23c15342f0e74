"""Paged K/V for the attention kernels' tests, written through the runtime's own pool (kv_pool.py):
the layout and the INT8 quantization are the runtime's, not a copy of them."""

from __future__ import annotations

import os

import torch

from orin_llm.arch import Arch
from orin_llm.runtime.kv_pool import KVPool, PagedView

BLOCK = 4  # small blocks: a few tokens cross several of them, partial last blocks included
TOLERANCE = {torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}  # × the outputs' scale


def device_name() -> str:
    """Where the kernels run: the CPU in Triton's interpreter (conftest sets it without a GPU), else CUDA."""
    return "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"


def arch(heads: int = 6, kv_heads: int = 2, head_dim: int = 32, layers: int = 2) -> Arch:
    return Arch(num_layers=layers, hidden_size=heads * head_dim, intermediate_size=8, num_heads=heads,
                num_kv_heads=kv_heads, head_dim=head_dim, vocab_size=16, tie_word_embeddings=True,
                max_position_embeddings=1024, rms_norm_eps=1e-5, rope_theta=1e4)


def pool(a: Arch, dtype: torch.dtype, int8: bool, num_blocks: int = 40, device: str = "cpu") -> KVPool:
    if not int8:
        return KVPool(a, num_blocks, BLOCK, dtype, device)
    g = torch.Generator().manual_seed(1)
    ks = 0.02 + 0.03 * torch.rand(a.num_layers, a.num_kv_heads, generator=g)
    vs = 0.02 + 0.03 * torch.rand(a.num_layers, a.num_kv_heads, generator=g)
    return KVPool(a, num_blocks, BLOCK, dtype, device, ks, vs)


def fill(p: KVPool, lengths: list[int], max_blocks: int, seed: int = 0):
    """Sequences of `lengths` tokens in scattered blocks of the pool, every layer written with random
    K/V (std 1: INT8 codes up to about ±3/0.02), through PagedView.write as the model writes them.
    Returns the views and block tables [B, max_blocks] int32 whose unused entries point far out of
    the pool (a kernel that reads past a sequence's length would fault or fail)."""
    g = torch.Generator().manual_seed(seed)
    free = torch.randperm(p.num_blocks, generator=g).tolist()
    views, tables = [], torch.full((len(lengths), max_blocks), 1 << 20, dtype=torch.int32)
    a = p.arch
    for b, n in enumerate(lengths):
        blocks = [free.pop() for _ in range(-(-n // BLOCK))]
        tables[b, :len(blocks)] = torch.tensor(blocks, dtype=torch.int32)
        view = PagedView(p, blocks)
        for layer in range(a.num_layers):
            k = torch.randn(n, a.num_kv_heads, a.head_dim, generator=g).to(p.device, p.dtype)
            v = torch.randn(n, a.num_kv_heads, a.head_dim, generator=g).to(p.device, p.dtype)
            view.write(layer, 0, k, v)
        view.length = n
        views.append(view)
    return views, tables.to(p.device)


def layer_args(p: KVPool, layer: int):
    """What the runtime hands a kernel for one layer: the pool's K/V and its [KV] scales (None: float)."""
    k_scale, v_scale = p.scales(layer)
    return p.k[layer], p.v[layer], k_scale, v_scale


def close(out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype) -> None:
    scale = ref.abs().max().item() or 1.0
    err = (out.float() - ref.float()).abs().max().item()
    assert err <= TOLERANCE[dtype] * scale, f"max error {err:.3g} over outputs up to {scale:.3g} ({dtype})"
