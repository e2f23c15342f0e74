"""The Triton kernels compiled on a CUDA GPU at a Llama-3.2-3B layer's shapes (24 query heads over 8
KV heads of 128, hidden 3072, MLP 8192) against the torch references, and a decode step's attention
captured in a CUDA graph and replayed with new block tables and lengths. The interpreter tests
(the other files here) cover the same logic on tiny shapes without a GPU."""

from __future__ import annotations

import pytest
import torch

from orin_llm.kernels.triton import (
    int4_linear,
    int8_head,
    paged_decode_attention,
    paged_prefill_attention,
    q4_gemv,
    q4_repack,
    reference,
)
from tests.kernels.paged import TOLERANCE, device_name

pytestmark = pytest.mark.skipif(device_name() != "cuda", reason="needs a CUDA GPU (compiled Triton kernels at a 3B "
                                "model's shapes, CUDA graphs); the interpreter tests cover the logic here")

H, KV, D, BS = 24, 8, 128, 16
NUM_BLOCKS, MAX_BLOCKS = 1024, 128  # 2048-token sequences at most


def int8_pool(seed: int = 0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    k = torch.randint(-127, 128, (KV, NUM_BLOCKS * BS, D), dtype=torch.int8, device="cuda", generator=g)
    v = torch.randint(-127, 128, (KV, NUM_BLOCKS * BS, D), dtype=torch.int8, device="cuda", generator=g)
    ks = 0.005 + 0.02 * torch.rand(KV, device="cuda", generator=g)
    vs = 0.005 + 0.02 * torch.rand(KV, device="cuda", generator=g)
    return k, v, ks.half(), vs.half()


def tables(lengths: list[int], seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randperm(NUM_BLOCKS, generator=g)[:len(lengths) * MAX_BLOCKS].view(len(lengths), MAX_BLOCKS)
    return ids.int().cuda(), torch.tensor(lengths, dtype=torch.int32, device="cuda")


def close(out, ref, dtype):
    err = (out.float() - ref.float()).abs().max().item()
    assert err <= TOLERANCE[dtype] * ref.abs().max().item(), err


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_decode_and_prefill_at_3b_shapes(dtype):
    k, v, ks, vs = int8_pool()
    lens = [1, 16, 17, 1000, 2048, 0]
    bt, sl = tables(lens)
    q = torch.randn(len(lens), H, D, device="cuda", dtype=dtype)
    out = paged_decode_attention(q, k, v, bt, sl, BS, ks, vs)
    close(out, reference.paged_decode_attention(q, k, v, bt, sl, BS, ks, vs), dtype)
    new = [1, 16, 5, 300, 2048, 0]
    q_start = torch.tensor([0] + new, device="cuda").cumsum(0).int()
    qp = torch.randn(int(q_start[-1]), H, D, device="cuda", dtype=dtype)
    outp = paged_prefill_attention(qp, k, v, bt, sl, q_start, BS, ks, vs, max_q_len=max(new))
    close(outp, reference.paged_prefill_attention(qp, k, v, bt, sl, q_start, BS, ks, vs), dtype)


def test_decode_in_a_cuda_graph():
    """Captured once, replayed with other tables and lengths written into the same tensors."""
    k, v, ks, vs = int8_pool(1)
    bt, sl = tables([40, 700, 3, 1500])
    q = torch.randn(4, H, D, device="cuda", dtype=torch.float16)
    out = torch.empty_like(q)
    paged_decode_attention(q, k, v, bt, sl, BS, ks, vs, out=out)  # compiles outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        paged_decode_attention(q, k, v, bt, sl, BS, ks, vs, out=out)
    for seed, lens in [(2, [2048, 1, 0, 64]), (3, [5, 6, 7, 8])]:
        new_bt, new_sl = tables(lens, seed)
        bt.copy_(new_bt)
        sl.copy_(new_sl)
        q.copy_(torch.randn_like(q))
        graph.replay()
        close(out, reference.paged_decode_attention(q, k, v, bt, sl, BS, ks, vs), torch.float16)


@pytest.mark.parametrize("rows", [1, 8, 512])
@pytest.mark.parametrize("shape", [(3072, 3072), (16384, 3072), (3072, 8192)], ids=["o", "gate_up", "down"])
def test_int4_linear_at_3b_shapes(rows, shape):
    n, kdim = shape
    g = torch.Generator(device="cuda").manual_seed(rows)
    codes = torch.randint(0, 16, (n, kdim), dtype=torch.uint8, device="cuda", generator=g)
    qweight = codes[:, 0::2] | (codes[:, 1::2] << 4)
    scales = (0.002 + 0.004 * torch.rand(n, kdim // 32, device="cuda", generator=g)).half().float()
    mins = (-7.5 * scales).half().float()
    p = q4_repack(qweight, scales, mins)
    x = torch.randn(rows, kdim, device="cuda", dtype=torch.bfloat16)
    ref = reference.int4_linear(x, qweight, scales, mins)
    for kwargs in ({}, {"split_k": 4}, {"block_m": 64, "block_n": 128}):
        close(int4_linear(x, p, **kwargs), ref, torch.bfloat16)
    # scales in the activations' dtype: the dequantization by bits (bfloat16 here, float16 by default)
    close(int4_linear(x, q4_repack(qweight, scales, mins, dtype=torch.bfloat16)), ref, torch.bfloat16)
    close(int4_linear(x.half(), p), ref, torch.float16)


@pytest.mark.parametrize("rows", [1, 9, 72])
@pytest.mark.parametrize("shape", [(5120, 3072), (16384, 3072), (3072, 8192)], ids=["qkv", "gate_up", "down"])
def test_q4_gemv_at_3b_shapes(rows, shape):
    """The decode GEMV compiled, every candidate tile at its layer's split, scales in bf16 (the
    dequantization by bits) and in float16; a row's sums equal the row computed alone, bit for bit."""
    from orin_llm.kernels.triton.int4_gemv import CANDIDATES

    n, kdim = shape
    g = torch.Generator(device="cuda").manual_seed(rows)
    codes = torch.randint(0, 16, (n, kdim), dtype=torch.uint8, device="cuda", generator=g)
    qweight = codes[:, 0::2] | (codes[:, 1::2] << 4)
    scales = (0.002 + 0.004 * torch.rand(n, kdim // 32, device="cuda", generator=g)).half().float()
    mins = (-7.5 * scales).half().float()
    bf16 = q4_repack(qweight, scales, mins, dtype=torch.bfloat16)
    x = torch.randn(rows, kdim, device="cuda", dtype=torch.bfloat16)
    ref = reference.int4_linear(x, qweight, scales, mins)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for cfg in CANDIDATES:
        split = cfg.split_k(n, kdim, sms)
        y = q4_gemv(x, bf16, cfg, split)
        close(y, ref, torch.bfloat16)
        assert torch.equal(y[-1:], q4_gemv(x[-1:], bf16, cfg, split))
    close(q4_gemv(x, q4_repack(qweight, scales, mins)), ref, torch.bfloat16)  # float16 scales: float32 dequant


@pytest.mark.parametrize("shape", [(5120, 3072), (16384, 3072), (3072, 8192)], ids=["qkv", "gate_up", "down"])
def test_q4_gemv_family_at_3b_shapes(shape):
    """The decode GEMV family compiled, every candidate tile: 72 rows against the reference, and each row
    bit-equal to the same row in calls of 1 to 8, 9, 17, 33 and 71 rows (the GPU's own arithmetic, where
    the interpreter test has numpy's); the residual epilogue as torch's bf16 add; the prompt GEMM over the
    same bytes against the reference, a chunk's rows the same alone."""
    from orin_llm.kernels.triton.decode_gemv import FAMILY_CANDIDATES, decode_gemv, decode_pack
    from orin_llm.kernels.triton.prompt_gemm import prompt_gemm

    n, kdim = shape
    g = torch.Generator(device="cuda").manual_seed(7)
    codes = torch.randint(0, 16, (n, kdim), dtype=torch.uint8, device="cuda", generator=g)
    qweight = codes[:, 0::2] | (codes[:, 1::2] << 4)
    scales = (0.002 + 0.004 * torch.rand(n, kdim // 32, device="cuda", generator=g)).half().float()
    mins = (-7.5 * scales).half().float()
    p = decode_pack(qweight, scales, mins)
    x = torch.randn(72, kdim, device="cuda", dtype=torch.bfloat16, generator=g)
    ref = reference.int4_linear(x, qweight, scales, mins)
    r = torch.randn(72, n, device="cuda", dtype=torch.bfloat16, generator=g)
    for cfg in FAMILY_CANDIDATES:
        full = decode_gemv(x, p, cfg)
        close(full, ref, torch.bfloat16)
        for rows in (*range(1, 9), 9, 17, 33, 71):
            assert torch.equal(decode_gemv(x[:rows], p, cfg), full[:rows]), f"{cfg.label()}: {rows} rows"
        assert torch.equal(decode_gemv(x, p, cfg, residual=r), full + r), cfg.label()
    chunk = torch.randn(300, kdim, device="cuda", dtype=torch.bfloat16, generator=g)
    y = prompt_gemm(chunk, p)
    close(y, reference.int4_linear(chunk, qweight, scales, mins), torch.bfloat16)
    assert torch.equal(prompt_gemm(chunk[100:], p), y[100:])


def test_step_ops_at_3b_shapes():
    """The decode step's fused small ops compiled, at 9 rows of a 3B layer, against the unfused torch ops."""
    from orin_llm.kernels.triton.step_ops import add_rms_norm, rope_write, silu_mul

    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(9, 3072, device="cuda", generator=g).bfloat16()
    delta = torch.randn(9, 3072, device="cuda", generator=g).bfloat16()
    w = (1 + 0.1 * torch.randn(3072, device="cuda", generator=g)).bfloat16()
    got, want = add_rms_norm(x, w, 1e-5, delta), reference.add_rms_norm(x, w, 1e-5, delta)
    assert torch.equal(got[0], want[0]), "add_rms_norm: the residual sum differs from torch's bf16 add"
    err = (got[1].float() - want[1].float()).abs().max()
    assert err <= 0.02 * want[1].abs().max(), f"add_rms_norm: the norm is {err} off"
    gu = torch.randn(9, 2 * 8192, device="cuda", generator=g).bfloat16()
    # the GPU's exp is not torch's to the last float32 bit, so SiLU(gate) can land a bf16 unit apart, and
    # times `up` that is up to ~0.06 at these magnitudes: bf16's own tolerance, relative
    torch.testing.assert_close(silu_mul(gu), reference.silu_mul(gu), msg=lambda m: f"silu_mul: {m}")
    qkv = torch.randn(9, (H + 2 * KV) * D, device="cuda", generator=g).bfloat16()
    pos = torch.arange(100, 109, device="cuda")
    inv = 1.0 / (500000.0 ** (torch.arange(0, D, 2, device="cuda").float() / D))
    emb = torch.cat([torch.outer(torch.arange(2048, device="cuda").float(), inv)] * 2, -1)
    sin = emb.sin()
    sin[:, : D // 2].neg_()
    cos, sin = emb.cos()[:, None], sin[:, None]
    k, v, ks, vs = int8_pool(3)
    k2, v2 = k.clone(), v.clone()
    slots = torch.randperm(NUM_BLOCKS * BS, device="cuda")[:9]
    q = rope_write(qkv, pos, cos, sin, k, v, slots, H, KV, ks, vs)
    want_q = reference.rope_write(qkv, pos, cos, sin, k2, v2, slots, H, KV, ks, vs)
    assert torch.equal(q, want_q), f"rope_write: q differs in {(q != want_q).sum()} of {q.numel()} elements"
    for name, got, want in (("k", k, k2), ("v", v, v2)):  # round half to even as torch's: a code apart at ties
        diff = (got.int() - want.int()).abs()
        assert diff.max() <= 1 and (got != want).sum() <= 9 * KV * D // 100, \
            f"rope_write: {name} codes differ by up to {diff.max()} in {(got != want).sum()} elements"


def test_int8_head_at_3b_shapes():
    g = torch.Generator(device="cuda").manual_seed(0)
    vocab, hidden = 32768, 3072
    q = torch.randint(-127, 128, (vocab, hidden), dtype=torch.int8, device="cuda", generator=g)
    s = 0.001 + 0.001 * torch.rand(vocab, hidden // 32, device="cuda", generator=g)
    x = torch.randn(4, hidden, device="cuda", dtype=torch.float16)
    close(int8_head(x, q, s), reference.int8_head(x, q, s), torch.float16)
    close(int8_head(x, q, s[:, 0]), reference.int8_head(x, q, s[:, 0]), torch.float16)
