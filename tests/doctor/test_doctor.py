"""`orin-llm doctor` on fixture files (a Jetson AGX Orin 64 GB on L4T R36.4) and on this machine."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import pytest

from orin_llm.arch import arch_from_hf
from orin_llm.doctor import Probe, device_name, diagnose, parse_l4t, run_doctor
from orin_llm.manifest import SCHEMA_VERSION, KvCacheEntry, Manifest, ModelEntry, write_manifest
from orin_llm.profile import load_profile

ROOT = Path(__file__).resolve().parents[2]
ORIN_PROFILE = ROOT / "jetson" / "profiles" / "agx-orin-64gb.toml"

R36_4 = ("# R36 (release), REVISION: 4.0, GCID: 37537400, BOARD: generic, EABI: aarch64, DATE: Fri Sep 13 "
         "04:36:44 UTC 2024\n# KERNEL_VARIANT: oot\nTARGET_USERSPACE_LIB_DIR=nvidia\n"
         "TARGET_USERSPACE_LIB_DIR_PATH=usr/lib/aarch64-linux-gnu/nvidia\n")
MEMINFO = "MemTotal:       64335852 kB\nMemFree:        50000000 kB\nMemAvailable:   58000000 kB\n" \
          "SwapTotal:      16777212 kB\nSwapFree:       16777212 kB\n"
SWAPS_HEADER = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"
DISK_SWAP = SWAPS_HEADER + "/swapfile                               file\t\t16777212\t0\t\t-2\n"
ZRAM_ONLY = SWAPS_HEADER + "".join(f"/dev/zram{i}                              partition\t\t4019580\t\t0\t\t5\n"
                                   for i in range(8))
CLOCKS_PINNED = ("SOC family:tegra234  Machine:NVIDIA Jetson AGX Orin Developer Kit\nOnline CPUs: 0-11\n"
                 "cpu0: Online=1 Governor=schedutil MinFreq=2201600 MaxFreq=2201600 CurrentFreq=2201600\n"
                 "GPU MinFreq=1300500000 MaxFreq=1300500000 CurrentFreq=1300500000\n"
                 "EMC MinFreq=204000000 MaxFreq=3199000000 CurrentFreq=3199000000 FreqOverride=1\n"
                 "NV Power Mode: MAXN\n")
CLOCKS_FREE = CLOCKS_PINNED.replace("GPU MinFreq=1300500000", "GPU MinFreq=306000000")
ORIN_VERSIONS = {"tensorrt_llm": "0.12.0", "tensorrt": "10.3.0", "torch": "2.5.0a0+872d972e41.nv24.08.17622132"}


def commands(nvpmodel: str = "NV Power Mode: MAXN\n0\n", clocks: Optional[str] = CLOCKS_PINNED,
             jetpack: str = "6.1+b123"):
    """A command runner answering like a JetPack 6.1 Orin (None: the command is not there)."""
    answers = {"nvpmodel -q": nvpmodel, "jetson_clocks --show": clocks,
               "dpkg-query -W --showformat=${Version} nvidia-jetpack": jetpack}
    ran: list[str] = []

    def run(argv: list[str]) -> Optional[str]:
        ran.append(" ".join(argv))
        return answers.get(" ".join(argv))

    run.ran = ran  # type: ignore[attr-defined]
    return run


def importer(versions: dict, error: Optional[str] = None):
    """Probe.import_version as a child Python answers: the version, or the import's last error line."""
    def import_version(name: str) -> tuple[Optional[str], Optional[str]]:
        if error is not None:
            return None, error
        if name not in versions:
            return None, f"ModuleNotFoundError: No module named '{name}'"
        return versions[name], None
    return import_version


def orin(tmp_path: Path, release: str = R36_4, swaps: str = DISK_SWAP, versions: Optional[dict] = None,
         python: str = "3.10.12", import_error: Optional[str] = None, **cmds) -> Probe:
    """A Jetson AGX Orin 64 GB as fixture files."""
    files = {"nv_tegra_release": release, "model": "NVIDIA Jetson AGX Orin Developer Kit\x00",
             "meminfo": MEMINFO, "swaps": swaps}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    versions = ORIN_VERSIONS if versions is None else versions
    return Probe(tegra_release=tmp_path / "nv_tegra_release", device_model=tmp_path / "model",
                 proc_meminfo=tmp_path / "meminfo", proc_swaps=tmp_path / "swaps", run_cmd=commands(**cmds),
                 dist_version=versions.get, module_found=lambda name: name in versions, python_version=python,
                 import_version=importer(versions, import_error))


