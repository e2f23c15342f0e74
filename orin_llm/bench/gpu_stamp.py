"""What a GPU run ran, stamped into its JSON (orin_llm/bench/gpu.py): the commit, a digest of the source
tree, and the carried wheels.

Why a digest: the device machine gets a copy of the working tree, and a copy may carry a stale .git (the
runs of issue 36 named a commit they did not run: c042bad-dirty). The commit is taken from
ORIN_LLM_COMMIT where the command sets it (the command is written where git is), else from git as
before, marked as such; the digest of the source files is computed from the files themselves, so
`python -m orin_llm.bench.gpu_stamp` on a checkout says whether it is the tree that ran.

    python -m orin_llm.bench.gpu_stamp            # this tree's digest and commit
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
COMMIT_VARIABLE = "ORIN_LLM_COMMIT"
SOURCE_DIRS = ("orin_llm", "bench", "tests", "jetson/models")
SOURCE_SUFFIXES = (".py", ".sh", ".toml", ".json", ".cpp", ".h", ".txt")


def source_files(root: Path = ROOT) -> list[Path]:
    """The files the digest covers: SOURCE_DIRS' files with SOURCE_SUFFIXES, caches and builds aside."""
    out = []
    for d in SOURCE_DIRS:
        for f in (root / d).rglob("*"):
            rel = f.relative_to(root)
            if f.is_file() and f.suffix in SOURCE_SUFFIXES and not any(
                    p == "__pycache__" or p.startswith(".") or p == "_native" for p in rel.parts):
                out.append(f)
    return sorted(out, key=lambda f: f.relative_to(root).as_posix())


def source_digest(root: Path = ROOT) -> str:
    """sha256 over each source file's path and bytes, in path order."""
    h = hashlib.sha256()
    for f in source_files(root):
        h.update(f.relative_to(root).as_posix().encode() + b"\0")
        h.update(hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def wheels(folder: Path) -> list[dict[str, Any]]:
    """The carried wheels (name and sha256 each; the name holds the version) and the tokenizer's file."""
    if not folder.is_dir():
        return []
    out = [{"file": w.name, "sha256": file_sha256(w)} for w in sorted(folder.glob("*.whl"))]
    tok = folder / "tokenizer" / "tokenizer.json"
    if tok.is_file():
        out.append({"file": "tokenizer/tokenizer.json", "sha256": file_sha256(tok)})
    return out


def stamp(root: Path = ROOT, wheel_dir: Path | None = None) -> dict[str, Any]:
    """The run's provenance for its JSON."""
    from .common import checkout_commit

    given = os.environ.get(COMMIT_VARIABLE, "").strip()
    return {"commit": given or None,
            "commit_from": f"{COMMIT_VARIABLE} (set by the command)" if given else
            "not given: set ORIN_LLM_COMMIT in the command (a copied tree's .git may be stale)",
            "git_describe_here": checkout_commit(),
            "source_sha256": source_digest(root),
            "wheels": wheels(wheel_dir or root / ".whl")}


if __name__ == "__main__":
    print(f"source_sha256 {source_digest()}")
    from .common import checkout_commit

    print(f"commit {checkout_commit()}")
    sys.exit(0)
