"""Kernel timings with the weights cold in L2 (orin_llm/kernels/cuda_timing.py): how many copies of a layer,
copies with tensors of their own computing the same thing, and the bytes a layer holds counted once. The
timing itself needs CUDA (bench/gpu_check.sh's int4_kernel stage and the load-time choice run it)."""

from __future__ import annotations

import torch

from orin_llm.kernels.cuda_linear import TritonQ8Head
from orin_llm.kernels.cuda_timing import COLD_FACTOR, MAX_COPIES, cold_copies, copies_needed, module_bytes

MB = 1 << 20


def test_enough_copies_that_two_l2_sizes_pass_between_calls_of_one():
    l2 = 50 * MB
    for nbytes in (MB, 3 * MB, 7 * MB, 25 * MB, 99 * MB, 100 * MB, 400 * MB):
        n = copies_needed(nbytes, l2)
        assert n * nbytes >= COLD_FACTOR * l2 or n == MAX_COPIES
        assert n == 1 or (n - 1) * nbytes < COLD_FACTOR * l2  # (no more copies than that takes)
    assert copies_needed(400 * MB, l2) == 1  # a layer past two L2 sizes evicts its own start
    assert copies_needed(1024, l2) == MAX_COPIES
    assert copies_needed(0, l2) == copies_needed(MB, 0) == 1


def test_copies_hold_their_own_tensors_and_compute_the_same():
    lin = torch.nn.Linear(256, 512, bias=False)
    copies = cold_copies(lin, l2_bytes=2 * MB)  # 512 KiB a copy: 8 copies pass 2 · 2 MiB
    assert copies[0] is lin and len(copies) == copies_needed(module_bytes(lin), 2 * MB) == 8
    assert len({c.weight.data_ptr() for c in copies}) == 8
    x = torch.randn(3, 256)
    for c in copies[1:]:
        assert torch.equal(c(x), lin(x))


def test_a_layer_s_bytes_count_list_held_tensors_once():
    codes = torch.zeros(100, 64, dtype=torch.int8)
    head = TritonQ8Head(codes, torch.ones(100, 2, dtype=torch.float16))
    assert module_bytes(head) == 100 * 64 + 100 * 2 * 2
    head.codes.append(codes)  # (held twice: still one tensor's bytes)
    assert module_bytes(head) == 100 * 64 + 100 * 2 * 2
    copy = cold_copies(head, l2_bytes=module_bytes(head))[1]
    assert copy.codes[0].data_ptr() != codes.data_ptr() and torch.equal(copy.codes[0], codes)
