"""bench/gpu_check.sh's plumbing on a CPU (--cpu-smoke, tiny shapes): the stages run, write one JSON
with their results and what ran (the commit the command gave, the source's digest), a stage that fails
records its error while the others still run, missing wheels end a GPU run before anything slow, and the
hard limit still leaves the JSON. The figures are the script's business on a GPU, not this test's."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orin_llm.bench.gpu_stamp import source_digest

ROOT = Path(__file__).resolve().parents[2]


def _tokenizer(tmp_path: Path) -> Path:
    """An exported tokenizer dir, as bench/gpu_check.sh carries in .whl/tokenizer."""
    carried = ROOT / ".whl" / "tokenizer"
    if (carried / "tokenizer.json").is_file():
        return carried
    import json as js

    from orin_llm.build.convert import export_tokenizer, load_hf_tokenizer
    from orin_llm.build.source import resolve_source
    from orin_llm.profile import embedded_profile

    out = tmp_path / "tokenizer"
    tok = load_hf_tokenizer(resolve_source(embedded_profile().target.model))
    export_tokenizer(tok, out)
    (out / "generation_config.json").write_text(js.dumps({"bos_token_id": tok.bos_token_id,
                                                          "eos_token_id": tok.eos_token_id}))
    return out


def test_the_gpu_check_runs_its_stages_on_tiny_shapes_and_writes_one_json(tmp_path):
    out = tmp_path / "out" / "gpu_check.json"
    # (speculation and the home: minutes here; the transformers baselines: test_gpu_hf.py, in-process)
    stages = ("env,bandwidth,engine_write,load_int4,decode_int4,decode_4k,decode_constrained,decode_unfused,"
              "decode_batches,roofline,broken")
    proc = subprocess.run(
        ["bash", "bench/gpu_check.sh", str(out), "--cpu-smoke", "--work", str(tmp_path / "work"),
         "--tokenizer", str(_tokenizer(tmp_path)), "--stages", stages],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHON": sys.executable, "OUT": str(tmp_path), "ORIN_LLM_COMMIT": "abc1234"})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    data = json.loads(out.read_text())
    s = data["stages"]
    assert data["mode"] == "cpu-smoke" and set(s) == set(stages.split(",")) - {"broken"}
    assert all(st["ok"] for st in s.values()), {k: v.get("error") for k, v in s.items()}
    assert s["env"]["device"] == "cpu" and s["bandwidth"]["gb_per_s"] > 0
    assert s["decode_int4"]["batch_1"]["tokens"] > 0
    for b in (4, 8):
        assert s["decode_batches"][f"batch_{b}"]["tokens"] > 0
    assert "skipped" in s["decode_unfused"]  # (a CPU plan has no fused step ops: it says why)
    assert s["roofline"]["total_bytes"] > s["roofline"]["weights_bytes"] > s["roofline"]["head_bytes"] > 0
    assert data["goals"]["batch1_fraction_of_roofline"] == s["roofline"]["fraction_of_roofline"] >= 0
    assert s["roofline"]["decode_int4_fraction"] == s["roofline"]["fraction_of_roofline"]
    assert data["goals"]["batch1_fraction_of_read_roofline"] == s["roofline"]["fraction_of_read_roofline"] > 0
    # three repeats each, the median reported
    for stage in ("decode_int4", "decode_4k", "decode_constrained"):
        b1 = s[stage]["batch_1"]
        assert len(b1["repeats"]) == 3 and b1["tok_per_s_per_request"] == statistics.median(b1["repeats"])
    assert s["decode_4k"]["context"] == 256 and s["decode_4k"]["over_short_context"] > 0
    assert s["decode_constrained"]["batch_1"]["tokens"] >= 4 and s["decode_constrained"]["step_over_plain"] > 0
    assert data["goals"]["constrained_step_over_plain"] == s["decode_constrained"]["step_over_plain"]
    p = data["provenance"]
    assert p["commit"] == "abc1234" and p["source_sha256"] == source_digest()
    assert data["gated"] == {}
    assert "[gpu] done" in proc.stdout


def test_a_stage_that_fails_records_why_and_the_json_is_still_written(tmp_path):
    out = tmp_path / "gpu_check.json"
    proc = subprocess.run(
        ["bash", "bench/gpu_check.sh", str(out), "--cpu-smoke", "--work", str(tmp_path / "work"),
         "--tokenizer", str(tmp_path / "no-tokenizer"), "--stages", "env,engine_write"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHON": sys.executable})
    assert proc.returncode == 1
    s = json.loads(out.read_text())["stages"]
    assert s["env"]["ok"] and not s["engine_write"]["ok"]
    assert "no-tokenizer" in s["engine_write"]["error"]


def test_missing_wheels_end_a_gpu_run_at_once_saying_which(tmp_path):
    wheels = tmp_path / "whl"
    (wheels / "tokenizer").mkdir(parents=True)
    (wheels / "tokenizer" / "tokenizer.json").write_text("{}")
    listed = [ln for ln in (ROOT / "bench" / "gpu_wheels.txt").read_text().splitlines()
              if ln and not ln.startswith("#")]
    for name in listed[1:]:  # all but the first
        (wheels / f"{name}-py3-none-any.whl").write_bytes(b"")
    t = time.perf_counter()
    proc = subprocess.run(["bash", "bench/gpu_check.sh", str(tmp_path / "out.json")], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PYTHON": sys.executable,
                                                      "ORIN_LLM_WHEELS": str(wheels)})
    assert time.perf_counter() - t < 2.0  # (before any Python starts)
    assert proc.returncode == 3 and f"missing in {wheels}/: {listed[0]} " in proc.stdout
    assert not (tmp_path / "out.json").exists()


@pytest.mark.full  # waits out a 12 s hard limit: full tier
def test_the_hard_limit_still_leaves_the_json_with_its_goals(tmp_path):
    out = tmp_path / "gpu_check.json"
    proc = subprocess.run(
        ["bash", "bench/gpu_check.sh", str(out), "--cpu-smoke", "--work", str(tmp_path / "work"),
         "--tokenizer", str(_tokenizer(tmp_path)), "--stages", "env,engine_write,load_int4,decode_int4,hf"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHON": sys.executable, "GPU_CHECK_HARD_S": "12"})
    assert proc.returncode == 124, proc.stdout[-2000:] + proc.stderr[-2000:]  # (timeout's: the limit ended it)
    data = json.loads(out.read_text())
    assert "goals" in data and data["stages"]["env"]["ok"] and data["elapsed_s"] < 15
    assert "ended by signal 15" in proc.stdout + proc.stderr


def test_the_json_is_on_disk_after_every_stage(tmp_path):
    from orin_llm.bench.gpu_run import Run

    run = Run(tmp_path / "run.json", 60, smoke=True)
    seen = []

    def second() -> dict:
        seen.append(json.loads(run.out.read_text())["stages"])
        return {"b": 2}

    run.stage("first", lambda: {"a": 1}, 0)
    run.stage("failing", lambda: 1 / 0, 0)
    run.stage("second", second, 0)
    assert seen[0]["first"]["a"] == 1 and "ZeroDivisionError" in seen[0]["failing"]["error"]
    assert json.loads(run.out.read_text())["stages"]["second"]["b"] == 2