def statuses(report, section: str) -> list[str]:
    return [c.status for c in report.checks if c.section == section]


def messages(lines: list[str], status: str) -> str:
    return "\n".join(ln for ln in lines if ln.strip().startswith(status))


def test_parsers():
    assert parse_l4t(R36_4) == (36, 4, 0)
    assert parse_l4t("# R36 (release), REVISION: 4.3, GCID: 1") == (36, 4, 3)
    assert parse_l4t("# R35 (release), REVISION: 5.0, GCID: 1") == (35, 5, 0)
    assert parse_l4t("garbage") is None
    assert device_name("NVIDIA Jetson AGX Orin Developer Kit", 64335852) == "jetson-agx-orin-64gb"
    assert device_name("NVIDIA Jetson AGX Orin", 30_600_000) == "jetson-agx-orin-32gb"
    assert device_name("NVIDIA Jetson Orin Nano Developer Kit", 7_800_000) == "jetson-orin-nano-8gb"
    assert device_name("Quill", 8_000_000) is None and device_name(None, 1) is None


def test_a_ready_orin_on_jetpack_6_1_exits_0(tmp_path):
    probe = orin(tmp_path)
    code, lines = run_doctor(probe=probe)
    text = "\n".join(lines)
    assert code == 0, text
    assert lines[0].startswith("orin-llm doctor — Jetson")
    assert "L4T R36.4.0 (JetPack 6.1)" in text and "nvidia-jetpack 6.1+b123" in text
    assert "jetson-agx-orin-64gb" in text and "TensorRT-LLM 0.12.0" in text and "TensorRT 10.3.0" in text
    assert "power mode MAXN" in text and "GPU clock pinned at 1300 MHz" in text
    assert "61.4 GiB total, 55.3 GiB available" in text and "swap: 16.0 GiB on disk, 0.0 GiB zram" in text
    assert "WARN" not in text and "ERROR" not in text
    assert lines[-1] == "ready: 0 warnings, 0 errors (exit 0)"
    assert "nvpmodel -q" in probe.run_cmd.ran  # type: ignore[attr-defined]


def test_not_maxn_is_a_warning(tmp_path):
    code, lines = run_doctor(probe=orin(tmp_path, nvpmodel="NV Power Mode: MODE_30W\n2\n", clocks=CLOCKS_FREE))
    warnings = messages(lines, "WARN")
    assert code == 1
    assert "power: Jetson power mode is MODE_30W, not MAXN" in warnings and "sudo nvpmodel -m 0" in warnings
    assert "GPU clock not pinned (306-1300 MHz)" in warnings and "sudo jetson_clocks" in warnings
    assert lines[-1] == "usable, with warnings: 2 warnings, 0 errors (exit 1)"


def test_no_swap_but_zram_is_a_warning_with_advice(tmp_path):
    code, lines = run_doctor(probe=orin(tmp_path, swaps=ZRAM_ONLY))
    text = "\n".join(lines)
    assert code == 1
    assert "swap: 0.0 GiB on disk, 30.7 GiB zram" in text
    assert "only 0.0 GiB of disk swap (+30.7 GiB zram, which is compressed RAM)" in messages(lines, "WARN")
    assert "sudo systemctl disable nvzramconfig" in text and "jetson/setup.sh --swap" in text
    code, lines = run_doctor(probe=orin(tmp_path, swaps=SWAPS_HEADER))  # no swap at all
    assert code == 1 and "only 0.0 GiB of disk swap;" in messages(lines, "WARN")


def test_unreadable_power_mode_and_clocks(tmp_path):
    code, lines = run_doctor(probe=orin(tmp_path, nvpmodel=None, clocks=None))
    assert code == 1 and "could not read the Jetson power mode" in messages(lines, "WARN")
    assert "jetson_clocks --show needs root" in messages(lines, "INFO")


