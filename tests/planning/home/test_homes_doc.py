"""docs/HOMES.md's example runs as written and prints what the doc says it prints; the home the doc
shows first is the home the example writes. (tests/test_docs.py runs the same block in bash with
the engine, in the `full` tier; this runs its two heredocs directly, in the fast tier.)"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "HOMES.md"


def _fences(kind: str) -> list[str]:
    return re.findall(rf"^```{kind}\n(.*?)^```$", DOC.read_text(), re.S | re.M)


def _example() -> str:
    """The bash block that writes the example's home and runs it (the doc's other blocks are one-liners)."""
    (block,) = [b for b in _fences("bash") if "cat > flat.yaml <<'EOF'" in b]
    return block


def test_the_example_prints_what_the_doc_says(tmp_path) -> None:
    block = _example()
    files = dict(re.findall(r"^cat > (\S+) <<'EOF'\n(.*?)^EOF$", block, re.S | re.M))
    (script,) = re.findall(r"^\.venv/bin/python - <<'EOF'\n(.*?)^EOF$", block, re.S | re.M)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "-"], input=script, cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    (printed,) = _fences("text")
    assert run.stdout == printed


def test_the_home_shown_is_the_home_the_example_writes() -> None:
    shown = yaml.safe_load(_fences("yaml")[0])
    block = _example()
    written = re.search(r"^cat > flat.yaml <<'EOF'\n(.*?)^EOF$", block, re.S | re.M)
    assert written and yaml.safe_load(written.group(1)) == shown
