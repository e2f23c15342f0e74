"""The Edge-LLM backend's tests share an engine directory: the tiny engine's tokenizer and shape under an
"edgellm" manifest (what the export writes is checked for real in tests/build/test_edgellm_export.py)."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from orin_llm.manifest import MANIFEST, file_entry, load_manifest
from tests.conftest import tiny_fixture

tiny_engine_dir = tiny_fixture("engine_dir")


@pytest.fixture(scope="module")
def edge_dir(tiny_engine_dir, tmp_path_factory) -> Path:
    """An "edgellm" engine directory of the tiny engine's tokenizer and shape (the manifest's own schema)."""
    out = tmp_path_factory.mktemp("edge") / "engine"
    shutil.copytree(tiny_engine_dir / "tokenizer", out / "tokenizer")
    tiny = load_manifest(tiny_engine_dir)
    data = json.loads((tiny_engine_dir / MANIFEST).read_text())
    data.update(backend="edgellm", draft=None, lookup_seed=None,
                tokenizer=[file_entry(p, out).model_dump() for p in sorted((out / "tokenizer").iterdir())],
                limits={**tiny.limits, "max_batch_size": 2}, edgellm={"server_argv": ["tensorrt-edgellm-serve"]})
    data["profile"] = {**data["profile"], "backend": "edgellm", "prefix_reuse": True}
    data["target"] = {**data["target"], "files": [], "dir": "onnx/llm"}
    (out / MANIFEST).write_text(json.dumps(data))
    return out


def drive(engine, request, limit_s: float = 30.0) -> list[str]:
    """Submit `request` and step the engine until it ends: the text deltas it gave, in order."""
    engine.submit(request)
    deltas, t0 = [], time.monotonic()
    while not request.done:
        engine.step()
        deltas += request.take()
        assert time.monotonic() - t0 < limit_s, "the request never ended"
    return deltas + request.take()
