"""Where a process runs and how the kernel ranks it: CPU affinity, niceness, real-time priority.

The policy runner and the planning daemon both take these settings (`--cpus`, `--nice`,
`--rt-priority`), so that the control loop keeps its core and wins the scheduler when both want the
CPU. Linux only (sched_setaffinity, setpriority, sched_setscheduler); every refusal the kernel gives
is turned into one line that says what to change.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Optional

from .errors import OrinError


def parse_cpus(spec: str) -> set[int]:
    """`0`, `1-3`, `0,2-3` → a set of CPU numbers (the `taskset -c` / cpuset list format)."""
    cpus: set[int] = set()
    for part in spec.split(","):
        m = re.fullmatch(r"\s*(\d+)(?:-(\d+))?\s*", part)
        if m is None or (m.group(2) is not None and int(m.group(2)) < int(m.group(1))):
            raise OrinError(f"CPU list {spec!r}: give CPU numbers and ranges like 0 or 1-3 or 0,2-3")
        cpus.update(range(int(m.group(1)), int(m.group(2) or m.group(1)) + 1))
    return cpus


def format_cpus(cpus: set[int]) -> str:
    out: list[str] = []
    for c in sorted(cpus):
        if out and out[-1].split("-")[-1] == str(c - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{c}"
        else:
            out.append(str(c))
    return ",".join(out)


def available_cpus() -> set[int]:
    return set(os.sched_getaffinity(0))


DAEMON_NICE = 10  # the planner's default niceness: the policy wins every contended time slice


def daemon_placement(cpus: str = "auto", nice: int = DAEMON_NICE,
                     threads: Optional[int] = None) -> tuple[Placement, Optional[int]]:
    """The planning daemon's defaults give way to a policy on the same machine (docs/BENCHMARKS.md,
    "The policy next door"): `auto` keeps the lowest CPU free for the policy and runs on the others
    (on one CPU: that one), with as many engine threads as CPUs, niced. `all` leaves the affinity as
    inherited. Returns the placement and the engine thread count (None: the engine's own choice)."""
    if cpus == "auto":
        avail = available_cpus()
        cpus = format_cpus(avail - {min(avail)}) if len(avail) > 1 else None
    elif cpus == "all":
        cpus = None
    else:
        parse_cpus(cpus)  # a clear error now, not after the socket is claimed
    if threads is None and cpus is not None:
        threads = len(parse_cpus(cpus))
    return Placement(cpus, nice or None), threads


@dataclass(frozen=True)
class Placement:
    cpus: Optional[str] = None  # CPU list, None: leave the inherited affinity
    nice: Optional[int] = None  # added niceness (os.nice), None: leave it
    rt_priority: Optional[int] = None  # SCHED_FIFO priority 1-99, None: stay SCHED_OTHER

    def as_dict(self) -> dict:
        return {"cpus": self.cpus, "nice": self.nice, "rt_priority": self.rt_priority}


def apply(p: Placement) -> dict:
    """Apply to this process, every thread it has now and (by inheritance) every thread it starts later.
    Returns what is in force afterwards, read back from the kernel."""
    if p.cpus is not None:
        cpus = parse_cpus(p.cpus)
        allowed = available_cpus()
        if not cpus <= allowed:
            raise OrinError(f"--cpus {p.cpus}: CPUs {format_cpus(cpus - allowed)} are not available to this "
                            f"process (allowed: {format_cpus(allowed)})")
        # sched_setaffinity(0) sets the calling thread only: set every thread there is already (an
        # OpenMP or onnxruntime pool started at import would otherwise keep all cores).
        for tid in _threads():
            try:
                os.sched_setaffinity(tid, cpus)
            except ProcessLookupError:  # the thread ended meanwhile
                pass
    if p.nice is not None:
        if p.nice < 0 and os.geteuid() != 0:
            _check_nice_allowed(p.nice)
        try:
            for tid in _threads():  # niceness is per thread on Linux, like the affinity
                os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + p.nice)
        except PermissionError:
            raise OrinError(f"--nice {p.nice}: not permitted (a negative value needs root or CAP_SYS_NICE, "
                            f"or an RLIMIT_NICE in /etc/security/limits.conf)") from None
    if p.rt_priority is not None:
        if not 1 <= p.rt_priority <= 99:
            raise OrinError(f"--rt-priority {p.rt_priority}: give 1-99 (SCHED_FIFO)")
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(p.rt_priority))
        except PermissionError:
            raise OrinError(f"--rt-priority {p.rt_priority}: SCHED_FIFO is not permitted for this user; run as "
                            "root, grant CAP_SYS_NICE, or set an rtprio limit in /etc/security/limits.conf "
                            "(ROS 2's real-time setup does this)") from None
    return in_force()


def rt_permitted() -> bool:
    """Whether this user may ask for SCHED_FIFO at all (root, or an rtprio limit above 0)."""
    import resource

    return os.geteuid() == 0 or resource.getrlimit(resource.RLIMIT_RTPRIO)[0] > 0


def _check_nice_allowed(nice: int) -> None:
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NICE)
    floor = 20 - soft  # RLIMIT_NICE n allows niceness down to 20 - n
    if os.getpriority(os.PRIO_PROCESS, 0) + nice < floor:
        raise OrinError(f"--nice {nice}: a negative niceness needs root, CAP_SYS_NICE or an RLIMIT_NICE "
                        f"(now {soft}) in /etc/security/limits.conf; raise the other process's niceness instead")


def _threads() -> list[int]:
    try:
        return [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        return [0]


def in_force() -> dict:
    policy = os.sched_getscheduler(0)
    return {"cpus": format_cpus(available_cpus()), "nice": os.getpriority(os.PRIO_PROCESS, 0),
            "scheduler": "SCHED_FIFO" if policy == os.SCHED_FIFO else "SCHED_RR" if policy == os.SCHED_RR
            else "SCHED_OTHER",
            "rt_priority": os.sched_getparam(0).sched_priority}
