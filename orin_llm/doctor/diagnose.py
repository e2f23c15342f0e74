"""Running the doctor: every section in turn, into one report."""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Union

from .engine import check_engine, check_policy
from .host import Probe, meminfo_kib, read_file
from .machine import check_device, check_memory, check_power, check_software
from .report import Report


def run_doctor(engine_dir: Union[str, Path, None] = None, probe: Optional[Probe] = None,
               policy: Union[str, Path, None] = None) -> tuple[int, list[str]]:
    """(exit code, report lines): 0 ok, 1 warnings, 2 errors (see the package docstring)."""
    report = diagnose(engine_dir, probe, policy)
    return report.exit_code, report.lines()


def diagnose(engine_dir: Union[str, Path, None] = None, probe: Optional[Probe] = None,
             policy: Union[str, Path, None] = None) -> Report:
    p = probe or Probe()
    release = read_file(p.tegra_release)
    report = Report(jetson=release is not None)
    meminfo = read_file(p.proc_meminfo)
    mem_total = meminfo_kib(meminfo, "MemTotal")
    name = check_device(report, p, release, mem_total)
    installed_trtllm = check_software(report, p)
    if report.jetson:
        check_power(report, p)
    check_memory(report, p, meminfo, mem_total)
    if engine_dir is not None:
        check_engine(report, p, Path(engine_dir), name, installed_trtllm, mem_total)
    if policy is not None:
        check_policy(report, Path(policy), Path(engine_dir) if engine_dir is not None else None)
    return report
