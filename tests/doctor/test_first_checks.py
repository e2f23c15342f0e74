"""First contact's stage 1 (orin_llm/doctor/first_checks.py, disk_need.py): the checks before any install, on
fixture files for what only an Orin has (its release file, /proc/swaps, nvpmodel), the real filesystem for
free disk, a real child Python without orin-llm's dependencies for the whole module."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from orin_llm.build.memory import plan_memory
from orin_llm.doctor import first_checks as fc
from orin_llm.doctor.disk_need import GIB, DiskItem, disk_need, read_profile
from orin_llm.doctor.host import Probe
from orin_llm.errors import OrinError
from orin_llm.profile import load_profile

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "jetson" / "profiles" / "agx-orin-64gb.toml"
R36_4_0 = ("# R36 (release), REVISION: 4.0, GCID: 37537400, BOARD: generic"
           ", EABI: aarch64, DATE: Fri Sep 13 04:36:44 UTC 2024\n")
R36_4_3 = ("# R36 (release), REVISION: 4.3, GCID: 38968081, BOARD: generic"
           ", EABI: aarch64, DATE: Wed Jan  8 01:49:37 UTC 2025\n")
R38_2 = ("# R38 (release), REVISION: 2.0, GCID: 41844464, BOARD: generic"
         ", EABI: aarch64, DATE: Fri Aug 22 00:55:42 UTC 2025\n")
R35 = ("# R35 (release), REVISION: 5.0, GCID: 35550185, BOARD: t186ref"
       ", EABI: aarch64, DATE: Tue Feb 20 04:46:31 UTC 2024\n")
SWAPS_16G = "Filename Type Size Used Priority\n/swapfile file 16777212 0 -2\n/dev/zram0 partition 8144528 0 5\n"
SWAPS_ZRAM = "Filename Type Size Used Priority\n/dev/zram0 partition 8144528 0 5\n"


def probe(tmp_path: Path, release: str | None = R36_4_0, swaps: str = SWAPS_16G) -> Probe:
    rel = tmp_path / "nv_tegra_release"
    if release is not None:
        rel.write_text(release)
    (tmp_path / "swaps").write_text(swaps)
    cmds = {"nvpmodel": "NV Power Mode: MAXN\n0\n",
            "jetson_clocks": "GPU MinFreq=1300500000 MaxFreq=1300500000 CurrentFreq=1300500000\n"}
    return Probe(tegra_release=rel, proc_swaps=tmp_path / "swaps", run_cmd=lambda argv: cmds.get(argv[0]))


def checkpoint(d: Path) -> Path:
    d.mkdir(parents=True)
    (d / "config.json").write_text("{}")
    (d / "model.safetensors").write_bytes(b"")
    return d


def test_jetpack_7_is_told_at_once_what_to_do_instead(tmp_path):
    r = fc.FirstChecks()
    assert not fc.check_release(r, probe(tmp_path, R38_2))
    assert r.checks[0].status == "error" and "L4T R38.2.0" in r.checks[0].message
    assert "JetPack 7" in r.checks[0].message
    assert "first-contact.sh --jetpack 7" in r.next[0] and fc.TORCH_PROFILE in r.next[0]
    assert "reflash JetPack 6.1/6.2.x (L4T R36.4.x)" in r.next[0]


@pytest.mark.parametrize("release, ok, words", [
    (R36_4_0, True, "L4T R36.4.0 (JetPack 6.1)"),
    (R36_4_3, True, "L4T R36.4.3 (JetPack 6.2): the CUDA 12.6 / TensorRT 10.3 line"),
    (R35, False, "L4T R35.5.0"),
    (None, False, "not a Jetson"),
])
def test_the_release(tmp_path, release, ok, words):
    r = fc.FirstChecks()
    assert fc.check_release(r, probe(tmp_path, release)) is ok
    assert words in r.checks[0].message and (r.checks[0].status == "error") is not ok


def test_disk_need_is_the_memory_plans_weights_plus_the_checkpoints(tmp_path):
    """The engine and its converted checkpoint are each the plan's weights for the model; the checkpoints
    are their bf16 parameters, counted while they are not there; a tied lm_head gets its copy."""
    plan = plan_memory(load_profile(PROFILE), PROFILE.parent)
    items = {i.label: i for i in disk_need(read_profile(PROFILE), PROFILE.parent, tmp_path / "e", fresh=True)}
    for role, model in (("target", plan.target), ("draft", plan.draft)):
        assert items[f"{role} engine"].bytes == items[f"{role} converted checkpoint"].bytes == model.weights_bytes
        assert items[f"{role} engine"].path == tmp_path / "e" / role
    assert round(items["target checkpoint"].bytes / 1e9, 1) == 6.4  # 3.21 B params in bf16
    assert round(items["draft checkpoint"].bytes / 1e9, 1) == 2.5
    assert items["target lm_head copy"].bytes == 128256 * 3072 * 2
    assert "TensorRT-LLM source build (estimate)" in items


def test_a_checkpoint_already_there_needs_no_room(tmp_path):
    profile = read_profile(PROFILE)
    profile["target"]["model"] = str(checkpoint(tmp_path / "3b"))
    labels = [i.label for i in disk_need(profile, PROFILE.parent, tmp_path / "e")]
    assert "target checkpoint" not in labels and "draft checkpoint" in labels


def test_disk_short_is_an_error_with_the_room_to_free(tmp_path):
    r = fc.FirstChecks()
    fc.check_disk(r, [DiskItem("target engine", tmp_path / "e" / "target", 10**18)])
    assert r.checks[0].status == "error"
    assert "the build needs 931322574.6 GiB there (target engine" in r.checks[0].message
    assert "NVMe" in r.next[0]
    r = fc.FirstChecks()
    fc.check_disk(r, [DiskItem("target engine", tmp_path / "e" / "target", GIB // 10)])
    assert r.checks[0].status in ("ok", "warn") and "0.1 GiB needed (target engine 0.1 GiB)" in r.checks[0].message


def test_swap(tmp_path):
    r = fc.FirstChecks()
    fc.check_swap(r, probe(tmp_path, swaps=SWAPS_ZRAM), None)
    assert r.checks[0].status == "error" and r.next == ["rerun with --swap 16 (stage 2 makes the swap file)"]
    r = fc.FirstChecks()
    fc.check_swap(r, probe(tmp_path, swaps=SWAPS_ZRAM), 16)
    assert r.checks[0].status == "info" and "stage 2 makes a 16 GiB swap file" in r.checks[0].message


def test_missing_checkpoints_give_the_login_and_the_download_without_original(tmp_path, monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    models = [("target", str(tmp_path / "3b"), "meta-llama/Llama-3.2-3B-Instruct"),
              ("draft", str(checkpoint(tmp_path / "1b")), "meta-llama/Llama-3.2-1B-Instruct")]
    r = fc.FirstChecks()
    fc.check_checkpoints(r, models, fc.hf_token_present())
    assert [c.status for c in r.checks] == ["ok", "error"]
    assert "huggingface-cli login" in r.next[0]
    assert r.next[0].endswith(f'huggingface-cli download meta-llama/Llama-3.2-3B-Instruct --exclude "original/*" '
                              f'--local-dir {tmp_path / "3b"}')
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "token").write_text("hf_x")
    r = fc.FirstChecks()
    fc.check_checkpoints(r, models, fc.hf_token_present())
    assert "login" not in r.next[0] and "--exclude \"original/*\"" in r.next[0]


def test_a_whole_run_reports_every_section_and_names_the_first_fix(tmp_path):
    r = fc.run(PROFILE, tmp_path / "e", None, probe(tmp_path, swaps=SWAPS_ZRAM), "3.10.12")
    sections = [c.section for c in r.checks]
    assert sections[:2] == ["device", "python"] and {"disk", "swap", "power", "checkpoints"} <= set(sections)
    assert r.next[0].startswith("rerun with --swap 16")  # the first error, in the order they are checked
    r = fc.run(PROFILE, tmp_path / "e", None, probe(tmp_path, R38_2), "3.10.12")
    assert [c.section for c in r.checks] == ["device"]  # nothing else matters on the wrong JetPack


def test_the_python_must_be_310():
    r = fc.FirstChecks()
    fc.check_python(r, "3.12.3")
    assert r.checks[0].status == "error" and "PYTHON=/usr/bin/python3" in r.next[0]


def test_on_310_the_profile_is_read_with_pips_tomli(monkeypatch):
    from orin_llm.doctor import disk_need

    monkeypatch.setattr(disk_need, "tomllib", None)  # what Python 3.10 leaves
    assert read_profile(PROFILE)["target"]["hf_repo"] == "meta-llama/Llama-3.2-3B-Instruct"
    monkeypatch.setitem(sys.modules, "pip._vendor", None)  # no pip: say how to get it
    with pytest.raises(OrinError, match="sudo apt install python3-pip"):
        read_profile(PROFILE)


def test_the_module_runs_without_orin_llms_dependencies(tmp_path):
    """`python3 -I` with only the repository on the path (isolated: no site-packages), as on a fresh Orin."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); "
            "from orin_llm.doctor.first_checks import main; raise SystemExit(main(sys.argv[2:]))")
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", code, str(ROOT), "--profile", str(PROFILE),
                           "--engine", "engines/agx-orin-64gb", "--dry-run"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert 'meta-llama/Llama-3.2-3B-Instruct --exclude "original/*"' in proc.stdout
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", code, str(ROOT), "--profile", str(PROFILE),
                           "--engine", str(tmp_path / "e")], capture_output=True, text=True, timeout=60)
    if not Path("/etc/nv_tegra_release").exists():
        assert proc.returncode == 1 and proc.stdout.splitlines()[-1].startswith("next: this is not a Jetson")
