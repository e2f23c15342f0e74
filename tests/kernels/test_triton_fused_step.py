"""The fixed-shape decode step with its small ops fused (kernels/triton/step_ops.py, in Triton's
interpreter here) against the same step unfused, on the tiny engine: the logits and the K/V it writes
into the pool. The kernels alone: test_triton_step_ops.py."""

from __future__ import annotations

from dataclasses import replace

import torch

from orin_llm.runtime.kernel_plan import KernelSwitches
from orin_llm.runtime.llama import Item

# torch's float32 linears (no q8_dot: its int8 activations would turn a 1e-7 difference into 1/127)
FLOAT_OPS = KernelSwitches(fused_decode=False, int8_attention=False, q8_dot=False)


def test_the_fused_step_is_the_unfused_step(tiny_engine_dir):
    from orin_llm.runtime.engine import Engine

    eng = Engine.load(tiny_engine_dir, device="cpu", switches=FLOAT_OPS)
    # its first 6 layers of 30 (the interpreter runs each Triton program in Python: seconds a layer)
    eng.model.layers = eng.model.layers[:6]
    pool = eng.cache.target_pool
    eng.runner.attach_graphs(pool, eng.manifest.limits["max_batch_size"], eng.max_seq_len + eng.decode_rows,
                            capture=False)
    unfused = eng.model.plan
    assert not unfused.fused_step_ops  # (a CPU plan: the fused ops are the CUDA path's)
    ids = list(range(100, 137))
    logits, pools = [], []
    for fused in (False, True):
        eng.model.plan = replace(unfused, fused_step_ops=fused)
        eng.clear_cache()
        kv = eng.cache.admit(ids, len(ids) + 1)
        try:
            eng.cache.grow(kv, len(ids) - 3)
            eng.runner.forward([Item(torch.tensor(ids[:-3]), kv.target, 0, block=16)])
            eng.cache.grow(kv, len(ids))
            logits.append(eng.runner.forward([Item(torch.tensor(ids[-3:]), kv.target, 3, decode=True)])[0])
            slots = kv.target.slots(len(ids) - 3, len(ids))  # the decode step's rows
            pools.append((pool.k[:, :, slots].clone(), pool.v[:, :, slots].clone()))
        finally:
            eng.cache.release(kv)
    eng.model.plan = unfused
    assert eng.runner.graphs.stats.eager_runs == 2  # both decode steps took the fixed-shape path
    assert logits[0].shape == (3, eng.model.arch.vocab_size)
    scale = logits[0].abs().max().item()
    assert (logits[0] - logits[1]).abs().max().item() <= 1e-4 * scale
    for a, b in zip(pools[0], pools[1], strict=True):  # the K/V the step wrote, INT8 codes
        assert a.dtype == torch.int8 and a.abs().sum() > 0
        # the same codes, but where a value sits within float32 rounding of a half step
        assert (a.int() - b.int()).abs().max().item() <= 1 and (a != b).sum().item() <= a.numel() // 1000 + 2