@pytest.mark.parametrize("release, status, words", [
    ("# R36 (release), REVISION: 4.3, GCID: 1, BOARD: generic", "warn", "L4T R36.4.3 (JetPack 6.2): newer than"),
    ("# R36 (release), REVISION: 3.0, GCID: 1, BOARD: generic", "error", "L4T R36.3.0 (JetPack 6.0): TensorRT-LLM"),
    ("# R35 (release), REVISION: 4.1, GCID: 1, BOARD: t186ref", "error", "L4T R35.4.1: TensorRT-LLM v0.12.0-jetson"),
    ("not a release line", "warn", "cannot read the L4T version"),
])
def test_other_jetpacks(tmp_path, release, status, words):
    report = diagnose(probe=orin(tmp_path, release=release))
    found = [c for c in report.checks if c.section == "device" and words in c.message]
    assert found and found[0].status == status
    assert report.exit_code == {"warn": 1, "error": 2}[status]


def test_missing_or_wrong_software_on_a_jetson(tmp_path):
    report = diagnose(probe=orin(tmp_path, versions={"torch": "2.5.0a0+872d972e41.nv24.08"}, jetpack=""))
    assert report.exit_code == 2
    errors = [c.message for c in report.checks if c.status == "error"]
    assert errors == ["TensorRT-LLM is not installed: run jetson/setup.sh (it builds TensorRT-LLM v0.12.0-jetson "
                      "from source)"]
    warns = " | ".join(c.message for c in report.checks if c.status == "warn")
    assert "nvidia-jetpack packages are not installed" in warns and "TensorRT's Python bindings are missing" in warns
    report = diagnose(probe=orin(tmp_path, versions={**ORIN_VERSIONS, "tensorrt_llm": "0.16.0"}, python="3.11.4"))
    assert report.exit_code == 2 and "TensorRT-LLM 0.16.0: orin-llm's trtllm backend targets v0.12.0-jetson" in [
        c.message for c in report.checks if c.status == "error"][0].split(" (the only")[0]
    assert any("Python 3.11.4: TensorRT-LLM v0.12.0-jetson is built for" in c.message for c in report.checks)


# ---------------------------------------------------------------------------
# Engines


def trtllm_engine(root: Path, tensorrt_llm: Optional[str] = "0.12.0", device: str = "jetson-agx-orin-64gb",
                  python: str = "3.10.12") -> Path:
    """An engine directory whose manifest is what an Orin build writes (no weight files listed)."""
    profile = load_profile(ORIN_PROFILE).model_dump(mode="json")
    profile["device"]["name"] = device

    def entry(sub: str) -> ModelEntry:
        arch = arch_from_hf(json.loads((ROOT / "jetson" / "models" / sub / "config.json").read_text()))
        return ModelEntry(dir=sub, source=f"/opt/orin-llm/models/{sub}", source_files=[], arch=arch,
                          weights="int4_awq", dtype="float16", kv_cache=KvCacheEntry(dtype="int8"), files=[])

    tools = {"orin-llm": "0.1.0", "python": python}
    if tensorrt_llm:
        tools["tensorrt_llm"] = tensorrt_llm
    out = root / f"engine-{device}-{tensorrt_llm}"
    out.mkdir()
    write_manifest(out, Manifest(schema_version=SCHEMA_VERSION, name="agx-orin-64gb", backend="trtllm",
                                 created_utc="2025-01-01T00:00:00+00:00", target=entry("llama-3.2-3b-instruct"),
                                 draft=entry("llama-3.2-1b-instruct"), tokenizer=[],
                                 limits={"max_input_len": 4096, "max_seq_len": 4608}, tools=tools,
                                 profile=profile))
    return out


def engine_errors(report) -> list[str]:
    return [c.message for c in report.checks if c.section == "engine" and c.status == "error"]


def test_an_engine_built_for_this_orin(tmp_path):
    engines = tmp_path / "engines"
    engines.mkdir()
    report = diagnose(trtllm_engine(engines), probe=orin(tmp_path))
    assert report.exit_code == 0, report.lines()
    assert statuses(report, "engine") == ["info", "ok"]
    assert "built for this device (jetson-agx-orin-64gb) with the installed TensorRT-LLM 0.12.0" in \
        report.checks[-1].message


