"""jetson/first-contact.sh: its dry run (any machine, exit 0) shows every stage and NVIDIA's documented build
commands, pinned by a golden file; a real run on a machine that is not an Orin stops at the checks with the
next thing to try and still packs its folder.

After an intended change: ORIN_LLM_REGEN_GOLDEN=1 python -m pytest tests/jetson/test_first_contact.py
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "jetson" / "first-contact.sh"
GOLDEN = Path(__file__).resolve().parent / "golden" / "first-contact-dry-run.txt"
BUILD_GOLDEN = ROOT / "tests" / "build" / "golden" / "agx-orin-64gb.commands.txt"


def first_contact(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": sys.executable, "PYTHONPATH": str(ROOT)}
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=300, cwd=cwd,
                          env=env)


def test_the_dry_run_prints_every_stage_and_exits_0(tmp_path):
    proc = first_contact("--dry-run", "--out", "first-contact-golden", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    if os.environ.get("ORIN_LLM_REGEN_GOLDEN") == "1":
        GOLDEN.write_text(proc.stdout)
    assert proc.stdout == GOLDEN.read_text(), "the dry run changed; regenerate (module docstring) and review"
    stages = [ln for ln in proc.stdout.splitlines() if ln.startswith("== ")]
    assert [s.split(":")[0] for s in stages] == ["== 1/6 checks", "== 2/6 installs", "== 3/6 build",
                                                 "== 4/6 ladder", "== 5/6 bench", "== 6/6 tests", "== done"]
    assert not (tmp_path / "first-contact-golden").exists() and not list(ROOT.glob("first-contact-golden*"))


def test_the_dry_run_shows_the_build_golden_test_pins():
    """The build stage prints exactly the commands tests/build/golden pins: convert_checkpoint.py weight-only
    INT4 (README4Jetson's default) and trtllm-build, for the shipped Orin profile."""
    printed = [ln.strip() for ln in GOLDEN.read_text().splitlines()]
    commands = [ln for ln in BUILD_GOLDEN.read_text().splitlines() if not ln.startswith("#")]
    assert all(c in printed for c in commands)
    assert sum("convert_checkpoint.py" in c and "--weight_only_precision int4" in c for c in commands) == 2
    assert "quantize.py" not in GOLDEN.read_text()


def test_off_an_orin_a_real_run_stops_at_the_checks_and_packs_what_it_has(tmp_path):
    if Path("/etc/nv_tegra_release").exists():
        pytest.skip("this is a Jetson: a real run would install")
    out = tmp_path / "fc"
    proc = first_contact("--out", str(out))
    assert proc.returncode == 1
    assert "FAILED at stage 1/6 checks" in proc.stderr and "next: this is not a Jetson" in proc.stderr
    with tarfile.open(f"{out}.tar.gz") as tar:
        names = {Path(n).name for n in tar.getnames()}
    assert {"versions.txt", "FAILED", "profile.toml"} <= names
    versions = (out / "versions.txt").read_text()
    assert "## pins (jetson/constraints-0.12-jetson.txt)" in versions and "## uname" in versions


def test_bad_options_are_refused():
    proc = first_contact("--swap", "lots")
    assert proc.returncode == 2 and "--swap takes a whole number" in proc.stderr
    proc = first_contact("--profile", "no/such.toml")
    assert proc.returncode == 2 and "no profile no/such.toml" in proc.stderr


def with_real_cases(path: Path) -> bool:
    """Whether a test module has tests that run on the real bindings: a test that asks for the `eng` or
    `bindings` fixture (tests/backends/trtllm/trtllm_both.py), or for a fixture of the module that does."""
    tree = ast.parse(path.read_text())
    functions = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    real = {"eng", "bindings"}
    for _ in functions:  # a fixture may build on another fixture of the module
        real |= {f.name for f in functions if any("fixture" in ast.unparse(d) for d in f.decorator_list)
                 and real & {a.arg for a in f.args.args}}
    return any(f.name.startswith("test_") and real & {a.arg for a in f.args.args} for f in functions)


def test_the_tests_stage_runs_the_real_bindings_cases_of_every_file_that_has_them():
    """Stage 6 names the test files that have real-bindings cases, all of them, on the engine it built, and
    selects those cases only."""
    line = next(ln for ln in GOLDEN.read_text().splitlines() if " -m pytest " in ln)
    assert "ORIN_LLM_TEST_TRTLLM_ENGINE=engines/agx-orin-64gb" in line and " -k real " in line
    files = [w for w in line.split() if w.startswith("tests/")]
    assert files and all((ROOT / f).is_file() for f in files)
    having = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py") if with_real_cases(p))
    assert sorted(files) == having, "jetson/first-contact.sh's TESTS and the files with real cases differ"
    collected = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-k", "real", *files],
                               capture_output=True, text=True, cwd=ROOT, timeout=300,
                               env={**os.environ, "PYTHONPATH": str(ROOT)})
    ids = [ln for ln in collected.stdout.splitlines() if "::" in ln]
    assert len(ids) >= 45 and all(i.endswith("[real]") or "[real-" in i or "-real]" in i for i in ids), ids


