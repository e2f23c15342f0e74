"""First contact's stage 4 (orin_llm/doctor/ladder.py): the feature ladder's commands, and a real walk that
stops at the first rung that fails with that rung's log in the run's folder."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from orin_llm.doctor.ladder import main, steps

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "jetson" / "profiles" / "agx-orin-64gb.toml"


def test_each_rung_serves_its_engine_with_its_features(tmp_path):
    s = steps(PROFILE, tmp_path / "engines" / "agx-orin-64gb", tmp_path / "run")
    assert [x.engine.name for x in s] == ["agx-orin-64gb-plain"] + ["agx-orin-64gb-reuse"] * 3 + ["agx-orin-64gb"] * 2
    assert all(x.profile.is_file() for x in s)
    serve = s[3].serve("py", "/tmp/s.sock")
    assert serve[serve.index("--trtllm-features") + 1] == "block_reuse,chunked_context,grammar"
    assert "--unconstrained" in s[2].smoke("py", "/tmp/s.sock") and "--unconstrained" not in s[3].smoke("py", "x")
    assert s[5].smoke("py", "x")[-2:] == ["--speculation", "draft_model"]
    assert s[0].folder == tmp_path / "run" / "ladder" / "1-plain"


def test_a_walk_stops_at_the_first_rung_that_fails_with_its_log(tmp_path, capsys):
    """Off the Orin the plain engine's build fails (no checkpoint, no TensorRT-LLM): the walk stops there, the
    build's log in the rung's folder, no later rung started."""
    code = main(["--profile", str(PROFILE), "--engine", str(tmp_path / "e" / "agx-orin-64gb"), "--out",
                 str(tmp_path / "run")])
    out = capsys.readouterr().out
    assert code == 1
    assert "rung 1 (plain) failed: the build of" in out and "next: no rung passed" in out
    log = tmp_path / "run" / "ladder" / "1-plain" / "build.log"
    assert log.is_file() and log.read_text().strip()
    assert sorted(p.name for p in (tmp_path / "run" / "ladder").iterdir()) == ["1-plain"]


def test_the_dry_run_names_every_rung():
    proc = subprocess.run([sys.executable, "-m", "orin_llm.doctor.ladder", "--profile", str(PROFILE), "--engine",
                           "engines/agx-orin-64gb", "--out", "fc", "--dry-run"], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rungs = [ln.split(":")[0] for ln in proc.stdout.splitlines() if ln.startswith("rung ")]
    assert rungs == ["rung 1/6 plain", "rung 2/6 block reuse", "rung 3/6 chunked context",
                     "rung 4/6 grammar post-processor", "rung 5/6 lookup", "rung 6/6 1B draft"]
    assert proc.stdout.count("orin-llm build") == 3  # one build per engine, not per rung