def test_engines_for_other_software_or_devices_are_errors(tmp_path):
    engines = tmp_path / "engines"
    engines.mkdir()
    probe = orin(tmp_path)
    errors = engine_errors(diagnose(trtllm_engine(engines, tensorrt_llm="0.11.0"), probe=probe))
    assert errors == ["built with TensorRT-LLM 0.11.0 but 0.12.0 is installed: TensorRT engines load only with the "
                      "TensorRT-LLM (and TensorRT) that built them; rebuild the engine"]
    errors = engine_errors(diagnose(trtllm_engine(engines, device="jetson-agx-orin-32gb"), probe=probe))
    assert len(errors) == 1 and "built for jetson-agx-orin-32gb but this is a jetson-agx-orin-64gb" in errors[0]
    errors = engine_errors(diagnose(trtllm_engine(engines, tensorrt_llm=None), probe=probe))
    assert len(errors) == 1 and "records no TensorRT-LLM version" in errors[0]
    report = diagnose(trtllm_engine(engines, python="3.11.2", device="x"), probe=probe)
    assert report.exit_code == 2 and any("built under Python 3.11.2" in c.message for c in report.checks)
    (engines / "broken").mkdir()
    errors = engine_errors(diagnose(engines / "broken", probe=probe))
    assert errors == [f"{engines / 'broken'} is not an engine directory: no manifest.json (rebuild it)"]


# ---------------------------------------------------------------------------
# This machine (not a Jetson)


def test_this_machine_is_not_a_jetson(tmp_path):
    assert not Path("/etc/nv_tegra_release").exists(), "these tests expect a machine that is not a Jetson"
    code, lines = run_doctor()
    text = "\n".join(lines)
    assert lines[0].startswith("orin-llm doctor — not a Jetson")
    assert "WARN  device: not a Jetson (/etc/nv_tegra_release not found)" in text
    assert "power:" not in text  # nvpmodel and jetson_clocks are not asked off the Orin
    assert "ERROR" not in text and code == 1  # rules: "not a Jetson" is a warning, nothing here is an error
    assert lines[-1].endswith("(exit 1)")
    # a TensorRT-LLM engine cannot run here: an error
    code, lines = run_doctor(trtllm_engine(tmp_path))
    assert code == 2 and "this is not a Jetson" in messages(lines, "ERROR")


@pytest.mark.full
def test_this_machine_with_the_embedded_torch_engine(engine_dir):
    report = diagnose(engine_dir)
    assert not report.jetson and report.exit_code == 1
    assert statuses(report, "engine")[:2] == ["info", "ok"]
    assert "backend torch" in report.checks[[c.section for c in report.checks].index("engine")].message
    assert json.loads(json.dumps(report.as_dict()))["exit_code"] == 1


# ---------------------------------------------------------------------------
# The policy: what the runner measured, next to what the engine's plan reserved


def planned_engine(root: Path, reserve_gib: float) -> Path:
    """An Orin engine whose manifest carries the memory plan its profile makes with `reserve_gib` for the policy."""
    from orin_llm.build.memory import plan_memory

    out = trtllm_engine(root)
    profile = load_profile(ORIN_PROFILE)
    profile = profile.model_copy(update={"policy": profile.policy.model_copy(update={"reserve_gib": reserve_gib})})
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["memory_plan"] = plan_memory(profile, ORIN_PROFILE.parent).as_dict()
    (out / "manifest.json").write_text(json.dumps(manifest))
    return out


def policy_measured(tmp_path: Path, gib: float, stand_in: bool = False, backend: str = "tensorrt") -> Path:
    from orin_llm.policy.measure import PolicyMeasurement, write_measurement

    total = round(gib * 2**30)
    return write_measurement(PolicyMeasurement(
        onnx="/opt/robot/policy.onnx", stand_in=stand_in, backend=backend, device="Orin (nvgpu)", machine="aarch64",
        rss_peak_bytes=total // 2, device_bytes=total - total // 2, total_bytes=total, rate_hz=30, ticks=600,
        tick_p99_ms=14.0, missed_deadlines=0), tmp_path / f"policy-{gib}.json")


def policy_checks(report) -> list[tuple[str, str]]:
    return [(c.status, c.message) for c in report.checks if c.section == "policy"]


