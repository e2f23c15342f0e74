"""The build preflight: warnings, each with its fix, about this machine before a TensorRT-LLM build
(disk swap, free memory, a Jetson at all, its power mode). `orin-llm build` prints them; the doctor
shows them in its memory and power sections."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from .host import default_run_cmd, meminfo_kib, power_mode, read_file, swap_kib


def preflight(min_swap_gib: float = 8, min_free_gib: float = 12, *, proc_swaps: str | Path = "/proc/swaps",
              proc_meminfo: str | Path = "/proc/meminfo", tegra_release: str | Path = "/etc/nv_tegra_release",
              run_cmd: Callable[[list[str]], str | None] | None = None) -> list[str]:
    """Warnings, each with its fix, about this machine before a TensorRT-LLM build.

    ``run_cmd(argv)`` returns a command's stdout, or None when it cannot run (default: subprocess).
    """
    warnings: list[str] = []
    gib = 1024 * 1024  # KiB per GiB
    meminfo = read_file(proc_meminfo)

    # Swap. zram (JetPack's default swap) is compressed RAM, so it does not count as relief here.
    swaps = read_file(proc_swaps)
    if swaps is not None:
        disk_kib, zram_kib = swap_kib(swaps)
    else:
        disk_kib, zram_kib = meminfo_kib(meminfo, "SwapTotal") or 0, 0
    if disk_kib < min_swap_gib * gib:
        zram = f" (+{zram_kib / gib:.1f} GiB zram, which is compressed RAM)" if zram_kib else ""
        warnings.append(
            f"only {disk_kib / gib:.1f} GiB of disk swap{zram}; quantizing and building can run out of "
            f"memory: add {min_swap_gib:g} GiB or more, e.g. sudo fallocate -l {math.ceil(min_swap_gib)}G "
            "/swapfile && sudo chmod 600 /swapfile && sudo mkswap /swapfile && sudo swapon /swapfile")

    available = meminfo_kib(meminfo, "MemAvailable")
    if available is not None and available < min_free_gib * gib:
        warnings.append(
            f"only {available / gib:.1f} GiB of memory available (want {min_free_gib:g} GiB); stop the "
            "policy model, the ROS 2 graph and other GPU processes, or the desktop "
            "(sudo systemctl isolate multi-user.target), before building")

    if not Path(tegra_release).exists():
        warnings.append(
            f"not a Jetson ({tegra_release} not found): TensorRT engines only run on the GPU they are "
            "built for, so build on the Orin itself")
        return warnings
    query = (run_cmd or default_run_cmd)(["nvpmodel", "-q"])
    advice = "run sudo nvpmodel -m 0 && sudo jetson_clocks before building and serving"
    if query is None:
        warnings.append(f"could not read the Jetson power mode (nvpmodel -q failed); {advice}")
    else:
        mode = power_mode(query)
        if mode is None:
            warnings.append(f"could not parse the power mode from nvpmodel -q; {advice}")
        elif "MAXN" not in mode.upper():
            warnings.append(f"Jetson power mode is {mode}, not MAXN: builds and calibration run slower; "
                            f"{advice}")
    return warnings
