"""Triton kernels for the torch runtime's CUDA path: attention straight over the paged KV pool
(INT8 with the calibrated static scales, or float16/bfloat16), the Q4_1 target's linears in INT4 (a
tiled kernel, and a GEMV for decode's few rows), the LM head in INT8, and a decode step's small ops
fused (step_ops.py). One kernel per module; `reference` holds the torch computation each one is
tested against (tests/kernels, in Triton's interpreter on CPUs: TRITON_INTERPRET=1).

Importing this package imports neither triton nor the kernels: the functions below load their
module on first call, so a CPU daemon that never calls them keeps triton out of its memory
(tests/runtime/test_engine.py checks that loading an engine does not import it).

Layouts the runtime passes (runtime/kv_pool.py): one layer of the pool, `pool.k[layer]` and
`pool.v[layer]`, is [kv_heads, slots, head_dim] with slot = block_id · block_size + offset
(block_size: the pool's, 16); block tables are [sequences, max_blocks] int32; lengths int32;
INT8 scales [kv_heads] (`pool.scales(layer)`, x ≈ code · scale).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import torch

if TYPE_CHECKING:
    from .int4_gemv import GemvConfig
    from .q4_linear import Q4Packed


def available() -> Optional[str]:
    """None when triton imports here; else why not (the CUDA path then says so, not a silent fallback)."""
    try:
        import triton  # noqa: F401
    except ImportError as e:  # (the Orin's JetPack torch has no triton wheel by default)
        return f"triton is not installed ({e}); pip install -e '.[triton]' (or a CUDA torch, which brings it)"
    return None


def paged_decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           block_tables: torch.Tensor, seq_lens: torch.Tensor, block_size: int,
                           k_scale: Optional[torch.Tensor] = None, v_scale: Optional[torch.Tensor] = None,
                           sm_scale: Optional[float] = None, out: Optional[torch.Tensor] = None,
                           split_blocks: int = 16, num_warps: Optional[int] = None,
                           num_stages: Optional[int] = None) -> torch.Tensor:
    """One query per sequence: q [B, H, D] → [B, H, D] in q's dtype; seq_lens[b] keys (its own
    included, already written; 0: a padded row, output 0). CUDA-graph capturable: no host value
    depends on the lengths. A verify step's rows go through here too, one row per position (block
    table repeated, lengths pos+1 ...): the same arithmetic as one-token steps, bit for bit."""
    from .decode_attention import paged_decode_attention as run
    return run(q, k_cache, v_cache, block_tables, seq_lens, block_size, k_scale, v_scale, sm_scale, out,
               split_blocks, num_warps, num_stages)


def paged_prefill_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                            block_tables: torch.Tensor, seq_lens: torch.Tensor, q_start: torch.Tensor,
                            block_size: int, k_scale: Optional[torch.Tensor] = None,
                            v_scale: Optional[torch.Tensor] = None, sm_scale: Optional[float] = None,
                            max_q_len: Optional[int] = None, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """New rows of several sequences, packed: q [T, H, D], sequence b's rows q[q_start[b]:q_start[b+1]]
    at its last positions (seq_lens[b] includes them), causal over its cached prefix and its new rows.
    Returns [T, H, D] in q's dtype."""
    from .prefill_attention import paged_prefill_attention as run
    return run(q, k_cache, v_cache, block_tables, seq_lens, q_start, block_size, k_scale, v_scale, sm_scale,
               max_q_len, out)


def q4_repack(qweight: torch.Tensor, scales: torch.Tensor, mins: torch.Tensor,
              dtype: torch.dtype = torch.float16) -> Q4Packed:
    """quant.recover_q4_1's blocks (codes [N, K/2] uint8, scales and mins [N, K/32]) → the kernel's
    layout (q4_linear.py's doc): once, at load, on the weight's device. dtype: the scales' (float16:
    exact; the activations' dtype, e.g. bfloat16, for the fast dequantization)."""
    from .q4_linear import q4_repack as run
    return run(qweight, scales, mins, dtype)


def quantize_q4_1(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A float [N, K] weight → Q4_1 blocks in recover_q4_1's format (for q4_repack): a second quantization,
    e.g. of the LM head to run it on int4_linear."""
    from .q4_linear import quantize_q4_1 as run
    return run(w)


def int4_linear(x: torch.Tensor, packed: Q4Packed, out: Optional[torch.Tensor] = None, block_m: int = 16,
                block_n: int = 64, block_g: int = 4, out_dtype: Optional[torch.dtype] = None,
                split_k: int = 1, num_warps: Optional[int] = None, num_stages: Optional[int] = None) -> torch.Tensor:
    """x [..., K] @ W.T for a repacked Q4_1 W → [..., N] (x's dtype unless out_dtype); split_k: the
    inputs in that many ranges, partial sums added in a fixed order (deterministic), for decode GEMVs."""
    from .q4_linear import int4_linear as run
    return run(x, packed, out, block_m, block_n, block_g, out_dtype, split_k, num_warps, num_stages)


def q4_gemv(x: torch.Tensor, packed: Q4Packed, config: Optional[GemvConfig] = None, split_k: int = 1,
            out: Optional[torch.Tensor] = None, out_dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """x [..., K] @ W.T for a repacked Q4_1 W, tiled for decode's 1-16 rows a tile (int4_gemv.py): the
    same layout as int4_linear; config None: int4_gemv.CANDIDATES[0]."""
    from .int4_gemv import CANDIDATES
    from .int4_gemv import q4_gemv as run
    return run(x, packed, config or CANDIDATES[0], split_k, out, out_dtype)


def int8_head(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, out: Optional[torch.Tensor] = None,
              block_m: int = 16, block_n: int = 64, block_k: int = 128, num_warps: Optional[int] = None,
              num_stages: Optional[int] = None) -> torch.Tensor:
    """Logits [..., V] float32 of x [..., K] over int8 codes [V, K] with scales [V] (per row,
    quant.quantize_int8) or [V, K/32] (a Q8_0 matrix, quant.recover_q8_0: the GGUF's own values)."""
    from .head_int8 import int8_head as run
    return run(x, qweight, scales, out, block_m, block_n, block_k, num_warps, num_stages)