def test_a_measured_policy_within_the_reservation(tmp_path):
    engine = planned_engine(tmp_path, 6.0)
    report = diagnose(engine, probe=orin(tmp_path), policy=policy_measured(tmp_path, 4.25))
    checks = policy_checks(report)
    assert checks[0] == ("info", "policy measured with tensorrt on Orin (nvgpu): 4.25 GiB (peak RSS 2.12 GiB + "
                                 "2.12 GiB device), " + checks[0][1].split("device), ")[1])
    assert checks[-1][0] == "ok" and "measured 4.25 GiB within the 6.00 GiB the plan reserved (reserve_gib = 6)" \
        in checks[-1][1]
    assert report.exit_code == 0


def test_a_policy_bigger_than_reserved_warns_and_one_that_does_not_fit_is_an_error(tmp_path):
    engine = planned_engine(tmp_path, 6.0)
    probe = orin(tmp_path)
    status, msg = policy_checks(diagnose(engine, probe=probe, policy=policy_measured(tmp_path, 8.0)))[-1]
    assert status == "warn" and msg.startswith("measured 8.00 GiB, but the plan reserved 6.00 GiB")
    assert "rebuild the engine with [policy] measured = " in msg
    report = diagnose(engine, probe=probe, policy=policy_measured(tmp_path, 58.0))
    status, msg = policy_checks(report)[-1]
    assert status == "error" and "this deployment does not fit" in msg and "over the device's 61.40 GiB by" in msg
    assert report.exit_code == 2


def test_stand_in_and_cpu_measurements_are_labelled_and_bad_files_are_errors(tmp_path):
    engine = planned_engine(tmp_path, 6.0)
    probe = orin(tmp_path)
    checks = policy_checks(diagnose(engine, probe=probe,
                                    policy=policy_measured(tmp_path, 0.1, stand_in=True, backend="onnxruntime")))
    text = "\n".join(m for _, m in checks)
    assert "STAND-IN policy measured" in text and "a STAND-IN policy (random weights)" in text
    assert ("warn", "measured with onnxruntime on a CPU, but the engine runs on the Orin's GPU: measure the policy "
                    "there (TensorRT) for a figure the plan can use") in checks
    checks = policy_checks(diagnose(None, probe=probe, policy=tmp_path / "none.json"))
    assert checks[0][0] == "error" and "none.json not found" in checks[0][1]
    code, lines = run_doctor(probe=probe, policy=policy_measured(tmp_path, 1.0))
    assert "give --engine DIR too" in "\n".join(lines)


@pytest.mark.parametrize("error, hint", [
    ("ImportError: libnvinfer.so.10: cannot open shared object file: No such file or directory", "nvidia-jetpack"),
    ("ImportError: libcusparseLt.so.0: cannot open shared object file", "cuSPARSELt"),
    ("ImportError: A module that was compiled using NumPy 1.x cannot be run in NumPy 2.1.0", "numpy==1.26.1"),
    # cuda-python 13.4.4's own words (a namespace package `cuda` without cudart), and its submodule form
    ("ImportError: cannot import name 'cudart' from 'cuda' (unknown location)", "cuda-python==12.6.2.post1"),
    ("ModuleNotFoundError: No module named 'cuda.cudart'", "cuda-python==12.6.2.post1"),
    ("ModuleNotFoundError: No module named 'cuda'", "cuda-python==12.6.2.post1"),
    # CUDA's own library, not the Python bindings: still JetPack
    ("ImportError: libcudart.so.12: cannot open shared object file: No such file or directory", "nvidia-jetpack"),
])
def test_a_tensorrt_llm_that_does_not_import_is_an_error_with_the_next_step(tmp_path, error, hint):
    """The metadata says 0.12.0, the import fails: the import's error and what to try, not "0.12.0 OK"."""
    report = diagnose(probe=orin(tmp_path, import_error=error))
    line = next(ln for ln in report.lines() if "import tensorrt_llm" in ln)
    assert line.strip().startswith("ERROR") and error in line and hint in line
    assert report.exit_code == 2 and not any("TensorRT-LLM 0.12.0 (imports)" in ln for ln in report.lines())


