"""Shared fixtures: the embedded default engine, built once per session through the real CLI (the
full tier only: `pytest -m full`), and a tiny random-weight engine of the same kind for the fast tier.

Tiers (README, "Tests"): `make test` runs `pytest -m "not full"`; `make test-all` runs everything. A
test module that needs a real model's outputs (plans that parse, the transformers reference, the
docs' commands, daemons on the real engine, bench scenarios) says `pytestmark = pytest.mark.full`. One
whose tests only need an engine that runs (cache, scheduler, speculation losslessness, batching, the
ops against torch's) swaps in the tiny one under the same names, one line each (tiny_fixture below):
    tiny_engine = tiny_fixture("engine")
A fast-tier test that still reaches the real engine fails at collection, saying which
(pytest_collection_modifyitems below).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# Triton reads TRITON_INTERPRET when a kernel is defined, i.e. when a module of orin_llm.kernels.triton is
# first imported, whichever test directory imports it first (tests/bench does, before tests/kernels):
# without a GPU the kernels' tests run in its interpreter (tests/kernels/conftest.py).
try:
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
except ImportError:
    pass

# The TensorRT-LLM tests' fake/real fixtures (`bindings`, `eng`), for the test modules of every directory
# that test the backend (tests/runtime, tests/server, tests/bench, tests/build)
pytest_plugins = ["tests.backends.trtllm.trtllm_both"]

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session", autouse=True)
def private_state_home(tmp_path_factory):
    """Daemons keep their state by default (server/state_dir.py): one started without --state-dir, by a
    test or a docs block, keeps it under this session's directory, never in the user's."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("state-home")))
        mp.delenv("STATE_DIRECTORY", raising=False)
        yield


