"""The GPU check's baselines and decode figures (orin_llm/bench/gpu_hf.py, gpu_decode.py) on a CPU: the
same-quantization baseline puts every linear of a transformers Llama on Q4_1's values, and a decode
figure is the median of its repeats."""

from __future__ import annotations

import statistics

import torch

from orin_llm.bench.gpu_decode import median_of
from orin_llm.bench.gpu_hf import int4_linears
from orin_llm.kernels.triton import reference
from orin_llm.kernels.triton.q4_linear import quantize_q4_1


def test_every_linear_runs_q4_1_values_of_its_weight():
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                      num_hidden_layers=2, vocab_size=96, tie_word_embeddings=True)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    before = {n: m.weight.detach().clone() for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    assert "lm_head" in before and len(before) == 2 * 7 + 1
    words = int4_linears(model)
    assert "stand-in" in words  # (a CPU: torch's int4 kernel is CUDA's)
    assert not any(isinstance(m, torch.nn.Linear) for m in model.modules())
    for name, w in before.items():
        x = torch.randn(3, w.shape[1], dtype=torch.bfloat16)
        want = x.float() @ reference.q4_1_dequantize(*quantize_q4_1(w)).T
        got = model.get_submodule(name)(x).float()
        assert (got - want).abs().max() <= 0.02 * want.abs().max(), name  # (bf16 weights and outputs)
    ids = torch.tensor([[1, 2, 3]])
    assert model(ids).logits.shape == (1, 3, 96)


def test_a_figure_is_the_median_of_its_repeats():
    runs = [{"tok_per_s_per_request": 10.0, "steps": 5, "note": "x"}, {"tok_per_s_per_request": 30.0, "steps": 7,
                                                                       "note": "y"},
            {"tok_per_s_per_request": 20.0, "steps": 6, "note": "z"}]
    m = median_of(runs)
    assert m == {"tok_per_s_per_request": 20.0, "steps": 6, "repeats": [10.0, 30.0, 20.0]}
    assert m["tok_per_s_per_request"] == statistics.median(m["repeats"])
