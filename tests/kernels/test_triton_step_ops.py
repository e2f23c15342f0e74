"""The decode step's fused small ops (kernels/triton/step_ops.py) against the unfused torch ops the
step runs without them (reference.py: llama.RMSNorm and the residual add, Attention.forward_static's
RoPE and KVPool.write, F.silu(gate) * up), in every dtype, INT8 and float caches, odd sizes."""

from __future__ import annotations

import pytest
import torch

from orin_llm.kernels.triton import reference
from orin_llm.kernels.triton.step_ops import add_rms_norm, rope_write, silu_mul

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
ULP = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}  # relative: about one rounding


def tables(positions: int, d: int):
    inv = 1.0 / (10000.0 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    emb = torch.cat([torch.outer(torch.arange(positions, dtype=torch.float32), inv)] * 2, dim=-1)
    sin = emb.sin()
    sin[:, : d // 2].neg_()
    return emb.cos()[:, None, :], sin[:, None, :]


def truncating(device, dtype) -> bool:
    """Triton 3.9's interpreter converts float32 to bfloat16 by truncation, not to nearest as a GPU and
    torch do: there bf16 results are compared within a rounding only."""
    return device == "cpu" and dtype == torch.bfloat16


def near(got, want, dtype, device, exact_share=0.95):
    """Within one rounding everywhere, and bit-equal in most elements (the same ops, in the same order
    but the mean's reduction)."""
    got, want = got.float(), want.float()
    assert torch.allclose(got, want, rtol=ULP[dtype], atol=ULP[dtype] * want.abs().max().item())
    if not truncating(device, dtype):
        assert (got == want).float().mean().item() >= exact_share


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("add", [False, True])
def test_add_rms_norm(device, dtype, add):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(5, 96, generator=g).to(device, dtype)  # 96: not a power of two
    delta = torch.randn(5, 96, generator=g).to(device, dtype) if add else None
    w = (1 + 0.1 * torch.randn(96, generator=g)).to(device, dtype)
    x_new, h = add_rms_norm(x, w, 1e-5, delta)
    want_x, want_h = reference.add_rms_norm(x, w, 1e-5, delta)
    assert h.dtype == want_h.dtype
    if truncating(device, dtype):
        near(x_new, want_x, dtype, device)
    else:
        assert torch.equal(x_new, want_x)  # the add rounds as torch's
    near(h, want_h, dtype, device)
    if not add:
        assert x_new is x


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("int8", [True, False])
def test_rope_write(device, dtype, int8):
    heads, kv, d, t, slots_n = 4, 2, 32, 6, 64
    g = torch.Generator().manual_seed(2)
    qkv = (2 * torch.randn(t, (heads + 2 * kv) * d, generator=g)).to(device, dtype)
    positions = torch.tensor([0, 5, 17, 17, 40, 3], device=device)
    cos, sin = (c.to(device) for c in tables(64, d))
    slots = torch.tensor([7, 12, 33, 34, 63, 0], device=device)
    cache_dtype = torch.int8 if int8 else torch.float16
    caches = [torch.zeros(kv, slots_n, d, dtype=cache_dtype, device=device) for _ in range(4)]
    scales = (torch.tensor([0.02, 0.05], device=device), torch.tensor([0.03, 0.01], device=device)) if int8 \
        else (None, None)
    q = rope_write(qkv, positions, cos, sin, caches[0], caches[1], slots, heads, kv, *scales)
    want = reference.rope_write(qkv, positions, cos, sin, caches[2], caches[3], slots, heads, kv, *scales)
    assert q.shape == (t, heads, d) and q.dtype == dtype
    if truncating(device, dtype):
        near(q, want, dtype, device)
    else:
        assert torch.equal(q, want)  # every product and sum rounded where torch rounds it
    for got, ref in ((caches[0], caches[2]), (caches[1], caches[3])):
        if int8:
            # the same codes but at a tie; the interpreter's truncated bf16 k moves a code by its rounding
            apart, share = (3, 0.7) if truncating(device, dtype) else (1, 0.99)
            assert (got.int() - ref.int()).abs().max().item() <= apart and (got == ref).float().mean() > share
            assert got.abs().max().item() == 127  # the clamp ran (|x| / 0.01 > 127 somewhere)
        elif truncating(device, dtype):
            near(got, ref, torch.bfloat16, device)
        else:
            assert torch.equal(got, ref)
    untouched = torch.ones(slots_n, dtype=torch.bool)
    untouched[slots.cpu()] = False
    assert not caches[0][:, untouched.to(device)].any()  # nothing written past the given slots


@pytest.mark.parametrize("dtype", DTYPES)
def test_silu_mul(device, dtype):
    gu = (3 * torch.randn(3, 2 * 1100, generator=torch.Generator().manual_seed(3))).to(device, dtype)  # two blocks
    near(silu_mul(gu), reference.silu_mul(gu), dtype, device, exact_share=0.75)  # (exp: another library's)


def test_bad_shapes(device):
    x = torch.randn(2, 8, device=device)
    with pytest.raises(ValueError, match="weight"):
        add_rms_norm(x, torch.ones(4, device=device), 1e-5)
    with pytest.raises(ValueError, match="2·I"):
        silu_mul(torch.randn(2, 7, device=device))
    kc = torch.zeros(2, 8, 16, dtype=torch.int8, device=device)
    with pytest.raises(ValueError, match="k_scale"):
        rope_write(torch.randn(1, 8 * 16, device=device), torch.zeros(1, dtype=torch.long, device=device),
                   *tables(4, 16), kc, kc.clone(), torch.zeros(1, dtype=torch.long, device=device), 4, 2)
    with pytest.raises(ValueError, match="heads"):
        rope_write(torch.randn(1, 7 * 16, device=device), torch.zeros(1, dtype=torch.long, device=device),
                   *tables(4, 16), kc, kc.clone(), torch.zeros(1, dtype=torch.long, device=device), 4, 2,
                   torch.ones(2, device=device), torch.ones(2, device=device))
