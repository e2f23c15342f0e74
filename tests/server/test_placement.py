"""The daemon gives way to a policy by default: its CPUs, niceness and engine threads, read back from
the kernel for a real daemon process; and its prefill pacing, which the engine's scheduler honours."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orin_llm.placement import available_cpus, format_cpus

pytestmark = pytest.mark.full


def kernel_view(pid: int) -> dict:
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    return {"cpus": status["Cpus_allowed_list"].strip(),
            "thread_cpus": {format_cpus(os.sched_getaffinity(t)) for t in tids},
            "nice": {os.getpriority(os.PRIO_PROCESS, t) for t in tids}}


def test_the_shared_daemon_runs_with_the_protective_defaults(daemon, client):
    client.plan("Open the fridge.", max_tokens=2, goal="none")  # the engine's threads exist now
    view = kernel_view(daemon.proc.pid)
    avail = available_cpus()
    expected = format_cpus(avail - {min(avail)}) if len(avail) > 1 else format_cpus(avail)
    base = os.getpriority(os.PRIO_PROCESS, 0)
    assert view["cpus"] == expected and view["thread_cpus"] == {expected}  # every thread, OpenMP's included
    assert view["nice"] == {base + 10}
    assert f"placement: CPUs {expected}, nice {base + 10}" in daemon.log()


def test_cpus_all_nice_0_is_the_daemon_as_before(start_daemon, client):
    d = start_daemon("--cpus", "all", "--nice", "0")
    view = kernel_view(d.proc.pid)
    assert view["cpus"] == format_cpus(available_cpus()) and view["nice"] == {os.getpriority(os.PRIO_PROCESS, 0)}


def test_prefill_pacing_reaches_the_scheduler(start_daemon, client):
    d = start_daemon("--prefill-chunk-tokens", "64")
    health = d.client().health()
    assert health["scheduler"]["prefill_chunk_tokens"] == 64  # a long prompt: 64 tokens a step
    assert d.client().plan("Open the fridge.", max_tokens=16)["plan"]
