"""Weight-only quantization of the draft: exact packing, bounded error, the engine's draft."""

import torch
import torch.nn.functional as F

from orin_llm.runtime.packed import PackedLinear
from orin_llm.runtime.quant import Int8Embedding, QuantLinear, quantize_int4, quantize_int8


def test_int8_per_channel_error_is_half_a_step():
    w = torch.randn(64, 32)
    q, s = quantize_int8(w)
    back = QuantLinear(q, s, torch.float32).dequantize()
    assert q.dtype == torch.int8 and s.shape == (64,)
    assert torch.all((back - w).abs() <= s[:, None] / 2 + 1e-6)


def test_int4_packing_is_exact_and_groupwise():
    w = torch.randn(16, 64)
    packed, s = quantize_int4(w, 16)
    assert packed.dtype == torch.uint8 and packed.shape == (16, 32) and s.shape == (16, 4)
    back = QuantLinear(packed, s, torch.float32).dequantize()
    step = s.repeat_interleave(16, dim=1)
    assert torch.all((back - w).abs() <= step / 2 + 1e-6)
    # values already on the grid come back exactly
    exact = back.clone()
    p2, s2 = quantize_int4(exact, 16)
    assert torch.allclose(QuantLinear(p2, s2, torch.float32).dequantize(), exact, atol=1e-6)


def test_quant_linear_forward_is_linear_of_the_dequantized_weight():
    w, x = torch.randn(24, 32), torch.randn(3, 32)
    lin = QuantLinear(*quantize_int8(w), torch.float32)
    assert torch.allclose(lin(x), F.linear(x, lin.dequantize()), atol=1e-5)


def test_engine_draft_is_quantized_and_smaller(engine):
    draft = engine.draft_model
    quant = [m for n, m in draft.named_modules() if isinstance(m, QuantLinear) and "layers" in n]
    assert len(quant) == 4 * engine.model.arch.num_layers  # qkv, o, gate_up, down per layer
    draft_bytes = sum(m.nbytes for m in quant)
    target = [m for n, m in engine.model.named_modules()
              if isinstance(m, (torch.nn.Linear, PackedLinear)) and "layers" in n]
    assert len(target) == len(quant)
    fp_bytes = sum(m.in_features * m.out_features * 4 for m in target)
    assert draft_bytes < fp_bytes / 3.5


def test_draft_agrees_with_target_on_most_greedy_tokens(engine):
    ids = torch.tensor(engine.chat_ids([{"role": "user", "content": "List four rooms of a house."}]))
    outs = [model(ids, engine.contiguous_cache(len(ids), draft=model is engine.draft_model),
                  num_logits=len(ids)).argmax(-1) for model in (engine.model, engine.draft_model)]
    assert (outs[0] == outs[1]).float().mean() >= 0.8


def test_packed_int8_kernel_matches_the_dequantized_weight():
    """The draft's int8 layers run torch's packed weight-only kernel on CPUs (bf16 activations): the
    same linear map, to bf16's precision."""
    w, x = torch.randn(48, 64), torch.randn(5, 64)
    lin = QuantLinear(*quantize_int8(w), torch.float32)
    reference = F.linear(x, lin.dequantize())
    assert lin.pack() and lin.packed_scales is not None
    out = lin(x)
    assert out.dtype == torch.float32 and out.shape == reference.shape
    assert torch.allclose(out, reference, rtol=2e-2, atol=2e-2 * reference.abs().max().item())
    int4 = QuantLinear(*quantize_int4(w, 16), torch.float32)
    assert not int4.pack()  # int4 keeps the dequantizing path


def test_engine_draft_layers_run_packed_on_cpu(engine):
    """Every int8 layer of the draft on the packed kernel, its tied head too: one int8 matrix for the
    lm_head and the input embedding (rows dequantized on lookup), a quarter of the fp32 bytes."""
    draft = engine.draft_model
    quant = [m for m in draft.modules() if isinstance(m, QuantLinear)]
    assert quant and all(m.packed_scales is not None for m in quant)
    head, emb = draft.lm_head, draft.embed_tokens
    assert isinstance(head, QuantLinear) and isinstance(emb, Int8Embedding)
    ids = torch.tensor([0, 5, 49151])
    assert torch.equal(emb(ids), head.dequantize()[ids])  # the same matrix, row by row
    fp = engine.model.embed_tokens.weight
    assert torch.allclose(emb(ids), fp[ids], atol=fp[ids].abs().amax().item() / 127)  # within half a step
    assert head.qweight.numel() * head.qweight.element_size() == fp.numel()  # 1 byte instead of 4
