"""orin_llm.kernels.triton's surface: importing it loads no triton (a CPU daemon never pays for it), and
its functions stay its functions once their kernel modules are loaded (a submodule named like a
function would replace it on the package at its first import)."""

from __future__ import annotations

import inspect
import subprocess
import sys

import torch

import orin_llm.kernels.triton as kt
from tests.conftest import ROOT

API = ("available", "paged_decode_attention", "paged_prefill_attention", "q4_repack", "quantize_q4_1", "int4_linear",
       "int8_head")


def test_import_loads_no_triton():
    code = "import sys, orin_llm.kernels.triton; print('triton' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "False"


def test_functions_survive_their_modules(device):
    qweight = torch.zeros(16, 32, dtype=torch.uint8, device=device)
    p = kt.q4_repack(qweight, torch.ones(16, 2, device=device), torch.zeros(16, 2, device=device))
    x = torch.ones(1, 64, device=device)
    for _ in range(2):  # the second call goes through the package attribute after the modules loaded
        assert torch.all(kt.int4_linear(x, p) == 0)
        assert torch.all(kt.int8_head(x, torch.ones(4, 64, dtype=torch.int8, device=device),
                                      torch.ones(4, device=device)) == 64)
    for name in API:
        assert inspect.isfunction(getattr(kt, name)), f"orin_llm.kernels.triton.{name} is no longer the function"
    assert kt.available() is None
