"""CPU affinity, niceness and SCHED_FIFO, applied for real (in child processes: niceness cannot be
lowered again without privileges), and the daemon's defaults derived from the CPUs there are."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from orin_llm.errors import OrinError
from orin_llm.placement import available_cpus, daemon_placement, format_cpus, parse_cpus

from .conftest import ROOT


def test_cpu_lists_parse_and_format_like_taskset():
    assert parse_cpus("0") == {0} and parse_cpus("1-3") == {1, 2, 3} and parse_cpus("0,2-3, 5") == {0, 2, 3, 5}
    assert format_cpus({0, 1, 2, 5, 7, 8}) == "0-2,5,7-8" and format_cpus({3}) == "3"
    for bad in ("", "a", "3-1", "-1", "1-"):
        with pytest.raises(OrinError, match="give CPU numbers and ranges like 0 or 1-3"):
            parse_cpus(bad)


def test_daemon_defaults_leave_the_lowest_cpu_to_the_policy():
    avail = available_cpus()
    where, threads = daemon_placement()
    if len(avail) > 1:
        assert parse_cpus(where.cpus) == avail - {min(avail)} and threads == len(avail) - 1
    else:
        assert where.cpus is None and threads is None
    assert where.nice == 10
    where, threads = daemon_placement("all", 0)
    assert where.cpus is None and where.nice is None and threads is None
    assert daemon_placement("all", 5, threads=3) == (type(where)(None, 5), 3)
    with pytest.raises(OrinError, match="CPU list 'x'"):
        daemon_placement("x")


def _apply_in_child(*args: str) -> subprocess.CompletedProcess:
    code = ("import json, sys, threading; from orin_llm import placement as p; "
            "t = threading.Thread(target=lambda: __import__('time').sleep(1)); t.start(); "  # a thread already there
            "a = json.loads(sys.argv[1]); r = p.apply(p.Placement(**a)); "
            "import os; tids = os.listdir('/proc/self/task'); "
            "r['thread_cpus'] = sorted({p.format_cpus(os.sched_getaffinity(int(x))) for x in tids}); "
            "r['thread_nice'] = sorted({os.getpriority(os.PRIO_PROCESS, int(x)) for x in tids}); print(json.dumps(r))")
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=ROOT, timeout=60)


def test_apply_sets_every_thread_and_reads_back_what_is_in_force():
    lowest = min(available_cpus())
    proc = _apply_in_child(json.dumps({"cpus": str(lowest), "nice": 3}))
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    base = os.getpriority(os.PRIO_PROCESS, 0)
    assert r["cpus"] == str(lowest) and r["thread_cpus"] == [str(lowest)]
    assert r["nice"] == base + 3 and r["thread_nice"] == [base + 3]
    assert r["scheduler"] == "SCHED_OTHER"


def test_refusals_say_what_to_change():
    proc = _apply_in_child(json.dumps({"cpus": "4095"}))
    assert proc.returncode != 0 and "CPUs 4095 are not available to this process" in proc.stderr
    proc = _apply_in_child(json.dumps({"rt_priority": 200}))
    assert "--rt-priority 200: give 1-99 (SCHED_FIFO)" in proc.stderr
    proc = _apply_in_child(json.dumps({"rt_priority": 10}))
    if os.geteuid() == 0:  # root may: the loop then runs SCHED_FIFO
        assert proc.returncode == 0 and json.loads(proc.stdout)["scheduler"] == "SCHED_FIFO"
    else:
        assert "SCHED_FIFO is not permitted for this user" in proc.stderr
