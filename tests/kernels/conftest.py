"""The Triton kernels' tests run in Triton's interpreter on the CPU where there is no GPU
(TRITON_INTERPRET=1, which triton reads when a kernel is defined: set by tests/conftest.py, before any
directory's tests import orin_llm.kernels.triton). With a CUDA GPU they compile and run on it instead.

The interpreter computes `tl.dot` as numpy's matmul, i.e. numpy's BLAS (OpenBLAS). Its AVX2 sgemm
kernels (the Haswell and Zen ones OpenBLAS picks on a CPU without AVX-512) give a row of a tile
different bits depending on where the row sits in the tile; its AVX-512 kernels and a GPU's dot
(each output an FMA chain or a tensor-core MMA over the same K order, wherever its row is) do not.
The kernels' bit-exactness claims (a prompt's K/V the same however it was chunked:
test_triton_chunked_prefill.py) rest on that property of the hardware's dot, not on BLAS tiling, so
here each row of a dot is computed on its own (`row_wise_dot`): the same numbers on every CPU.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from tests.kernels.paged import device_name


def row_wise_dot(a: np.ndarray, b: np.ndarray, dtype) -> np.ndarray:
    """a [.., M, K] @ b [.., K, N] with every row of a in its own 1-row product (a batch of M matmuls
    of one row each): a row's result depends on that row and b only, not on its place in the tile."""
    return np.matmul(a[..., :, None, :], b[..., None, :, :], dtype=dtype)[..., 0, :]


def _interpret_row_wise() -> None:
    try:
        from triton.runtime import interpreter
    except ImportError:  # no triton here: the tests that need it skip
        return

    builder = interpreter.InterpreterBuilder
    if getattr(builder.create_dot, "row_wise", False):
        return
    plain = builder.create_dot

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        if a.data.ndim < 2 or (a.dtype.primitive_bitwidth == 8 and a.dtype.is_floating()) or \
                (b.dtype.primitive_bitwidth == 8 and b.dtype.is_floating()):
            return plain(self, a, b, d, input_precision, max_num_imprecise_acc)  # (fp8: the interpreter's own path)
        out = row_wise_dot(a.data, b.data, d.data.dtype) + d.data
        return interpreter.TensorHandle(out, d.dtype.scalar)

    create_dot.row_wise = True
    builder.create_dot = create_dot


if os.environ.get("TRITON_INTERPRET") == "1":
    _interpret_row_wise()


@pytest.fixture
def device() -> str:
    return device_name()
