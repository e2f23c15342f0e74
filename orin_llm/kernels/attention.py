"""Prefill attention over an INT8 KV cache as two bfloat16 GEMMs (CPU).

Why: with the home prefix pinned, a request's time to first token is its suffix's queries
attending over the whole prefix. At 4k tokens that attention is 6.5 GFLOP against 4.9 for all of
the suffix's linear layers, and torch's SDPA runs it in float32 at about 110 GFLOP/s on the
2-core reference machine. Two facts make it cheap: int8 values are exact in bfloat16 (8
significant bits), so the cached K and V convert without loss, and oneDNN's bf16 GEMMs use the
CPU's bf16 dot-product instructions (AVX512-BF16, AMX) at ~5× the float32 rate. What rounds is q,
the scores (the GEMM writes bf16) and the probabilities: the kv scenario measures what that does to
argmax agreement, and docs/notes/benchmarks-lab-notes.md records it.

Only prefill runs here. Decode and verify steps (at most PROBE_ROWS tokens) stay on float32 SDPA,
so speculative decoding stays exactly lossless and decode speed is what it was.
"""

from __future__ import annotations

import functools

import torch

# Scores per chunk of queries: a cold 4k-token prefill would otherwise hold 9 × 4k × 4k scores.
# 2^22 bf16 elements are 8 MiB, twice (scores and probabilities): well inside the activation
# workspace the memory plan reserves (build/memory.py).
SCORE_ELEMENTS = 1 << 22

# Below this many keys attention is a small part of a forward and SDPA's single call beats the
# dozen small ops here (bench/prefill_attention.py measures it; lab notes).
MIN_KEYS = 512


def bf16_dot_products() -> bool:
    """True on CPUs with bf16 dot-product instructions, where the GEMMs here run at speed (the kernel
    plan, kernel_plan.py, decides whether they run: ORIN_LLM_BF16_ATTN=0 turns them off)."""
    # torch.cpu's probes are private; a torch without them gets SDPA
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(getattr(torch.cpu, name, lambda: False)() for name in probes)


def int8_attention_bf16(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, pos: int) -> torch.Tensor:
    """Causal attention of T queries at positions pos .. pos+T-1 over an INT8 cache.

    q: [H, T, D] float with the K scale folded in; keys, values: [KV, pos+T, D], the cache's raw
    int8 values, as int8 or already converted to bfloat16 (exactly). Query t sees keys 0 .. pos+t.
    Softmax scale 1/sqrt(D), as SDPA's. Returns
    [H, T, D] float32 without V's scale, which the caller applies to the output as for SDPA."""
    h, t, d = q.shape
    kv = keys.shape[0]
    g = h // kv  # query heads per KV head: they share one GEMM against their K/V (GQA)
    kb, vb = keys.to(torch.bfloat16), values.to(torch.bfloat16)  # no copy when the caller converted
    qg = (q * d ** -0.5).view(kv, g, t, d).to(torch.bfloat16)
    out = torch.empty(kv, g, t, d, dtype=torch.bfloat16, device=q.device)
    step = max(1, SCORE_ELEMENTS // (h * (pos + t)))
    for a in range(0, t, step):
        b = min(t, a + step)
        n, end = b - a, pos + b  # keys past pos+b-1 are in no query's view: not computed
        rows = qg[:, :, a:b].reshape(kv, g * n, d)
        # [KV, G·n, end], one GEMM per KV head: keys[:, :end] of a longer read is not batch-contiguous,
        # and bmm copies such an operand first (2.3-2.6× the time of mm per head for a 16-query block
        # over 4k keys, bit-identical: bench/sliced_keys.py); mm takes each head's [end, D] as is
        scores = torch.stack([torch.mm(rows[i], kb[i, :end].T) for i in range(kv)])
        scores[:, :, pos + a:end].masked_fill_(_future(n, g, q.device), float("-inf"))
        probs = torch.softmax(scores, dim=-1)  # bf16 in and out, computed in float32
        out[:, :, a:b] = torch.bmm(probs, vb[:, :end]).view(kv, g, n, d)
    return out.view(h, t, d).float()


@functools.lru_cache(maxsize=8)
def _future(n: int, g: int, device: torch.device) -> torch.Tensor:
    """[g·n, n]: True where query i of a chunk (rows g-major, as the GEMM has them) would see a key
    of the chunk after its own. The same for every layer of a forward: built once."""
    return torch.ones(n, n, dtype=torch.bool, device=device).triu(1).repeat(g, 1)
