"""What a GPU run stamps into its JSON (orin_llm/bench/gpu_stamp.py): a digest that follows the source
files' bytes and paths and nothing else, the commit the command gave, and the carried wheels."""

from __future__ import annotations

from pathlib import Path

from orin_llm.bench import gpu_stamp


def _tree(root: Path) -> None:
    (root / "orin_llm" / "sub").mkdir(parents=True)
    (root / "bench").mkdir()
    (root / "orin_llm" / "a.py").write_text("x = 1\n")
    (root / "orin_llm" / "sub" / "b.py").write_text("y = 2\n")
    (root / "bench" / "run.sh").write_text("echo\n")


def test_the_digest_follows_the_sources_and_nothing_else(tmp_path):
    _tree(tmp_path)
    first = gpu_stamp.source_digest(tmp_path)
    (tmp_path / "orin_llm" / "__pycache__").mkdir()
    (tmp_path / "orin_llm" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0")
    (tmp_path / "orin_llm" / "notes.md").write_text("not a source\n")
    assert gpu_stamp.source_digest(tmp_path) == first
    (tmp_path / "orin_llm" / "a.py").write_text("x = 3\n")
    changed = gpu_stamp.source_digest(tmp_path)
    assert changed != first
    (tmp_path / "orin_llm" / "a.py").write_text("x = 1\n")
    (tmp_path / "orin_llm" / "sub" / "b.py").rename(tmp_path / "orin_llm" / "c.py")  # same bytes, moved
    assert gpu_stamp.source_digest(tmp_path) not in (first, changed)


def test_the_stamp_takes_the_commit_from_the_command_and_lists_the_wheels(tmp_path, monkeypatch):
    _tree(tmp_path)
    wheels = tmp_path / ".whl"
    (wheels / "tokenizer").mkdir(parents=True)
    (wheels / "llguidance-1.9.1-cp39-abi3-manylinux_2_31_x86_64.whl").write_bytes(b"wheel")
    (wheels / "tokenizer" / "tokenizer.json").write_text("{}")
    monkeypatch.setenv(gpu_stamp.COMMIT_VARIABLE, "0123abc")
    s = gpu_stamp.stamp(tmp_path, wheels)
    assert s["commit"] == "0123abc" and s["source_sha256"] == gpu_stamp.source_digest(tmp_path)
    assert [w["file"] for w in s["wheels"]] == ["llguidance-1.9.1-cp39-abi3-manylinux_2_31_x86_64.whl",
                                                 "tokenizer/tokenizer.json"]
    assert s["wheels"][0]["sha256"] == gpu_stamp.file_sha256(wheels / s["wheels"][0]["file"])
    monkeypatch.delenv(gpu_stamp.COMMIT_VARIABLE)
    assert gpu_stamp.stamp(tmp_path, wheels)["commit"] is None
