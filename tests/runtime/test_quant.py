"""Weight-only quantization: the draft's int8/int4, the target's Q4_1 blocks, their packed kernels."""

import pytest
import torch
import torch.nn.functional as F

from orin_llm.errors import OrinError
from orin_llm.kernels import q8_dot
from orin_llm.kernels.packed import PackedLinear
from orin_llm.kernels.quant import (
    INT4_KERNEL,
    INT8_KERNEL,
    Int8Embedding,
    Q8Embedding,
    QuantLinear,
    kernel_available,
    quantize_int4,
    quantize_int8,
    recover_q4_1,
    recover_q8_0,
)
from orin_llm.runtime.head import Q8Head


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


@pytest.mark.full
def test_engine_draft_is_quantized_and_smaller(engine, engine_fp):
    draft = engine.load_draft()
    quant = [m for n, m in draft.named_modules() if isinstance(m, QuantLinear) and "layers" in n]
    assert len(quant) == 4 * engine.model.arch.num_layers  # qkv, o, gate_up, down per layer
    draft_bytes = sum(m.nbytes for m in quant)
    target = [m for n, m in engine_fp.model.named_modules()
              if isinstance(m, (torch.nn.Linear, PackedLinear)) and "layers" in n]
    assert len(target) == len(quant)
    fp_bytes = sum(m.in_features * m.out_features * 4 for m in target)
    assert draft_bytes < fp_bytes / 3.5


@pytest.mark.full
def test_draft_agrees_with_target_on_most_greedy_tokens(engine):
    ids = torch.tensor(engine.chat_ids([{"role": "user", "content": "List four rooms of a house."}]))
    outs = [model(ids, engine.contiguous_cache(len(ids), draft=model is engine.load_draft()),
                  num_logits=len(ids)).argmax(-1) for model in (engine.model, engine.load_draft())]
    assert (outs[0] == outs[1]).float().mean() >= 0.8


def test_packed_int8_kernel_matches_the_dequantized_weight():
    """The draft's int8 layers run torch's packed weight-only kernel on CPUs (bf16 activations), where the
    kernel plan runs no q8_dot: the same linear map, to bf16's precision."""
    w, x = torch.randn(48, 64), torch.randn(5, 64)
    lin = QuantLinear(*quantize_int8(w), torch.float32)
    reference = F.linear(x, lin.dequantize())
    assert lin.pack(use_q8_dot=False) and lin.packed_scales is not None
    out = lin(x)
    assert out.dtype == torch.float32 and out.shape == reference.shape
    assert torch.allclose(out, reference, rtol=2e-2, atol=2e-2 * reference.abs().max().item())
    int4 = QuantLinear(*quantize_int4(w, 16), torch.float32)
    assert not int4.pack(use_q8_dot=False)  # groups of 16 are not a size the int4 kernel takes: it dequantizes per call


@pytest.mark.full
def test_engine_draft_layers_run_packed_on_cpu(engine, engine_fp):
    """Every int8 layer of the draft on a packed kernel (q8_dot's where it builds), its tied head too:
    one int8 matrix for the lm_head and the input embedding (rows dequantized on lookup), a quarter of
    the fp32 bytes."""
    draft = engine.load_draft()
    quant = [m for m in draft.modules() if isinstance(m, QuantLinear)]
    assert quant and all(m.packed for m in quant)
    assert all(m.q8 is not None for m in quant) == (q8_dot.op() is not None)
    head, emb = draft.lm_head, draft.embed_tokens
    assert isinstance(head, QuantLinear) and isinstance(emb, Int8Embedding)
    ids = torch.tensor([0, 5, 49151])
    assert torch.equal(emb(ids), head.int8_rows(ids).float() * head.scales[ids, None])  # the same matrix
    fp = engine_fp.model.embed_tokens.weight
    assert torch.allclose(emb(ids), fp[ids], atol=fp[ids].abs().amax().item() / 127)  # within half a step
    assert head.nbytes == fp.numel() + 4 * fp.shape[0]  # 1 byte instead of 4, and a float32 scale a row


