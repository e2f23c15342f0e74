"""Loading reads an engine's manifest once (backends/loader.py verifies it and hands it on), and the
TensorRT-LLM engine reads each of its engines' config.json once (on the fake executor and on the real
bindings: `bindings`, tests/backends/trtllm/trtllm_both.py)."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

from orin_llm.backends.loader import load_engine
from tests.backends.trtllm.test_trtllm_engine import make_engine_dir
from tests.conftest import tiny_fixture

tiny_engine = tiny_fixture("engine")  # random weights do here (tests/conftest.py)
tiny_engine_dir = tiny_fixture("engine_dir")


@pytest.fixture
def reads(monkeypatch) -> Counter:
    """How many times orin_llm's code read each file as text (the manifest and configs are JSON read
    that way); the fake executor reads config.json itself, as TensorRT-LLM does, and is not counted."""
    counts: Counter = Counter()
    read_text = Path.read_text

    def counted(self, *args, **kwargs):
        if sys._getframe(1).f_globals.get("__name__", "").startswith("orin_llm."):
            counts[self.name if self.name == "manifest.json" else f"{self.parent.name}/{self.name}"] += 1
        return read_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", counted)
    return counts


def test_a_torch_engine_reads_its_manifest_once(engine_dir, reads):
    engine = load_engine(engine_dir, device="cpu", draft=False)
    assert engine.manifest.backend == "torch"
    assert reads["manifest.json"] == 1


def test_a_trtllm_engine_reads_its_manifest_and_configs_once(bindings, request, tmp_path, reads):
    # the real run asks for no torch engine (the fake's takes the tiny one's tokenizer and manifest)
    d = bindings.real_dir or make_engine_dir(request.getfixturevalue("engine_dir"), tmp_path / "trt")
    reads.clear()
    engine = load_engine(d)
    try:
        assert engine.manifest.backend == "trtllm"
        engines = ["target"] + (["draft"] if engine.draft_executor is not None else [])
        if bindings.fake is not None:
            assert engines == ["target", "draft"]  # make_engine_dir's pair: the draft's config counted too
        assert {p: n for p, n in reads.items() if p.endswith(("manifest.json", "/config.json"))} == {
            "manifest.json": 1, **{f"{role}/config.json": 1 for role in engines}}
    finally:
        engine.close()
