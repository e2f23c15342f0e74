"""The build preflight (orin_llm/doctor/preflight.py) against fixture files: swap, free memory, a
Jetson at all, its power mode, each warning with its fix."""

from __future__ import annotations

from pathlib import Path

from orin_llm.doctor.preflight import preflight


def proc_files(tmp_path: Path, swaps: str, meminfo: str, jetson: bool = True) -> dict:
    (tmp_path / "swaps").write_text(swaps)
    (tmp_path / "meminfo").write_text(meminfo)
    tegra = tmp_path / "nv_tegra_release"
    if jetson:
        tegra.write_text("# R36 (release), REVISION: 4.0\n")
    return {"proc_swaps": tmp_path / "swaps", "proc_meminfo": tmp_path / "meminfo", "tegra_release": tegra}


SWAPS_HEADER = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"
MEMINFO_LOW = "MemTotal:       64335836 kB\nMemFree:         2000000 kB\nMemAvailable:    4194304 kB\n" \
              "SwapTotal:             0 kB\nSwapFree:              0 kB\n"
MEMINFO_OK = "MemTotal:       64335836 kB\nMemAvailable:   50331648 kB\nSwapTotal:    16777216 kB\n"


def test_preflight_no_swap_low_memory_slow_power_mode(tmp_path):
    calls = []

    def nvpmodel(argv):
        calls.append(argv)
        return "NV Power Mode: MODE_30W\n2\n"

    w = preflight(run_cmd=nvpmodel, **proc_files(tmp_path, SWAPS_HEADER, MEMINFO_LOW))
    assert calls == [["nvpmodel", "-q"]]
    assert len(w) == 3, w
    assert "0.0 GiB of disk swap" in w[0] and "mkswap" in w[0] and "swapon" in w[0]
    assert "4.0 GiB of memory available" in w[1] and "stop" in w[1]
    assert "MODE_30W" in w[2] and "nvpmodel -m 0" in w[2] and "jetson_clocks" in w[2]


def test_preflight_all_good(tmp_path):
    swaps = SWAPS_HEADER + "/swapfile                               file\t\t16777216\t0\t\t-2\n"
    files = proc_files(tmp_path, swaps, MEMINFO_OK)
    assert preflight(run_cmd=lambda argv: "NV Power Mode: MAXN\n0\n", **files) == []


def test_preflight_zram_is_not_swap_relief(tmp_path):
    swaps = SWAPS_HEADER + "".join(f"/dev/zram{i}  partition\t4000000\t0\t5\n" for i in range(4))
    w = preflight(run_cmd=lambda argv: "NV Power Mode: MAXN\n", **proc_files(tmp_path, swaps, MEMINFO_OK))
    assert len(w) == 1 and "zram" in w[0] and "0.0 GiB of disk swap" in w[0]


def test_preflight_swaptotal_when_proc_swaps_is_unreadable(tmp_path):
    files = proc_files(tmp_path, "", MEMINFO_OK)
    files["proc_swaps"] = tmp_path / "missing"
    assert preflight(run_cmd=lambda argv: "NV Power Mode: MAXN\n", **files) == []


def test_preflight_not_a_jetson_says_so_once_and_skips_nvpmodel(tmp_path):
    def nvpmodel(argv):
        raise AssertionError("nvpmodel must not run off a Jetson")

    swaps = SWAPS_HEADER + "/swapfile file 16777216 0 -2\n"
    w = preflight(run_cmd=nvpmodel, **proc_files(tmp_path, swaps, MEMINFO_OK, jetson=False))
    assert len(w) == 1 and "not a Jetson" in w[0] and "build on the Orin" in w[0]


def test_preflight_nvpmodel_unavailable(tmp_path):
    swaps = SWAPS_HEADER + "/swapfile file 16777216 0 -2\n"
    w = preflight(run_cmd=lambda argv: None, **proc_files(tmp_path, swaps, MEMINFO_OK))
    assert len(w) == 1 and "power mode" in w[0] and "jetson_clocks" in w[0]
