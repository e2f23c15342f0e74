"""Prefill attention over an INT8 cache as bf16 GEMMs: the same attention as SDPA over the int8
values (to bf16 rounding), causal, chunked without changing the result, and used only where it
should be (prefill, INT8 cache), so decode steps and full-precision caches are untouched."""

from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

import orin_llm.kernels.attention as attention
import orin_llm.runtime.attention_layer as attention_layer
import orin_llm.runtime.llama as llama
from orin_llm.kernels.attention import int8_attention_bf16
from orin_llm.runtime.kv_cache import KVCache

H, KV, D = 9, 3, 64  # SmolLM2's heads: 3 query heads per KV head


def _case(pos: int, t: int, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(H, t, D, generator=gen) * 0.02  # K's scale folded in, as llama.py passes it
    keys = torch.randint(-127, 128, (KV, pos + t, D), dtype=torch.int8, generator=gen)
    values = torch.randint(-127, 128, (KV, pos + t, D), dtype=torch.int8, generator=gen)
    return q, keys, values


def _sdpa(q, keys, values, pos):
    t = q.shape[1]
    mask = torch.ones(t, pos + t, dtype=torch.bool).tril(diagonal=pos)
    k = keys.float().repeat_interleave(H // KV, dim=0)
    v = values.float().repeat_interleave(H // KV, dim=0)
    return F.scaled_dot_product_attention(q[None], k[None], v[None], attn_mask=mask)[0]


def _rel(a, b):
    return float((a - b).norm() / b.norm())


@pytest.mark.parametrize("pos,t", [(0, 40), (300, 23), (1000, 1)])
def test_matches_sdpa_over_the_int8_values_to_bf16_rounding(pos, t):
    q, keys, values = _case(pos, t)
    got = int8_attention_bf16(q, keys, values, pos)
    assert got.shape == (H, t, D) and got.dtype == torch.float32
    assert _rel(got, _sdpa(q, keys, values, pos)) < 0.01  # bf16 keeps 8 bits: ~0.3% measured


def test_a_query_never_sees_later_keys():
    pos, t = 50, 20
    q, keys, values = _case(pos, t)
    before = int8_attention_bf16(q, keys, values, pos)
    keys[:, pos + 10:], values[:, pos + 10:] = 127, -127  # change what queries 0..9 must not see
    after = int8_attention_bf16(q, keys, values, pos)
    assert torch.equal(after[:, :10], before[:, :10])
    assert not torch.equal(after[:, 10:], before[:, 10:])


def test_chunks_of_queries_give_the_one_pass_result(monkeypatch):
    """A cold prefill is cut into chunks of queries to bound the scores' memory."""
    pos, t = 100, 60
    q, keys, values = _case(pos, t)
    whole = int8_attention_bf16(q, keys, values, pos)
    monkeypatch.setattr(attention, "SCORE_ELEMENTS", H * (pos + t) * 7)  # 7 queries a chunk: 9 chunks
    chunked = int8_attention_bf16(q, keys, values, pos)
    assert _rel(chunked, whole) < 1e-3


def _prefill_logits(model, cache, ids, bf16: bool):
    saved, model.plan = model.plan, replace(model.plan, bf16_prompt=bf16)
    try:
        cache.crop(0)
        return model(ids, cache, num_logits=len(ids))
    finally:
        model.plan = saved
        cache.crop(0)


@pytest.mark.full
def test_prefill_over_int8_runs_it_and_decode_steps_do_not(engine, monkeypatch):
    """The engine routes a long prefill over its INT8 cache through it; decode and verify steps (at
    most PROBE_ROWS tokens) keep SDPA, which is what keeps speculation bit-exact, and so does a
    short prompt, where SDPA is faster. (With the INT8 prompt op off: where it builds, it takes these
    same steps instead, tests/runtime/test_prefill_attention.py.)"""
    model, cache = engine.model, engine.contiguous_cache(2048)
    monkeypatch.setattr(model, "plan", replace(model.plan, int8_prompt=False))
    calls = []

    def spy(q, keys, values, pos):
        calls.append((q.shape[1], pos))
        return int8_attention_bf16(q, keys, values, pos)

    monkeypatch.setattr(attention_layer, "int8_attention_bf16", spy)
    short = torch.tensor(engine.chat_ids([{"role": "user", "content": "Bring the red mug from the kitchen."}]))
    ids = torch.tensor(engine.chat_ids([{"role": "user", "content": "The hall leads to the kitchen. " * 90}]))
    assert llama.PROBE_ROWS < len(short) < attention.MIN_KEYS <= len(ids)
    saved = model.plan
    try:
        with_bf16 = _prefill_logits(model, cache, ids, True)
        assert calls == [(len(ids), 0)] * model.arch.num_layers
        sdpa = _prefill_logits(model, cache, ids, False)
        assert len(calls) == model.arch.num_layers  # off: not called
        # the same next tokens, to bf16 rounding in attention
        assert (with_bf16.argmax(-1) == sdpa.argmax(-1)).float().mean() >= 0.9
        calls.clear()
        model.plan = replace(saved, bf16_prompt=True)
        cache.crop(0)
        model(ids, cache)
        calls.clear()
        model(ids[:1], cache)  # a decode step
        model(ids[:llama.PROBE_ROWS], cache)  # the widest verify step
        cache.crop(0)
        model(short, cache)
        assert calls == []
    finally:
        model.plan = saved
        cache.crop(0)


@pytest.mark.full
def test_a_full_precision_cache_never_runs_it(engine_fp):
    """bf16 rounding is for INT8 caches only: invariant 4 (logits match transformers) holds for
    full-precision ones, bit for bit as with the switch off."""
    model, cache = engine_fp.model, engine_fp.contiguous_cache(2048)
    assert isinstance(cache, KVCache) and cache.k.dtype == torch.float32
    assert engine_fp.cache.target_pool.k.dtype == torch.float32
    ids = torch.tensor(engine_fp.chat_ids([{"role": "user", "content": "Open the fridge. " * 150}]))
    assert len(ids) >= attention.MIN_KEYS
    on = _prefill_logits(model, cache, ids, True)
    off = _prefill_logits(model, cache, ids, False)
    assert torch.equal(on, off)
