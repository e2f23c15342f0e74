"""A broken engine dir is refused with one line that names the problem."""

import json
import os
import shutil

import pytest

from orin_llm.errors import OrinError
from orin_llm.manifest import load_manifest, verify_files
from orin_llm.profile import embedded_profile

from .conftest import orin_llm

pytestmark = pytest.mark.full


@pytest.fixture
def engine_copy(engine_dir, tmp_path):
    dst = tmp_path / "eng"
    dst.mkdir()
    for p in engine_dir.iterdir():  # hard-link the weights (never edited), copy what we break
        if p.is_dir():
            shutil.copytree(p, dst / p.name, copy_function=os.link if p.name == "target" else shutil.copy)
        else:
            shutil.copy(p, dst / p.name)
    return dst


def test_built_manifest_records_what_and_from_what(engine_dir):
    m = load_manifest(engine_dir)
    assert m.schema_version == 1 and m.backend == "torch"
    assert m.target.source_files[0].path.endswith(".gguf") and len(m.target.source_files[0].sha256) == 64
    assert {"torch", "transformers", "orin-llm", "python"} <= set(m.tools)
    assert m.target.arch.num_layers == 30 and m.target.arch.num_kv_heads == 3
    assert m.target.kv_cache.dtype == embedded_profile().target.kv_cache == "int8"
    assert m.target.kv_cache.scales == "target/kv_scales.safetensors"
    assert m.draft is not None and m.draft.weights == "int8_wo" and m.draft.kv_cache.scales
    assert any(f.path == "target/model.safetensors" for f in m.target.files)
    assert any(f.path == "tokenizer/tokenizer.json" for f in m.tokenizer)
    verify_files(engine_dir, m, hashes=True)  # every recorded sha256 is the file's


def edit(path, fn):
    data = json.loads(path.read_text())
    fn(data)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize("breakage, message", [
    (lambda d: d.pop("target"), "target: Field required"),
    (lambda d: d.update(schema_version=99), "schema_version 99"),
    (lambda d: d.update(surprise=1), "surprise: unknown field"),
    (lambda d: d["target"]["arch"].update(num_layers=0), "target.arch.num_layers"),
    (lambda d: d["target"]["kv_cache"].update(dtype="int4"), "target.kv_cache.dtype"),
])
def test_broken_fields_are_named(engine_copy, breakage, message):
    edit(engine_copy / "manifest.json", breakage)
    with pytest.raises(OrinError, match=message.replace("(", r"\(")):
        load_manifest(engine_copy)


def test_missing_or_resized_files(engine_copy):
    (engine_copy / "tokenizer" / "tokenizer.json").unlink()
    with pytest.raises(OrinError, match="tokenizer/tokenizer.json is listed .* but missing"):
        load_manifest(engine_copy)


def test_changed_file_is_caught_by_size_then_hash(engine_copy):
    cfg = engine_copy / "tokenizer" / "tokenizer_config.json"
    cfg.write_text(cfg.read_text() + " ")
    with pytest.raises(OrinError, match="bytes"):
        load_manifest(engine_copy)
    text = cfg.read_text()[:-1]
    cfg.write_text(text[:-2] + ("x" if text[-2] != "x" else "y") + text[-1])  # same size, other bytes
    m = load_manifest(engine_copy)
    with pytest.raises(OrinError, match="sha256"):
        verify_files(engine_copy, m, hashes=True)


def test_not_an_engine_dir(tmp_path):
    with pytest.raises(OrinError, match="not an engine directory"):
        load_manifest(tmp_path)
    with pytest.raises(OrinError, match="does not exist"):
        load_manifest(tmp_path / "nope")


def test_cli_refuses_corrupt_manifest_in_one_line(engine_copy):
    (engine_copy / "manifest.json").write_text('{"schema_version": 1, "name": ')
    proc = orin_llm("generate", "--engine", str(engine_copy), "hello", check=False)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert lines[0].startswith("error: ") and "manifest.json: not valid JSON" in lines[0]