def _q4_1_weight(out: int, inp: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A weight made as llama.cpp's Q4_1 makes one, dequantized as gguf does (fp16 scale and min per
    32 weights, d * q + m in float32): codes [out, inp], scales and mins [out, inp/32], the weight."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(out, inp // 32, 32, generator=gen)
    mn, mx = x.amin(-1), x.amax(-1)
    d = ((mx - mn) / 15).half().float()
    m = mn.half().float()
    q = torch.clamp(torch.floor((x - mn[..., None]) / ((mx - mn) / 15)[..., None] + 0.5), 0, 15)
    return q.view(out, inp), d, m, (d[..., None] * q + m[..., None]).view(out, inp)


def test_q4_1_blocks_are_recovered_bit_for_bit():
    codes, d, m, w = _q4_1_weight(48, 128)
    packed, scales, mins = recover_q4_1(w)
    assert packed.dtype == torch.uint8 and packed.shape == (48, 64)
    assert torch.equal(scales, d) and torch.equal(mins, m)
    lin = QuantLinear(packed, scales, torch.float32, mins)
    assert torch.equal(lin.dequantize(), w)  # the very values transformers loads


def test_q8_0_blocks_are_recovered_bit_for_bit():
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(8, 64, generator=gen).view(8, 2, 32)
    d = (x.abs().amax(-1) / 127).half().float()
    w = (torch.round(x / d[..., None]).clamp(-127, 127) * d[..., None]).view(8, 64)
    codes, scales = recover_q8_0(w)
    assert codes.dtype == torch.int8 and torch.equal(scales, d)
    assert torch.equal(Q8Embedding(codes, scales, torch.float32)(torch.arange(8)), w)
    with pytest.raises(OrinError, match="not Q8_0"):
        recover_q8_0(torch.randn(8, 64))


def test_weights_that_are_not_q4_1_are_refused_with_what_to_do():
    with pytest.raises(OrinError, match='not Q4_1 values.*weights = "fp32"'):
        recover_q4_1(torch.randn(16, 64), "layers.0.mlp.down_proj.weight")
    with pytest.raises(OrinError, match="not whole Q4_1 blocks"):
        recover_q4_1(torch.randn(16, 48))


@pytest.mark.parametrize("asymmetric", [True, False])
def test_packed_int4_kernel_is_the_dequantized_weight_and_row_independent(asymmetric):
    """Q4_1 (scale·q + min) and the symmetric int4 format on torch's int4 kernel: the same linear map as
    the dequantized weight to bf16's precision, and each row's result independent of the rows beside
    it (what keeps a speculative verify bit-exact: llama.py)."""
    if asymmetric:
        packed, scales, mins = recover_q4_1(_q4_1_weight(64, 128)[3])
        lin = QuantLinear(packed, scales, torch.float32, mins)
    else:
        lin = QuantLinear(*quantize_int4(torch.randn(64, 128), 32), torch.float32)
    w, x = lin.dequantize(), torch.randn(9, 128)
    reference = F.linear(x, w)
    bytes_before = lin.nbytes
    assert lin.pack(use_q8_dot=False) and lin.int4 is not None and lin.kernel == INT4_KERNEL
    out = lin(x)
    assert out.dtype == torch.float32 and out.shape == reference.shape
    assert torch.allclose(out, reference, rtol=2e-2, atol=2e-2 * reference.abs().max().item())
    assert all(torch.equal(lin(x[:n]), out[:n]) for n in range(1, 9))
    # the codes are held once, in the kernel's layout, with a bf16 scale and zero per group: never
    # more bytes than before (Q4_1's two float32 numbers per group become two bf16 ones)
    assert lin.nbytes <= bytes_before and (lin.nbytes < bytes_before) == asymmetric
    with pytest.raises(OrinError, match="not kept"):
        lin.dequantize()