def test_a_cuda_python_without_cudart_is_named_with_its_fix(tmp_path, monkeypatch):
    """cuda-python 13 installs `cuda` as a namespace package without `cudart`; TensorRT-LLM 0.12 runs
    `from cuda import cudart` at package load. The same layout here, imported by a real child Python, gives
    the doctor the error the Orin gives and the doctor names the pin."""
    from orin_llm.doctor.host import import_hint, import_version

    (tmp_path / "cuda" / "bindings").mkdir(parents=True)  # 13.x: cuda/bindings/..., no cuda/__init__.py
    (tmp_path / "cuda" / "bindings" / "__init__.py").write_text("")
    (tmp_path / "trtllm_like.py").write_text("from cuda import cudart\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    version, error = import_version("trtllm_like")
    assert version is None and error.startswith("ImportError: cannot import name 'cudart' from 'cuda'")
    assert "pip install cuda-python==12.6.2.post1" in import_hint(error)


def test_the_imported_version_is_the_one_reported(tmp_path):
    probe = orin(tmp_path)
    probe.import_version = lambda name: ("0.12.0.dev2024080600", None)
    line = next(ln for ln in diagnose(probe=probe).lines() if "(imports)" in ln)
    assert "TensorRT-LLM 0.12.0.dev2024080600 (imports)" in line


def test_import_version_runs_a_child_python():
    from orin_llm.doctor.host import import_version

    assert import_version("json")[1] is None
    version, error = import_version("orin_llm_no_such_module")
    assert version is None and error == "ModuleNotFoundError: No module named 'orin_llm_no_such_module'"


def test_on_the_orin_a_version_off_the_pins_is_a_warning_with_the_fix(tmp_path):
    report = diagnose(probe=orin(tmp_path, versions={**ORIN_VERSIONS, "transformers": "4.57.1", "numpy": "1.26.1"}))
    warn = messages(report.lines(), "WARN")
    assert "transformers 4.57.1 is installed; constraints-0.12-jetson.txt pins transformers==4.43.4" in warn
    assert "numpy" not in warn and report.exit_code == 1


# ---------------------------------------------------------------------------
# JetPack 7: the edgellm backend (doctor/jetpack7.py)

R38 = "# R38 (release), REVISION: 4.0, GCID: 1, BOARD: generic, EABI: aarch64\n"
JP7_VERSIONS = {"tensorrt-edgellm": "0.11.0", "tensorrt": "10.16.0", "torch": "2.13.0"}


def test_jetpack_7_takes_the_edgellm_backend_and_checks_edgellm_not_tensorrt_llm(tmp_path):
    report = diagnose(probe=orin(tmp_path, release=R38, versions=JP7_VERSIONS, python="3.12.3", jetpack="7.2"))
    assert report.jetpack == 7 and report.exit_code == 0, report.lines()
    text = "\n".join(report.lines())
    assert "L4T R38.4.0 (JetPack 7)" in text and "backend edgellm (jetson/profiles/agx-orin-64gb-edgellm.toml)" in text
    assert "TensorRT Edge-LLM 0.11.0" in text and "TensorRT-LLM not checked" in text
    assert "checking JetPack, TensorRT Edge-LLM" in text
    missing = diagnose(probe=orin(tmp_path, release=R38, versions={"torch": "2.13.0"}, jetpack="7.2"))
    assert missing.exit_code == 2 and any("TensorRT Edge-LLM is not installed" in c.message and c.status == "error"
                                          for c in missing.checks)
    other = diagnose(probe=orin(tmp_path, release=R38, versions={**JP7_VERSIONS, "tensorrt-edgellm": "0.12.1"},
                                jetpack="7.2"))
    assert other.exit_code == 1 and any("0.12.1" in c.message and c.status == "warn" for c in other.checks)


def test_jetpack_6_still_takes_tensorrt_llm_and_says_so(tmp_path):
    report = diagnose(probe=orin(tmp_path))
    assert report.jetpack == 6 and "backend trtllm (jetson/profiles/agx-orin-64gb.toml)" in "\n".join(report.lines())


def test_an_engine_on_the_wrong_jetpack_is_an_error(tmp_path):
    engines = tmp_path / "engines"
    engines.mkdir()
    report = diagnose(trtllm_engine(engines), probe=orin(tmp_path, release=R38, versions=JP7_VERSIONS, jetpack="7.2"))
    assert any("a trtllm engine runs on JetPack 6, this Orin runs JetPack 7" in m for m in engine_errors(report))
