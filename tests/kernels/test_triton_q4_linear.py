"""int4_linear over q4_repack'ed Q4_1 blocks against the blocks dequantized (w = scale·code + min):
decode-sized and prefill-sized inputs, shapes that are not multiples of the tile, every dtype; and the
repack against the format's definition."""

from __future__ import annotations

import pytest
import torch

from orin_llm.kernels.quant import QuantLinear, recover_q4_1
from orin_llm.kernels.triton import int4_linear, q4_repack, quantize_q4_1, reference
from tests.kernels.paged import TOLERANCE


def q4_1_blocks(n: int, k: int, seed: int = 0):
    """Random Q4_1 blocks as quant.recover_q4_1 gives them (fp16-exact scales and mins, as a GGUF's)."""
    g = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, 16, (n, k), generator=g, dtype=torch.uint8)
    scales = (0.002 + 0.01 * torch.rand(n, k // 32, generator=g)).half().float()
    mins = (-7.5 * scales * (0.5 + torch.rand(n, k // 32, generator=g))).half().float()
    return (codes[:, 0::2] | (codes[:, 1::2] << 4)).contiguous(), scales, mins


def test_repack_layout():
    """Byte (16g + j, n) holds weight (n, 32g + j) low and (n, 32g + 16 + j) high; scales/mins transposed."""
    qweight, scales, mins = q4_1_blocks(8, 64)
    p = q4_repack(qweight, scales, mins)
    codes = torch.stack((qweight & 0xF, qweight >> 4), dim=-1).view(8, 64)
    assert p.codes.shape == (32, 8) and p.codes.dtype == torch.uint8
    for n, kk in [(0, 0), (3, 17), (7, 45), (5, 63)]:
        g, j = divmod(kk, 32)
        byte = int(p.codes[16 * g + j % 16, n])
        assert (byte >> 4 if j >= 16 else byte & 0xF) == int(codes[n, kk])
    assert torch.equal(p.scales.float(), scales.T) and torch.equal(p.mins.float(), mins.T)
    assert (p.in_features, p.out_features) == (64, 8)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 3, 8, 40])
def test_matches_the_dequantized_weight(device, dtype, rows):
    n, k = 72, 160  # 5 groups: not a multiple of block_g's 4; 72 outputs: not of block_n's 64
    qweight, scales, mins = q4_1_blocks(n, k)
    ql = QuantLinear(qweight, scales, torch.float32, mins)  # the CPU runtime's layer over the same blocks
    p = q4_repack(qweight.to(device), scales.to(device), mins.to(device))
    x = torch.randn(rows, k, generator=torch.Generator().manual_seed(rows)).to(device, dtype)
    y = int4_linear(x, p)
    assert y.dtype == dtype and y.shape == (rows, n)
    ref = reference.int4_linear(x, qweight.to(device), scales.to(device), mins.to(device))
    assert torch.allclose(ref.cpu(), ql(x.float().cpu()), rtol=1e-5, atol=1e-5)
    err = (y.float() - ref).abs().max().item()
    assert err <= TOLERANCE[dtype] * ref.abs().max().item()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_scales_in_the_activations_dtype(device, dtype):
    """Repacked with scales in x's dtype (the dequantization by bits on a GPU; float16 is the default):
    the blocks' values up to the scales' rounding."""
    qweight, scales, mins = q4_1_blocks(64, 128, seed=4)
    p = q4_repack(qweight.to(device), scales.to(device), mins.to(device), dtype=dtype)
    assert p.scales.dtype == dtype and p.mins.dtype == dtype
    x = torch.randn(5, 128, generator=torch.Generator().manual_seed(6)).to(device, dtype)
    ref = reference.int4_linear(x, qweight.to(device), scales.to(device), mins.to(device))
    y = int4_linear(x, p)
    assert (y.float() - ref).abs().max().item() <= TOLERANCE[dtype] * ref.abs().max().item()


def test_leading_dims_and_prefill_tile(device):
    qweight, scales, mins = q4_1_blocks(64, 128, seed=2)
    p = q4_repack(qweight.to(device), scales.to(device), mins.to(device))
    x = torch.randn(2, 33, 128, device=device)
    y = int4_linear(x, p, block_m=32, block_n=32, block_g=2)
    ref = reference.int4_linear(x, qweight.to(device), scales.to(device), mins.to(device))
    assert y.shape == (2, 33, 64)
    assert (y - ref).abs().max().item() <= TOLERANCE[torch.float32] * ref.abs().max().item()


@pytest.mark.parametrize("split_k", [2, 3, 8])
def test_split_k(device, split_k):
    """The inputs split in ranges (5 groups: uneven splits, and more splits than steps): the same sums."""
    qweight, scales, mins = q4_1_blocks(72, 160, seed=3)
    p = q4_repack(qweight.to(device), scales.to(device), mins.to(device))
    x = torch.randn(4, 160, device=device, dtype=torch.float16)
    y = int4_linear(x, p, block_g=1, split_k=split_k)
    ref = reference.int4_linear(x, qweight.to(device), scales.to(device), mins.to(device))
    assert y.dtype == torch.float16
    assert (y.float() - ref).abs().max().item() <= TOLERANCE[torch.float16] * ref.abs().max().item()
    # a row's sums do not depend on the other rows of the call (same tile and split)
    batch = int4_linear(x, p, block_g=1, split_k=split_k, out_dtype=torch.float32)
    assert torch.equal(batch[:1], int4_linear(x[:1], p, block_g=1, split_k=split_k, out_dtype=torch.float32))


def test_bad_blocks():
    qweight, scales, mins = q4_1_blocks(8, 64)
    with pytest.raises(ValueError, match="Q4_1 blocks"):
        q4_repack(qweight, scales[:, :1], mins)
    with pytest.raises(ValueError, match="split_k"):
        int4_linear(torch.randn(1, 64), q4_repack(qweight, scales, mins), split_k=0)
    with pytest.raises(ValueError, match="inputs"):
        int4_linear(torch.randn(1, 32), q4_repack(qweight, scales, mins))


def test_quantize_q4_1(device):
    """A float matrix quantized to Q4_1 blocks: recover_q4_1's format (it recovers them bit for bit), each
    weight within half a step of its block, and int4_linear over them gives x times those values."""
    w = torch.randn(48, 96, generator=torch.Generator().manual_seed(7)) * 0.05
    qweight, scales, mins = quantize_q4_1(w)
    deq = reference.q4_1_dequantize(qweight, scales, mins)
    assert torch.equal(scales.half().float(), scales) and torch.equal(mins.half().float(), mins)
    assert torch.all((deq - w).abs() <= scales.repeat_interleave(32, 1) * 0.5 + 1e-3)
    again = recover_q4_1(deq)
    assert all(torch.equal(a, b) for a, b in zip(again, (qweight, scales, mins), strict=True))
    x = torch.randn(2, 96, device=device)
    y = int4_linear(x, q4_repack(qweight.to(device), scales.to(device), mins.to(device)), num_warps=2)
    ref = x @ deq.to(device).T
    assert (y - ref).abs().max().item() <= TOLERANCE[torch.float32] * ref.abs().max().item()
