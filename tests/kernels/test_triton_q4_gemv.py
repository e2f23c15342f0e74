"""q4_gemv (decode's INT4 GEMV) over q4_repack'ed Q4_1 blocks against the blocks dequantized
(w = scale·code + min): 1 to 16 rows and past one M tile, shapes that are not multiples of the tile
(outputs, packed rows, groups), uneven input splits, the scales and mins in float16 or in the
activations' dtype, and rows independent of the other rows of the call."""

from __future__ import annotations

import pytest
import torch

from orin_llm.kernels.triton import q4_gemv, q4_repack, reference
from orin_llm.kernels.triton.int4_gemv import CANDIDATES, GemvConfig
from tests.kernels.paged import TOLERANCE
from tests.kernels.test_triton_q4_linear import q4_1_blocks

SMALL = GemvConfig(block_n=32, block_r=32, num_warps=2, num_stages=1)  # tiles smaller than the shapes below


def close(y: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype) -> None:
    err = (y.float() - ref).abs().max().item()
    assert err <= TOLERANCE[dtype] * ref.abs().max().item(), f"max error {err:.3g} ({dtype})"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 9, 16])
def test_matches_the_dequantized_weight(device, dtype, rows):
    n, k = 72, 160  # 72 outputs: not a multiple of 32; 80 packed rows: not of 32; 5 groups
    qweight, scales, mins = q4_1_blocks(n, k, seed=rows)
    p = q4_repack(qweight.to(device), scales.to(device), mins.to(device))
    x = torch.randn(rows, k, generator=torch.Generator().manual_seed(rows)).to(device, dtype)
    y = q4_gemv(x, p, SMALL)
    assert y.dtype == dtype and y.shape == (rows, n)
    close(y, reference.int4_linear(x, qweight.to(device), scales.to(device), mins.to(device)), dtype)


@pytest.mark.parametrize("split_k", [2, 3, 7])
def test_split_k_and_rows_past_one_tile(device, split_k):
    """Uneven input ranges (3 steps of 32 packed rows over 80: the last short; more splits than steps),
    and 20 rows (two M tiles): each row's sums equal the same row computed alone, bit for bit."""
    qweight, scales, mins = q4_1_blocks(40, 160, seed=3)
    p = q4_repack(qweight.to(device), scales.to(device), mins.to(device))
    x = torch.randn(20, 160, generator=torch.Generator().manual_seed(5)).to(device, torch.float16)
    y = q4_gemv(x, p, SMALL, split_k=split_k, out_dtype=torch.float32)
    assert y.dtype == torch.float32
    close(y, reference.int4_linear(x, qweight.to(device), scales.to(device), mins.to(device)), torch.float16)
    for i in (0, 17):
        assert torch.equal(y[i:i + 1], q4_gemv(x[i:i + 1], p, SMALL, split_k=split_k, out_dtype=torch.float32))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_scales_in_the_activations_dtype(device, dtype):
    """Scales and mins repacked in x's dtype (the dequantization by bits on a GPU): the blocks' values
    up to the scales' rounding; negative mins and a zero scale (a constant block) included."""
    qweight, scales, mins = q4_1_blocks(48, 128, seed=4)
    scales[3, 1] = 0.0
    p = q4_repack(qweight.to(device), scales.to(device), mins.to(device), dtype=dtype)
    x = torch.randn(4, 128, generator=torch.Generator().manual_seed(6)).to(device, dtype)
    close(q4_gemv(x, p, SMALL, split_k=2),
          reference.int4_linear(x, qweight.to(device), scales.to(device), mins.to(device)), dtype)


def test_every_candidate_and_leading_dims(device):
    """The configs the load-time micro-benchmark tries, on a shape smaller than their tiles."""
    qweight, scales, mins = q4_1_blocks(64, 256, seed=8)
    p = q4_repack(qweight.to(device), scales.to(device), mins.to(device))
    x = torch.randn(2, 3, 256, generator=torch.Generator().manual_seed(9)).to(device)
    ref = reference.int4_linear(x, qweight.to(device), scales.to(device), mins.to(device))
    for cfg in CANDIDATES:
        y = q4_gemv(x, p, cfg, split_k=cfg.split_k(64, 256, sms=2))
        assert y.shape == (2, 3, 64)
        close(y, ref, torch.float32)


def test_split_for_a_layer():
    """split_k from the layer's shape alone: enough programs for the GPU, never a range under one step."""
    cfg = GemvConfig(block_n=64, block_r=128, waves=4, max_split=16)
    assert cfg.split_k(5120, 3072, sms=132) == 7  # 80 tiles; 12 steps of 128 packed rows
    assert cfg.split_k(16384, 3072, sms=132) == 3
    assert cfg.split_k(64, 256, sms=132) == 1  # one step of inputs: nothing to split
    assert cfg.split_k(64, 8192, sms=132) == 16  # capped
    with pytest.raises(ValueError, match="multiple of 16"):
        GemvConfig(block_r=24)


def test_bad_input(device):
    qweight, scales, mins = q4_1_blocks(8, 64)
    p = q4_repack(qweight.to(device), scales.to(device), mins.to(device))
    with pytest.raises(ValueError, match="inputs"):
        q4_gemv(torch.randn(1, 32, device=device), p)
    with pytest.raises(ValueError, match="split_k"):
        q4_gemv(torch.randn(1, 64, device=device), p, split_k=0)
    with pytest.raises(ValueError, match="int8|float16"):
        q4_gemv(torch.ones(1, 64, dtype=torch.int8, device=device), p)


def test_the_choice_refuses_with_reasons_off_cuda():
    """cuda_linear.choose_int4 off a GPU: no candidate runs, each says why; a bad kernel name is refused."""
    from orin_llm.kernels.cuda_linear import choose_int4
    from orin_llm.kernels.quant import QuantLinear

    qweight, scales, mins = q4_1_blocks(64, 128)
    q = QuantLinear(qweight, scales, torch.float32, mins)
    layer, why, choice = choose_int4(q, torch.bfloat16, 9)
    assert layer is None and choice is None
    assert "int4pack: not a CUDA device (cpu)" in why and "gemv_n64_r128_w4_s3: not a CUDA device" in why
    assert "family_n8_k512_w4: not a CUDA device" in why
    layer, why, _ = choose_int4(q, torch.bfloat16, 9, "family")
    assert layer is None and why.count("not a CUDA device") == 4 and "gemv" not in why and "int4pack" not in why
    with pytest.raises(ValueError, match="one of auto, int4pack, gemv, tiled, family"):
        choose_int4(q, torch.bfloat16, 9, "fastest")
