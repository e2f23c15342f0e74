"""bench/grammar_callback.py (the grammar post-processor's per-token parts, docs/trtllm-0.12-jetson.md §13)
runs on a CPU-only machine: every part but the device copy measured, the callbacks masked without an error,
the copy left null where there is no GPU (jetson/first-contact.sh measures it on the Orin)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import tiny_fixture

ROOT = Path(__file__).resolve().parents[2]
engine_dir = tiny_fixture("engine_dir")  # a tokenizer and a manifest are all it reads


def test_the_script_measures_every_host_part_and_leaves_the_copy_to_a_gpu(engine_dir, tmp_path):
    out = tmp_path / "g.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "grammar_callback.py"), "--engine", str(engine_dir),
                           "--positions", "8", "--width", "1000", "--out", str(out)], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    d = json.loads(out.read_text())
    assert d["logits_width"] == 1000 and d["device"] == "cpu"
    assert all(d["parts"][k]["n"] == 8 for k in ("matcher", "unpack", "forbid", "fill"))
    assert d["parts"]["copy_pageable"] is None and d["parts"]["copy_pinned"] is None
    for run in ("alone", "next_to_a_busy_python_thread"):
        assert d[run]["callback"]["n"] == 8 and d[run]["callback"]["median_ms"] > 0
    assert d["next_to_a_busy_python_thread"]["other_thread_longest_stall_ms"] > 0