def test_checkpoints_downloaded_into_the_clone_are_not_committed():
    """GUIDE's downloads may land in models/ inside the clone: git must ignore them (gigabytes of weights)."""
    proc = subprocess.run(["git", "check-ignore", "-q", "models/Llama-3.2-3B-Instruct/model.safetensors"], cwd=ROOT)
    assert proc.returncode == 0
    assert subprocess.run(["git", "check-ignore", "-q", "jetson/models/llama-3.2-3b-instruct/config.json"],
                          cwd=ROOT).returncode == 1  # the shipped configs stay tracked


def test_the_source_build_clones_shallow(tmp_path):
    proc = subprocess.run(["bash", str(ROOT / "jetson" / "setup.sh"), "--dry-run", "--no-power", "--venv",
                           str(tmp_path / "venv"), "--trtllm-dir", str(tmp_path / "trtllm")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert ("+ git clone --depth 1 --recurse-submodules --shallow-submodules -b v0.12.0-jetson "
            f"https://github.com/NVIDIA/TensorRT-LLM.git {tmp_path / 'trtllm'}") in proc.stdout


def test_the_jetpack_7_dry_run_shows_the_edgellm_path_and_exits_0(tmp_path):
    """--jetpack 7: the Edge-LLM profile, its checks (L4T R38), the export and the device's commands as the
    build prints them (each with its source), the server before the daemon, and every stage."""
    proc = first_contact("--dry-run", "--jetpack", "7", "--out", "fc7", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    stages = [ln.split(":")[0] for ln in out.splitlines() if ln.startswith("== ")]
    assert stages == ["== 1/6 checks", "== 2/6 installs", "== 3/6 build", "== 4/6 smoke", "== 5/6 bench",
                      "== 6/6 tests", "== done"]
    assert "profile jetson/profiles/agx-orin-64gb-edgellm.toml" in out and "L4T R38 (JetPack 7" in out
    from orin_llm.build.edgellm import edgellm_steps
    from orin_llm.profile import load_profile

    profile = ROOT / "jetson" / "profiles" / "agx-orin-64gb-edgellm.toml"
    for step in edgellm_steps(load_profile(profile), Path("engines/agx-orin-64gb-edgellm"), profile.parent):
        assert step.line() in out and step.source in out
    assert out.index("/health/ready") < out.index("orin-llm serve --engine")  # the server is up first
    assert "convert_checkpoint.py" not in out and "jetson/setup.sh" not in out  # nothing of TensorRT-LLM 0.12
    tests = out[out.index("== 6/6 tests"):]  # the backend's cases on this server: both variables its fixture reads
    assert "ORIN_LLM_TEST_EDGELLM_ENGINE=engines/agx-orin-64gb-edgellm" in tests
    assert "ORIN_LLM_EDGELLM_URL=http://127.0.0.1:8000" in tests and "pytest tests/backends/edgellm" in tests
    assert not (tmp_path / "fc7").exists()


def test_jetpack_takes_6_or_7_only():
    proc = first_contact("--dry-run", "--jetpack", "5")
    assert proc.returncode == 2 and "--jetpack takes 6 or 7" in proc.stderr
