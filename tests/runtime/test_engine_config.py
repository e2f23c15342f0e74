"""The engine's one config (runtime/engine_config.py): filled at the edge, where the environment is read once,
and handed whole to Engine.load, which reads no environment itself."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from orin_llm.errors import OrinError
from orin_llm.runtime.engine import Engine
from orin_llm.runtime.engine_config import PREFILL_CHUNK_TOKENS, EngineConfig
from orin_llm.runtime.kernel_plan import KernelSwitches
from tests.conftest import tiny_fixture

tiny_engine_dir = tiny_fixture("engine_dir")
ROOT = Path(__file__).resolve().parents[2]


def test_the_edge_reads_the_switches_and_the_chunk_and_what_is_given_wins():
    env = {"ORIN_LLM_INT8_ATTN": "0", "ORIN_LLM_PREFILL_CHUNK": "64", "ORIN_LLM_COMPILE": "1"}
    c = EngineConfig.at_edge(env, device="cpu", threads=None)
    assert c.device == "cpu" and c.threads is None and c.prefill_chunk_tokens == 64
    assert not c.switches.int8_attention and c.switches.torch_compile and c.switches.q8_dot
    given = EngineConfig.at_edge(env, prefill_chunk_tokens=32, switches=KernelSwitches())
    assert given.prefill_chunk_tokens == 32 and given.switches == KernelSwitches()
    assert EngineConfig.at_edge({}) == EngineConfig() and EngineConfig().prefill_chunk_tokens == PREFILL_CHUNK_TOKENS


def test_a_bad_setting_says_which_and_what_to_give():
    with pytest.raises(OrinError, match="ORIN_LLM_PREFILL_CHUNK='lots': give a positive whole number"):
        EngineConfig.at_edge({"ORIN_LLM_PREFILL_CHUNK": "lots"})
    with pytest.raises(OrinError, match="kv_tokens=0"):
        EngineConfig(kv_tokens=0)
    with pytest.raises(TypeError, match="no field draft_len"):
        EngineConfig.at_edge({}, draft_len=4)


def test_the_engine_reads_no_environment(tiny_engine_dir, monkeypatch):
    """The switches a variable sets reach an engine only through the edge's config."""
    monkeypatch.setenv("ORIN_LLM_INT8_ATTN", "0")
    monkeypatch.setenv("ORIN_LLM_PREFILL_CHUNK", "48")
    plain = Engine.load(tiny_engine_dir, device="cpu", draft=False)
    assert plain.prefill_chunk_tokens == PREFILL_CHUNK_TOKENS
    assert "ORIN_LLM_INT8_ATTN" not in str(plain.kernels()["int8_decode_attention"])
    edge = Engine.load(tiny_engine_dir, EngineConfig.at_edge(device="cpu", draft=False))
    assert edge.prefill_chunk_tokens == 48
    assert edge.kernels()["int8_decode_attention"] == "turned off (ORIN_LLM_INT8_ATTN=0)"
    with pytest.raises(TypeError, match="a config or its fields, not both: draft"):
        Engine.load(tiny_engine_dir, EngineConfig(), draft=False)


# What may still read the process's environment below the edge, and why: none of them an engine setting.
ALLOWED = {
    "orin_llm/runtime/engine_config.py": "at_edge: the edge's own reader",
    "orin_llm/runtime/host.py": "writes oneDNN's and ideep's cache defaults, which those libraries read",
    "orin_llm/runtime/weights.py": "glibc's own malloc variables, to leave a user's setting alone",
    "orin_llm/kernels/native.py": "which build of our ops the process loads (ORIN_LLM_KERNELS), once per process",
    "orin_llm/kernels/triton/common.py": "Triton's own TRITON_INTERPRET",
}


def test_below_the_edge_no_module_reads_the_environment_but_the_listed():
    readers = set()
    for path in sorted((ROOT / "orin_llm").glob("**/*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if not rel.startswith(("orin_llm/runtime/", "orin_llm/kernels/")):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv") and \
                    isinstance(node.value, ast.Name) and node.value.id == "os":
                readers.add(rel)
    assert readers == set(ALLOWED), sorted(readers ^ set(ALLOWED))
