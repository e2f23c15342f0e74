"""The decode family's layer (cuda_triton_q4.TritonQ4Family) and its prompt GEMM (kernels/triton/
prompt_gemm.py) in Triton's interpreter: the GEMM over the same prepacked bytes against reference.py,
a prompt row's bits the same however the prompt is chunked, the residual in its epilogue, and the layer
running the decode family exactly where a decode step calls it (decode_rows), the GEMM elsewhere."""

from __future__ import annotations

import pytest
import torch

from orin_llm.kernels.cuda_triton_q4 import TritonQ4Family, decode_rows, in_decode_rows
from orin_llm.kernels.triton import decode_gemv as dg
from orin_llm.kernels.triton import reference
from orin_llm.kernels.triton.prompt_gemm import prompt_gemm
from tests.kernels.test_triton_decode_gemv import SMALL, _packed, close

TILE = {"block_m": 32, "block_n": 16}  # smaller than the shapes below: several tiles each way


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_matches_the_dequantized_weight_and_chunks_do_not_matter(device, dtype):
    """70 rows over 40 outputs (tiles of 32 x 16, the last ones partial); rows 37.. computed alone, as a
    later chunk of the same prompt: the same bits."""
    (qweight, scales, mins), p = _packed(40, 96, device, seed=5)
    x = torch.randn(70, 96, generator=torch.Generator().manual_seed(5)).to(device, dtype)
    y = prompt_gemm(x, p, **TILE)
    assert y.dtype == dtype and y.shape == (70, 40)
    close(y, reference.int4_linear(x, qweight.to(device), scales.to(device), mins.to(device)), dtype)
    assert torch.equal(prompt_gemm(x[37:], p, **TILE), y[37:])


def test_the_residual_in_the_epilogue(device):
    _, p = _packed(40, 96, device, seed=6)
    g = torch.Generator().manual_seed(6)
    x, r = torch.randn(5, 96, generator=g).to(device, torch.float16), torch.randn(5, 40, generator=g).to(device).half()
    assert torch.equal(prompt_gemm(x, p, residual=r, **TILE), prompt_gemm(x, p, **TILE) + r)


def test_the_layer_runs_the_decode_family_for_a_decode_step_s_rows_only(device):
    (qweight, scales, mins), p = _packed(24, 96, device, seed=7)
    layer = TritonQ4Family(p, SMALL, torch.float16)
    assert layer.nbytes == 24 * 96 // 2 + 24 * 3 * 4  # codes, and a word per group: no second copy
    x = torch.randn(3, 96, generator=torch.Generator().manual_seed(7)).to(device, torch.float16)
    assert not in_decode_rows()
    assert torch.equal(layer(x), prompt_gemm(x, p))
    with decode_rows():
        assert torch.equal(layer(x), dg.decode_gemv(x, p, SMALL))
        r = torch.ones(3, 24, device=device, dtype=torch.float16)
        assert torch.equal(layer(x, r), dg.decode_gemv(x, p, SMALL, residual=r))
    assert not in_decode_rows()


def test_a_graphs_step_runs_as_decode_rows():
    """Llama.fixed_step's step: the fixed-shape step inside decode_rows, and only it."""
    from orin_llm.runtime.llama import _decode_step

    seen = []
    out = _decode_step(lambda inp, pool: seen.append((inp, pool, in_decode_rows())) or "logits", "inp", "pool")
    assert out == "logits" and seen == [("inp", "pool", True)] and not in_decode_rows()
