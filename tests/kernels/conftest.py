"""The Triton kernels' tests run in Triton's interpreter on the CPU where there is no GPU
(TRITON_INTERPRET=1, which triton reads when a kernel is defined: set here, before any test module
imports orin_llm.kernels.triton's kernels). With a CUDA GPU they compile and run on it instead."""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from tests.kernels.paged import device_name  # noqa: E402  (after the variable: it imports no triton, but reads it)


@pytest.fixture
def device() -> str:
    return device_name()
