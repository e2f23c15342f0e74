"""The decode GEMV family (kernels/triton/decode_gemv.py) in Triton's interpreter (or on a GPU): its
prepacked layout against the Q4_1 format, its products against reference.py, every row bit-equal to the
same row in a call of any other row count from 1 to 72, the residual added in the epilogue as torch
rounds it, one kernel a call. (PTX: test_triton_decode_gemv_ptx.py.)"""

from __future__ import annotations

import pytest
import torch

from orin_llm.kernels.triton import decode_gemv as dg
from orin_llm.kernels.triton import reference
from tests.kernels.paged import TOLERANCE
from tests.kernels.test_triton_q4_linear import q4_1_blocks

SMALL = dg.DecodeConfig(block_n=16, block_k=64, num_warps=2)  # tiles smaller than the shapes below


def _packed(n: int, k: int, device: str, seed: int = 0):
    qweight, scales, mins = q4_1_blocks(n, k, seed=seed)
    return (qweight, scales, mins), dg.decode_pack(qweight.to(device), scales.to(device), mins.to(device))


def close(y: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype) -> None:
    err = (y.float() - ref.float()).abs().max().item()
    assert err <= TOLERANCE[dtype] * ref.abs().max().item(), f"max error {err:.3g} ({dtype})"


def test_the_layout_is_the_format():
    """Word i of output n holds weights (n, 8i + j) in bits 4j..4j+3; a word per group holds its fp16
    scale (low half) and min (high half), exactly."""
    (qweight, scales, mins), p = _packed(6, 96, "cpu", seed=2)
    codes = torch.stack((qweight & 0xF, qweight >> 4), dim=-1).view(6, 96).long()
    assert p.codes.dtype == torch.int32 and p.codes.shape == (6, 12) and (p.in_features, p.out_features) == (96, 6)
    for n, k in [(0, 0), (1, 7), (2, 8), (3, 45), (5, 95)]:
        word = int(p.codes[n, k // 8]) & 0xFFFFFFFF
        assert (word >> (4 * (k % 8))) & 0xF == int(codes[n, k])
    low = (p.scale_min & 0xFFFF).to(torch.int16).view(torch.float16)
    high = (p.scale_min >> 16).to(torch.int16).view(torch.float16)
    assert torch.equal(low.float(), scales) and torch.equal(high.float(), mins)
    with pytest.raises(ValueError, match="Q4_1 blocks"):
        dg.decode_pack(qweight, scales[:, :1], mins)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_matches_the_dequantized_weight(device, dtype):
    """Outputs not a multiple of the tile (24 over 16), 5 groups over steps of 2 (the last step short)."""
    (qweight, scales, mins), p = _packed(24, 160, device, seed=1)
    x = torch.randn(3, 160, generator=torch.Generator().manual_seed(1)).to(device, dtype)
    y = dg.decode_gemv(x, p, SMALL)
    assert y.dtype == dtype and y.shape == (3, 24)
    close(y, reference.int4_linear(x, qweight.to(device), scales.to(device), mins.to(device)), dtype)
    assert dg.decode_gemv(x, p, SMALL, out_dtype=torch.float32).dtype == torch.float32


@pytest.mark.parametrize("dtype, counts", [(torch.float16, (*range(1, 9), 9, 17, 33, 71)), (torch.float32, (1, 2, 5))])
def test_every_row_is_bit_equal_whatever_the_call_s_row_count(device, dtype, counts):
    """A call of 72 rows against calls of 1 to 8 rows, of a spread up to 71, and of rows 40 to 71 alone:
    each row's bits are the same (the decode and verify buckets' rows: batch invariance). (float32: a few
    counts, the interpreter's minutes being the fast tier's.)"""
    (qweight, scales, mins), p = _packed(16, 96, device, seed=3)
    x = torch.randn(72, 96, generator=torch.Generator().manual_seed(3)).to(device, dtype)
    full = dg.decode_gemv(x, p, SMALL)
    close(full, reference.int4_linear(x, qweight.to(device), scales.to(device), mins.to(device)), dtype)
    for rows in counts:
        assert torch.equal(dg.decode_gemv(x[:rows], p, SMALL), full[:rows]), f"{rows} rows"
    assert torch.equal(dg.decode_gemv(x[40:], p, SMALL), full[40:])


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.bfloat16])
def test_the_epilogue_adds_the_residual_as_torch_rounds_it(device, dtype):
    """y = round(round(x @ W.T) + residual): the unfused step's `h + o_proj(a)` in x's type."""
    _, p = _packed(24, 96, device, seed=4)
    g = torch.Generator().manual_seed(4)
    x, r = torch.randn(5, 96, generator=g).to(device, dtype), torch.randn(5, 24, generator=g).to(device, dtype)
    plain = dg.decode_gemv(x, p, SMALL)
    y = dg.decode_gemv(x, p, SMALL, residual=r)
    want = plain + r  # (torch: widened to float32, added, rounded once)
    if dtype == torch.bfloat16 and device == "cpu":
        # the 3.9 interpreter rounds float32 to bfloat16 otherwise than a GPU (and torch): within one ulp
        close(y, want, dtype)
    else:
        assert torch.equal(y, want)


def test_one_kernel_a_call(monkeypatch):
    """Whatever the rows, with or without the residual: one launch, a program per BLOCK_N outputs and
    every input (no partial sums over K, so no second kernel to add them)."""
    launches = []

    class Recorder:
        def __getitem__(self, grid):
            return lambda *args, **kw: launches.append((grid, kw))

    monkeypatch.setattr(dg, "_decode_gemv", Recorder())
    _, p = _packed(40, 96, "cpu")
    for rows in (1, 9, 72):
        launches.clear()
        dg.decode_gemv(torch.randn(rows, 96), p, SMALL)
        dg.decode_gemv(torch.randn(rows, 96), p, SMALL, residual=torch.randn(rows, 40))
        assert [grid for grid, _ in launches] == [(3,), (3,)]
        assert [kw["HAS_RES"] for _, kw in launches] == [False, True]


def test_bad_input():
    _, p = _packed(8, 64, "cpu")
    with pytest.raises(ValueError, match="inputs"):
        dg.decode_gemv(torch.randn(1, 32), p)
    with pytest.raises(ValueError, match="residual"):
        dg.decode_gemv(torch.randn(2, 64), p, residual=torch.randn(2, 7))
    with pytest.raises(ValueError, match="power of two"):
        dg.DecodeConfig(block_n=12)