def orin_llm(*args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run the real console entry point in a subprocess."""
    proc = subprocess.run([sys.executable, "-m", "orin_llm.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    if check and proc.returncode != 0:
        raise AssertionError(f"orin-llm {' '.join(args)} -> {proc.returncode}\n{proc.stderr[-3000:]}")
    return proc


# A Llama of the embedded default's kind (head_dim 64 as our ops need, grouped KV heads, the same
# tokenizer and its 30 layers, so tests that name a layer keep their meaning) narrow enough to write
# and load in seconds: a hidden size of 256; the draft is its first 20 layers.
TINY_CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256, "head_dim": 64,
               "intermediate_size": 512, "num_attention_heads": 4, "num_key_value_heads": 2,
               "num_hidden_layers": 30, "vocab_size": 49152, "tie_word_embeddings": True, "rms_norm_eps": 1e-5,
               "rope_theta": 100000.0, "max_position_embeddings": 16384, "torch_dtype": "bfloat16"}
# K and V of a random model with weights of std 0.02 over a unit-RMS hidden state of 256 have a
# std of about 0.3: this scale holds +-4 of it without clipping and steps of 1/127 of that
TINY_KV_SCALE = 1.28 / 127
REAL_ENGINE_FIXTURES = ("engine_dir",)
# a dir holding the embedded default's exported tokenizer (tokenizer.json, its chat template and
# generation_config.json), used instead of exporting it from the GGUF where that package is missing
TOKENIZER_VARIABLE = "ORIN_LLM_TEST_TOKENIZER"


@pytest.fixture(scope="session")
def tiny_engine_dir(tmp_path_factory) -> Path:
    """Random Q4_1 weights (orin_llm/bench/shaped.py), the embedded default's tokenizer (from its
    GGUF), fixed INT8 KV scales, a draft model and the embedded profile's limits; its outputs are noise."""
    import json

    from orin_llm.bench.shaped import write_shaped_engine
    from orin_llm.build.convert import export_tokenizer, load_hf_tokenizer
    from orin_llm.build.source import resolve_source
    from orin_llm.profile import embedded_profile

    root = tmp_path_factory.mktemp("tiny")
    given = os.environ.get(TOKENIZER_VARIABLE)
    if given:  # an exported tokenizer dir (a GPU machine without the GGUF package: bench/gpu_check.sh)
        import shutil

        shutil.copytree(given, root / "tokenizer")
    else:
        tokenizer = load_hf_tokenizer(resolve_source(embedded_profile().target.model))
        export_tokenizer(tokenizer, root / "tokenizer")
        (root / "tokenizer" / "generation_config.json").write_text(json.dumps(
            {"bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id}))
    (root / "tiny").mkdir()
    (root / "tiny" / "config.json").write_text(json.dumps(TINY_CONFIG))
    return write_shaped_engine(root / "tiny" / "config.json", root / "engine", root / "tokenizer",
                               kv_scale=TINY_KV_SCALE, draft_layers=20)


@pytest.fixture(scope="session")
def tiny_engine(tiny_engine_dir):
    from orin_llm.runtime.engine import Engine

    return Engine.load(tiny_engine_dir, device="cpu")


def _tiny_engine_dir(tiny_engine_dir):
    return tiny_engine_dir


def _tiny_engine(tiny_engine):
    return tiny_engine


_TINY = {"engine_dir": _tiny_engine_dir, "engine": _tiny_engine}


def tiny_fixture(name: str):
    """A fixture called `name` ("engine" or "engine_dir") that hands on the session's one tiny engine.
    A module assigns it at its top level, `tiny_engine = tiny_fixture("engine")`, and its tests and
    fixtures get the tiny engine under the name they already use (a module's fixture comes before
    conftest's)."""
    return pytest.fixture(scope="session", name=name)(_TINY[name])


def pytest_collection_modifyitems(config, items):
    """A fast-tier test (not marked full) that reaches the real engine would build it (many minutes):
    refuse it at collection and name it, so the tiers stay what the README says."""
    wrong = []
    for item in items:
        if item.get_closest_marker("full") is not None:
            continue
        info = getattr(item, "_fixtureinfo", None)
        defs = info.name2fixturedefs if info is not None else {}
        for name in REAL_ENGINE_FIXTURES:
            func = defs[name][-1].func if name in defs else None  # the one this test gets
            if func is not None and (func.__module__, func.__name__) == (__name__, name):
                wrong.append(item.nodeid)
    if wrong:
        raise pytest.UsageError(
            "these tests are not marked full but use the real engine (mark their module with "
            "`pytestmark = pytest.mark.full`, or swap in the tiny engine: tests/conftest.py):\n  "
            + "\n  ".join(wrong))


@pytest.fixture(scope="session")
def engine_dir(tmp_path_factory, request) -> Path:
    # the collection guard sees fixtures a test names; this catches one asked for by name at run time
    if "not full" in (request.config.getoption("markexpr") or ""):
        pytest.fail("a test outside the full tier asked for the real engine: mark it full (tests/conftest.py)")
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


# ORIN_LLM_FAKE_STRICT=1: every test's fake loads holding the GIL this long (an Orin load takes far longer: the
# switch is about the daemon's threads stopping, not about the figure).
STRICT_LOAD_HOLDS_GIL_S = 0.2


@pytest.fixture
def fake():
    """TensorRT-LLM's executor bindings replaced by the fake at the import boundary
    (tests/backends/trtllm/fake_trtllm.py)."""
    from orin_llm.backends.trtllm.bindings import set_executor_module
    from tests.backends.trtllm import fake_trtllm

    fake_trtllm.reset()
    if os.environ.get("ORIN_LLM_FAKE_STRICT") == "1":  # as slow and as fragile as 0.12 (the fake's switches)
        fake_trtllm.ITERATION_S = fake_trtllm.SLOW_ITERATION_S
        fake_trtllm.FULL_BLOCKS_ONLY = True
        fake_trtllm.LOAD_HOLDS_GIL_S = STRICT_LOAD_HOLDS_GIL_S
    previous = set_executor_module(fake_trtllm)
    yield fake_trtllm
    set_executor_module(previous)
    fake_trtllm.reset()
