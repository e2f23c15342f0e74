"""The GPU check's roofline (orin_llm/bench/gpu_roofline.py): a step's bytes count the head, a head that
shares the embedding's codes counts them once, and the fractions are taken against both bandwidths."""

from __future__ import annotations

import torch

from orin_llm.bench.gpu_roofline import roofline, step_bytes
from orin_llm.kernels.cuda_linear import TritonQ8Head
from orin_llm.kernels.quant import Q8Embedding
from orin_llm.runtime.llama import Llama
from tests.kernels.paged import arch


def _nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _tiny(vocab: int = 256):
    """A tiny Llama as a q4_1 target loads on CUDA: a Q8_0 embedding, and the tied Triton INT8 head over the
    very same codes (held in a list, not a buffer: cuda_linear.TritonQ8Head); bf16 elsewhere."""
    a = arch(heads=4, kv_heads=2, head_dim=16, layers=2).model_copy(update={"vocab_size": vocab,
                                                                          "intermediate_size": 96})
    model = Llama(a, 64).to(torch.bfloat16)
    g = torch.Generator().manual_seed(0)
    codes = torch.randint(-127, 128, (vocab, a.hidden_size), dtype=torch.int8, generator=g)
    scales = torch.rand(vocab, a.hidden_size // 32, generator=g)
    model.embed_tokens = Q8Embedding(codes, scales, torch.bfloat16)
    model.lm_head = TritonQ8Head(codes, scales.half())
    return model, codes


def test_a_head_sharing_the_embedding_codes_counts_them_once():
    model, codes = _tiny()
    b = step_bytes(model, bytes_per_token=100, context=10)
    layers = _nbytes(model.layers.parameters()) + _nbytes(model.norm.parameters())
    head = codes.numel() + _nbytes([model.lm_head.scales])  # int8 codes once, the head's fp16 scales
    assert b["head_bytes"] == head
    assert b["weights_bytes"] == layers + head
    assert b["kv_bytes"] == 1000 and b["total_bytes"] == layers + head + 1000
    # the embedding's codes are read through the head; only its own scales (a row a step) are left out
    assert b["embedding_bytes_not_counted"] == _nbytes([model.embed_tokens.scales])


def test_a_tied_bf16_head_counts_its_weight_once():
    model, _ = _tiny()
    emb = torch.nn.Embedding(256, model.arch.hidden_size, dtype=torch.bfloat16)
    model.embed_tokens = emb
    model.lm_head = torch.nn.Linear(model.arch.hidden_size, 256, bias=False, dtype=torch.bfloat16)
    model.lm_head.weight = emb.weight  # tied: one tensor, two holders
    b = step_bytes(model, 0, 0)
    assert b["head_bytes"] == _nbytes([emb.weight])
    assert b["weights_bytes"] == _nbytes(model.layers.parameters()) + _nbytes(model.norm.parameters()) + \
        _nbytes([emb.weight])
    assert b["embedding_bytes_not_counted"] == 0


def test_fractions_against_both_bandwidths():
    stages = {"decode_int4": {"batch_1": {"tok_per_s_per_request": 500.0}},
              "decode_4k": {"batch_1": {"tok_per_s_per_request": 400.0}}, "hf": {"compiled": 1}}
    r = roofline({"total_bytes": 2 * 10**9}, 4000.0, 4800.0, stages)
    # 2 GB a step: 2000 tok/s at a 4000 GB/s copy, 2400 at a 4800 GB/s read
    assert r["roofline_tok_per_s"] == 2000.0 and r["roofline_tok_per_s_read"] == 2400.0
    assert r["fraction_of_roofline"] == r["decode_int4_fraction"] == 0.25
    assert r["fraction_of_read_roofline"] == r["decode_int4_fraction_read"] == round(500 / 2400, 3)
    assert r["decode_4k_fraction"] == 0.2 and "hf_fraction" not in r
    none = roofline({"total_bytes": 1}, None, None, stages)
    assert "roofline_tok_per_s" not in none and none["fraction_of_roofline"] is None


def test_the_results_page_recounts_an_old_run_with_its_head_and_leaves_a_new_one():
    from orin_llm.bench.results_gpu import recounted_roofline

    old = {"stages": {"decode_int4": {"batch_1": {"tok_per_s_per_request": 400.0}},
                      "roofline": {"total_bytes": 3 * 10**9, "embedding_bytes_not_counted": 10**9,
                                   "bandwidth_gb_per_s": 4000.0}}}
    assert recounted_roofline(old, old) == 400.0 / (4000e9 / (4 * 10**9))  # 1000 tok/s with the head: 40 %
    new = {"stages": {**old["stages"], "roofline": {**old["stages"]["roofline"], "head_bytes": 10**9}}}
    assert recounted_roofline(old, new) is None  # (counted already)
