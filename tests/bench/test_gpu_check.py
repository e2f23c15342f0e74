"""bench/gpu_check.sh's plumbing on a CPU (--cpu-smoke, tiny shapes): the stages run, write one JSON
with their results, and a stage that fails records its error while the others still run. The figures
are the script's business on a GPU, not this test's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

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
    # (speculation and the home: minutes here)
    stages = "env,bandwidth,engine_write,load_int4,decode_int4,decode_unfused,decode_batches,roofline,broken"
    proc = subprocess.run(
        ["bash", "bench/gpu_check.sh", str(out), "--cpu-smoke", "--work", str(tmp_path / "work"),
         "--tokenizer", str(_tokenizer(tmp_path)), "--stages", stages],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHON": sys.executable, "OUT": str(tmp_path)})
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
    assert s["roofline"]["total_bytes"] > s["roofline"]["weights_bytes"] > 0
    assert data["goals"]["batch1_fraction_of_roofline"] == s["roofline"]["fraction_of_roofline"] >= 0
    assert s["roofline"]["decode_int4_fraction"] == s["roofline"]["fraction_of_roofline"]
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
