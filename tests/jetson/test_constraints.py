"""jetson/constraints-0.12-jetson.txt: one file pins what TensorRT-LLM v0.12.0-jetson needs, jetson/setup.sh
hands it to every pip call, and `python -m orin_llm.doctor.pins` compares it with what is installed."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from orin_llm.doctor.pins import CONSTRAINTS, Pin, check_pins, main, read_pins
from orin_llm.errors import OrinError

ROOT = Path(__file__).resolve().parents[2]
SETUP = ROOT / "jetson" / "setup.sh"


def test_the_pins_the_issue_asks_for():
    pins = dict(read_pins(CONSTRAINTS))
    assert pins["numpy"] == "==1.26.1"  # README4Jetson §1.2
    assert pins["tensorrt_llm"] == "==0.12.0"
    assert pins["transformers"] == "==4.43.4"  # the first line that reads Llama 3.2's rope_scaling
    assert pins["torch"] == "==2.5.0a0+872d972e41.nv24.08.17622132"  # J requirements-jetson.txt's wheel
    assert pins["tokenizers"] == "<0.20,>=0.19"


def test_every_pin_says_where_it_comes_from():
    """Each constraint line has a comment block above it naming its source (a file and line or symbol)."""
    blocks = CONSTRAINTS.read_text().split("\n\n")
    for block in blocks:
        lines = block.strip().splitlines()
        pins = [ln for ln in lines if ln and not ln.startswith("#")]
        if pins:
            comment = " ".join(ln for ln in lines if ln.startswith("#"))
            assert re.search(r"L\d+|\.py|\.txt|\.md", comment), f"no source for {pins}"


def test_setup_exports_the_constraints_before_any_pip_call():
    text = SETUP.read_text()
    export = text.index('export PIP_CONSTRAINT="$CONSTRAINTS"')
    assert 'CONSTRAINTS="$REPO/jetson/constraints-0.12-jetson.txt"' in text
    pip_calls = [m.start() for m in re.finditer(r"-m pip install", text)]
    assert pip_calls and min(pip_calls) > export
    assert "-m orin_llm.doctor.pins" in text


def test_setup_dry_run_shows_the_constraints(tmp_path):
    proc = subprocess.run(["bash", str(SETUP), "--dry-run", "--skip-trtllm", "--no-power", "--venv",
                           str(tmp_path / "venv")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"PIP_CONSTRAINT={CONSTRAINTS}" in proc.stdout
    assert "-m orin_llm.doctor.pins" in proc.stdout


def versions(**v):
    return lambda name: v.get(name.replace("-", "_"))


def test_check_pins_compares_what_is_installed(tmp_path):
    f = tmp_path / "c.txt"
    f.write_text("# a comment\nnumpy==1.26.1  # trailing\n\ntokenizers>=0.19,<0.20\nnvidia-modelopt~=0.15.0\n")
    pins = check_pins(f, versions(numpy="1.26.4", tokenizers="0.19.1"))
    assert [(p.name, p.ok) for p in pins] == [("numpy", False), ("tokenizers", True), ("nvidia-modelopt", True)]
    assert pins[0].describe() == "numpy==1.26.1: 1.26.4 (differs)"
    assert pins[2].describe() == "nvidia-modelopt~=0.15.0: not installed"
    assert Pin("torch", "==2.5.0a0+872d972e41.nv24.08.17622132", "2.5.0a0+872d972e41.nv24.08.17622132").ok


def test_a_bad_line_names_its_line(tmp_path):
    f = tmp_path / "c.txt"
    f.write_text("numpy==1.26.1\nnot a ===requirement\n")
    with pytest.raises(OrinError, match=r"c.txt:2: not a pip constraint"):
        read_pins(f)


def test_the_module_exits_1_on_a_difference(tmp_path, capsys):
    f = tmp_path / "c.txt"
    f.write_text(f"pytest=={__import__('pytest').__version__}\n")
    assert main([str(f)]) == 0
    f.write_text("pytest==0.0.1\n")
    assert main([str(f)]) == 1 and "(differs)" in capsys.readouterr().out
    proc = subprocess.run([sys.executable, "-m", "orin_llm.doctor.pins", str(tmp_path / "missing.txt")],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "cannot read the constraints file" in proc.stderr


def test_setup_installs_the_torch_the_constraints_pin():
    text = SETUP.read_text()
    version = re.search(r'JETPACK_TORCH_VERSION="([^"]+)"', text).group(1)
    url = re.search(r'JETPACK_TORCH_URL="([^"]+)"', text).group(1)
    assert dict(read_pins(CONSTRAINTS))["torch"] == f"=={version}"
    assert url.rsplit("/", 1)[1].startswith(f"torch-{version}-cp310-cp310-linux_aarch64")
