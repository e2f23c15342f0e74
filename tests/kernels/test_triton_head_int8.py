"""int8_head against the codes times their scales: per-row scales (quant.quantize_int8, as the CPU head's
int8 pass) and per-32-block scales (a GGUF's Q8_0 matrix, quant.recover_q8_0's), float32 logits."""

from __future__ import annotations

import pytest
import torch

from orin_llm.kernels.quant import quantize_int8, recover_q8_0
from orin_llm.kernels.triton import int8_head, reference
from tests.kernels.paged import TOLERANCE

V, K = 100, 96  # a vocabulary that is not a multiple of block_n, an input of 3 blocks of 32


def q8_0_matrix(seed: int = 0) -> torch.Tensor:
    """Float weights that are Q8_0 values (code · fp16 scale, ±127 in every block)."""
    g = torch.Generator().manual_seed(seed)
    codes = torch.randint(-126, 127, (V, K), generator=g).float()
    codes.view(V, K // 32, 32)[..., 0] = 127
    scales = (0.001 + 0.01 * torch.rand(V, K // 32, generator=g)).half().float()
    return codes * scales.repeat_interleave(32, 1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("per", ["row", "block"])
def test_matches_reference(device, dtype, per):
    if per == "row":
        q, s = quantize_int8(torch.randn(V, K, generator=torch.Generator().manual_seed(1)) * 0.05)
    else:
        w = q8_0_matrix()
        q, s = recover_q8_0(w)
        assert torch.equal(reference.int8_head(torch.eye(K), q, s), w.T)  # the reference's weights are the GGUF's
    q, s = q.to(device), s.to(device)
    x = torch.randn(5, K, generator=torch.Generator().manual_seed(2)).to(device, dtype)
    logits = int8_head(x, q, s)
    assert logits.dtype == torch.float32 and logits.shape == (5, V)
    ref = reference.int8_head(x, q, s)
    err = (logits - ref).abs().max().item()
    assert err <= TOLERANCE[dtype] * ref.abs().max().item()
    if dtype == torch.float32:
        assert torch.equal(logits.argmax(-1), ref.argmax(-1))


def test_strided_scales(device):
    """Scales that are a view (a column of a wider tensor) are read as their values, not their storage."""
    q = torch.randint(-127, 128, (V, K), dtype=torch.int8, generator=torch.Generator().manual_seed(4)).to(device)
    wide = torch.rand(V, 3, generator=torch.Generator().manual_seed(5)).to(device) * 0.01
    x = torch.randn(2, K, device=device)
    ref = reference.int8_head(x, q, wide[:, 1])
    assert (int8_head(x, q, wide[:, 1]) - ref).abs().max().item() <= TOLERANCE[torch.float32] * ref.abs().max().item()


def test_bad_scales(device):
    q = torch.zeros(V, K, dtype=torch.int8, device=device)
    with pytest.raises(ValueError, match=r"\[V\] or \[V, K/group\]"):
        int8_head(torch.randn(1, K, device=device), q, torch.ones(V, 5, device=device))
    with pytest.raises(ValueError, match="powers of two from 16"):
        int8_head(torch.randn(1, K, device=device), q, torch.ones(V, 8, device=device))  # blocks of 12
