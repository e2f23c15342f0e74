"""jetson/constraints-0.12-jetson.txt: one file pins what TensorRT-LLM v0.12.0-jetson needs, jetson/setup.sh
hands it to every pip call, and `python -m orin_llm.doctor.pins` compares it with what is installed."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from orin_llm.doctor.device_imports import DEVICE_IMPORTS, PACKAGE_LOAD
from orin_llm.doctor.pins import CONSTRAINTS, Pin, check_pins, main, read_pins, unpinned
from orin_llm.errors import OrinError

ROOT = Path(__file__).resolve().parents[2]
SETUP = ROOT / "jetson" / "setup.sh"


def test_the_pins_the_issue_asks_for():
    pins = dict(read_pins(CONSTRAINTS))
    assert pins["numpy"] == "==1.26.1"  # README4Jetson §1.2
    assert pins["tensorrt_llm"] == "==0.12.0"
    assert pins["transformers"] == "==4.43.4"  # the first line that reads Llama 3.2's rope_scaling
    assert pins["torch"] == "==2.5.0a0+872d972e41.nv24.08.17622132"  # J requirements-jetson.txt's wheel
    assert pins["tokenizers"] == "==0.19.1"  # transformers 4.43.4's range, <0.20


def test_every_package_the_device_imports_is_pinned():
    """The device path's imports (device_imports.py: `import tensorrt_llm`'s package-load imports, J
    requirements-jetson.txt's lines, the source build's tools, orin-llm's device extra) each have one version."""
    assert unpinned(CONSTRAINTS) == []
    pins = dict(read_pins(CONSTRAINTS))
    assert pins["cuda-python"] == "==12.6.2.post1"  # 13.x has no cuda.cudart
    assert pins["pybind11"].startswith("==2.")  # the bindings are compiled against pip's pybind11: 2.x only
    assert {"cuda-python", "pandas", "pulp", "StrEnum", "janus"} <= {d.distribution for d in PACKAGE_LOAD}


def test_an_unpinned_device_import_is_found(tmp_path):
    """A constraints file without cuda-python, or with only a floor for pandas, fails the check, and
    `python -m orin_llm.doctor.pins` exits 1 naming the package and the line that imports it."""
    lines = CONSTRAINTS.read_text().splitlines()
    f = tmp_path / "c.txt"
    f.write_text("\n".join(ln.replace("pandas==2.2.2", "pandas>=2") for ln in lines
                           if not ln.startswith("cuda-python")) + "\n")
    assert [d.distribution for d in unpinned(f)] == ["cuda-python", "pandas"]
    proc = subprocess.run([sys.executable, "-m", "orin_llm.doctor.pins", str(f)], capture_output=True, text=True)
    assert proc.returncode == 1
    assert "cuda-python: the device path needs it (J tensorrt_llm/auto_parallel/cluster_info.py L8" in proc.stdout
    assert "pandas: the device path needs it" in proc.stdout
    assert len({d.distribution for d in DEVICE_IMPORTS}) == len(DEVICE_IMPORTS)  # each listed once


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
    from orin_llm.doctor.host import Probe

    here = Probe().dist_version  # every device import pinned to what this machine has (or has not)
    device = "".join(f"{d.distribution}=={here(d.distribution) or '0'}\n" for d in DEVICE_IMPORTS)
    f = tmp_path / "c.txt"
    f.write_text(f"{device}pytest=={__import__('pytest').__version__}\n")
    assert main([str(f)]) == 0
    f.write_text(f"{device}pytest==0.0.1\n")
    assert main([str(f)]) == 1 and "pytest==0.0.1: " in capsys.readouterr().out
    proc = subprocess.run([sys.executable, "-m", "orin_llm.doctor.pins", str(tmp_path / "missing.txt")],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "cannot read the constraints file" in proc.stderr


def test_setup_installs_the_torch_the_constraints_pin():
    text = SETUP.read_text()
    version = re.search(r'JETPACK_TORCH_VERSION="([^"]+)"', text).group(1)
    url = re.search(r'JETPACK_TORCH_URL="([^"]+)"', text).group(1)
    assert dict(read_pins(CONSTRAINTS))["torch"] == f"=={version}"
    assert url.rsplit("/", 1)[1].startswith(f"torch-{version}-cp310-cp310-linux_aarch64")
