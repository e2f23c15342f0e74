"""Prompt chunks' attention in one Triton call per layer over the paged pool (Step.paged_prompt,
kernel_plan's triton_prefill; the kernel in Triton's interpreter here), on the tiny engine: the
K/V a prompt leaves in the pool and its last logits do not depend on how it was chunked (bit for
bit: a cached prefix and a cold prompt give the same numbers), and agree with the SDPA-per-block path:
the first layer's attention to float32 rounding, the rest to the INT8 codes' rounding (a code that
flips at a half step moves the layers after it)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from orin_llm.runtime.kernel_plan import KernelSwitches
from orin_llm.runtime.llama import Item

FLOAT_OPS = KernelSwitches(fused_decode=False, int8_attention=False, q8_dot=False)


@pytest.fixture(scope="module")
def engine(tiny_engine_dir):
    from orin_llm.runtime.engine import Engine

    eng = Engine.load(tiny_engine_dir, device="cpu", switches=FLOAT_OPS)
    eng.model.layers = eng.model.layers[:4]  # (the interpreter runs each program in Python)
    return eng


def prefill(eng, ids: list[int], chunks: list[int], paged: bool):
    """The prompt in chunks of these sizes (block-aligned, as the engine cuts them): the K/V of its
    positions in the pool, per layer, and its last row's logits."""
    model, plan = eng.model, eng.model.plan
    model.plan = replace(plan, triton_prefill=paged)
    eng.clear_cache()
    seen: list = []
    hook = model.layers[0].self_attn.o_proj.register_forward_hook(lambda m, i, o: seen.append(i[0].clone()))
    kv = eng.cache.admit(ids, len(ids) + 1)
    try:
        at = 0
        for n in chunks:
            eng.cache.grow(kv, at + n)
            logits = model.forward_batch([Item(torch.tensor(ids[at:at + n]), kv.target, int(at + n == len(ids)),
                                               block=16)])[0]
            at += n
        slots = kv.target.slots(0, len(ids))
        pool = kv.target.pool
        return [(pool.k[i][:, slots].clone(), pool.v[i][:, slots].clone()) for i in range(4)], logits, \
            torch.cat(seen)
    finally:
        hook.remove()
        eng.cache.release(kv)
        model.plan = plan


def test_chunked_prefill_on_the_paged_kernel(engine):
    assert not engine.model.plan.triton_prefill  # a CPU plan: the Triton prefill is the CUDA path's
    ids = list(range(300, 370))  # 70 tokens: 4 whole blocks and a part
    whole, logits, attn = prefill(engine, ids, [70], paged=True)
    chunked, logits2, attn2 = prefill(engine, ids, [32, 16, 22], paged=True)
    for (k, v), (k2, v2) in zip(whole, chunked, strict=True):
        assert torch.equal(k, k2) and torch.equal(v, v2)
    assert torch.equal(logits, logits2) and torch.equal(attn, attn2)
    sdpa, logits3, attn3 = prefill(engine, ids, [32, 38], paged=False)
    assert attn.shape == attn3.shape == (70, 256)
    assert (attn - attn3).abs().max().item() <= 1e-5 * attn3.abs().max().item()
    assert logits.shape == logits3.shape == (1, engine.model.arch.vocab_size)
    assert (logits - logits3).abs().max().item() <= 0.02 * logits3.abs().max().item()
    assert torch.equal(whole[0][0], sdpa[0][0])  # the first layer's K: before any attention
    for (k, _), (k3, _) in zip(whole[1:], sdpa[1:], strict=True):  # then a code apart where a rounding flipped
        assert (k.int() - k3.int()).abs().max().item() <= 1 and (k != k3).float().mean().item() < 0.1
