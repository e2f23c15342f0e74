"""Memory and power over time, tagged by benchmark phase.

Sources, best first: `tegrastats` (Jetson: RAM used and every power rail), jtop (jetson-stats),
else /proc/meminfo (memory only; no power reading on a PC, and the report says so)."""

from __future__ import annotations

import re
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Optional

RAIL = re.compile(r"(\w+) (\d+)mW/(\d+)mW")
RAM = re.compile(r"RAM (\d+)/(\d+)MB")


def parse_tegrastats(line: str) -> dict:
    """RAM used (bytes) and the sum of the instantaneous rail readings (mW)."""
    out: dict = {}
    m = RAM.search(line)
    if m:
        out["mem_used_bytes"] = int(m.group(1)) * 1024 * 1024
    rails = {name: int(now) for name, now, _avg in RAIL.findall(line)}
    if rails:
        out["power_mw"] = sum(rails.values())
        out["rails_mw"] = rails
    return out


def meminfo_used(path: str = "/proc/meminfo") -> int:
    fields = {}
    for line in Path(path).read_text().splitlines():
        key, _, rest = line.partition(":")
        fields[key] = int(rest.split()[0]) * 1024
    return fields["MemTotal"] - fields["MemAvailable"]


class Sampler:
    def __init__(self, interval_s: float = 0.5):
        self.interval_s = interval_s
        self.phase = "idle"
        self.samples: list[dict] = []
        self.source = "tegrastats" if shutil.which("tegrastats") else "/proc/meminfo"
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._proc: Optional[subprocess.Popen] = None
        self._t0 = time.monotonic()

    def _record(self, reading: dict) -> None:
        if reading:
            self.samples.append({"t_s": round(time.monotonic() - self._t0, 3), "phase": self.phase, **reading})

    def _loop_tegrastats(self) -> None:
        self._proc = subprocess.Popen(["tegrastats", "--interval", str(int(self.interval_s * 1000))],
                                      stdout=subprocess.PIPE, text=True)
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            if self._stop.is_set():
                break
            self._record(parse_tegrastats(line))

    def _loop_meminfo(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._record({"mem_used_bytes": meminfo_used()})

    def __enter__(self) -> Sampler:
        loop = self._loop_tegrastats if self.source == "tegrastats" else self._loop_meminfo
        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._proc is not None:
            self._proc.terminate()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def summary(self) -> dict:
        phases: dict[str, dict] = {}
        for s in self.samples:
            p = phases.setdefault(s["phase"], {"samples": 0, "peak_mem_used_bytes": 0, "power_mw": []})
            p["samples"] += 1
            p["peak_mem_used_bytes"] = max(p["peak_mem_used_bytes"], s.get("mem_used_bytes", 0))
            if "power_mw" in s:
                p["power_mw"].append(s["power_mw"])
        for p in phases.values():
            mw = p.pop("power_mw")
            p["mean_power_mw"] = sum(mw) / len(mw) if mw else None
        return {"source": self.source, "interval_s": self.interval_s, "phases": phases}
