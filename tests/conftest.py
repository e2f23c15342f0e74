"""Shared fixtures: the embedded default engine, built once per session through the real CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def orin_llm(*args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run the real console entry point in a subprocess."""
    proc = subprocess.run([sys.executable, "-m", "orin_llm.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    if check and proc.returncode != 0:
        raise AssertionError(f"orin-llm {' '.join(args)} -> {proc.returncode}\n{proc.stderr[-3000:]}")
    return proc


@pytest.fixture(scope="session")
def engine_dir(tmp_path_factory) -> Path:
    reuse = os.environ.get("ORIN_LLM_TEST_ENGINE")  # a local shortcut: an engine built by this checkout
    if reuse:
        return Path(reuse)
    out = tmp_path_factory.mktemp("engines") / "embedded"
    proc = orin_llm("build", "--embedded", "--out", str(out))
    assert proc.stdout.strip() == str(out)
    return out


@pytest.fixture(scope="session")
def engine(engine_dir):
    from orin_llm.runtime.engine import Engine

    return Engine.load(engine_dir, device="cpu")


@pytest.fixture(scope="session")
def engine_fp(engine_dir):
    """The same engine with its float32 weights (the Q4_1 blocks dequantized, as transformers loads
    them), a full-precision KV cache and no draft: the reference configuration."""
    from orin_llm.runtime.engine import Engine

    return Engine.load(engine_dir, device="cpu", kv_cache="fp32", draft=False, weights="fp32")


@pytest.fixture(scope="session")
def hf_model(engine_dir):
    """transformers' own Llama on the very same exported weights: the reference."""
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(engine_dir / "target"), dtype=torch.float32).eval()


@pytest.fixture
def fake():
    """TensorRT-LLM's executor bindings replaced by the fake at the import boundary (tests/runtime/fake_trtllm.py)."""
    from orin_llm.runtime.trtllm_bindings import set_executor_module
    from tests.runtime import fake_trtllm

    fake_trtllm.reset()
    previous = set_executor_module(fake_trtllm)
    yield fake_trtllm
    set_executor_module(previous)
    fake_trtllm.reset()