@pytest.mark.full
def test_engine_target_runs_its_gguf_q4_1_blocks_packed(engine, engine_fp):
    """The embedded engine's target keeps the GGUF's Q4_1 blocks: its linear layers run q8_dot's
    kernel, or torch's int4 kernel where that does not build (the manifest names torch's, the
    floor), at under a fifth of the float32 bytes, and its kernels are row-independent, so exact
    decoding needs no padding. The input embedding is the GGUF's Q8_0
    blocks (the very float values on lookup), and the tied lm_head runs over the same codes (int8
    with exact greedy choices, head.py; float32 where no int8 kernel is)."""
    target = engine.manifest.target
    assert target.weights == "q4_1" and target.kernels == [INT4_KERNEL]
    layers = [m for n, m in engine.model.named_modules() if isinstance(m, QuantLinear) and "layers" in n]
    assert len(layers) == 4 * engine.model.arch.num_layers and all(m.packed for m in layers)
    assert all((m.q8 if q8_dot.op() is not None else m.int4) is not None for m in layers)
    head = engine.model.lm_head
    assert isinstance(head, Q8Head if kernel_available(INT8_KERNEL, "cpu") else PackedLinear)
    emb, fp = engine.model.embed_tokens, engine_fp.model.embed_tokens.weight
    assert isinstance(emb, Q8Embedding) and emb.nbytes < fp.numel() * 4 / 3.5
    ids = torch.tensor([0, 5, 1000, 49151])
    assert torch.equal(emb(ids), fp[ids])
    assert engine.model.plan.rows_independent
    fp = [m for n, m in engine_fp.model.named_modules() if isinstance(m, PackedLinear) and "layers" in n]
    assert sum(m.nbytes for m in layers) < sum(m.in_features * m.out_features * 4 for m in fp) / 5


@pytest.mark.full
def test_q4_1_target_agrees_with_its_float_export(engine, engine_fp):
    """Quantized activations in the linear layers (int8 in q8_dot, bf16 in torch's kernels) against
    the float32 reference, teacher-forced on the
    reference's own greedy text: the next token agrees at most positions (measured: 95.6 %,
    docs/notes/benchmarks-lab-notes.md); a kernel fed the wrong layout agrees at almost none."""
    from orin_llm.runtime.sampling import SamplingParams

    agree = total = 0
    for prompt in ("List four rooms of a house.", "Give me a short plan to water the plants."):
        ids = engine_fp.chat_ids([{"role": "user", "content": prompt}])
        ref = engine_fp.run(engine_fp.generate(ids, SamplingParams(max_tokens=32), "none")).token_ids
        seq = torch.tensor(ids + ref)
        tops = [eng.model(seq, eng.contiguous_cache(len(seq)), num_logits=len(ref)).argmax(-1)
                for eng in (engine, engine_fp)]
        agree += int((tops[0] == tops[1]).sum())
        total += len(ref)
    assert agree / total >= 0.85


@pytest.mark.full
def test_a_cpu_without_the_int4_kernel_is_refused_with_the_way_out(engine_dir, monkeypatch):
    """Invariant 5: no silent fallback. An engine whose manifest names a kernel this torch lacks is
    refused on a CPU, saying which and what to do; its float32 export still loads."""
    from orin_llm.runtime import weights
    from orin_llm.runtime.engine import Engine

    monkeypatch.setattr(weights, "kernel_available", lambda kernel, device: kernel != INT4_KERNEL)
    with pytest.raises(OrinError, match=r"_weight_int4pack_mm_for_cpu.*--weights fp32"):
        Engine.load(engine_dir, device="cpu", draft=False)
    fp = Engine.load(engine_dir, device="cpu", draft=False, weights="fp32")
    assert not any(isinstance(m, QuantLinear) for m in fp.model.modules())
    with pytest.raises(OrinError, match="holds 'q4_1' weights"):
        Engine.load(engine_dir, device="cpu", draft=False, weights="int8_wo")
