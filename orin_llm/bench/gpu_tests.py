"""The GPU check's test stage (orin_llm/bench/gpu.py): the CUDA tests in groups, most important first,
each a pytest subprocess under its own time cap, so a slow group cannot starve the measurements (the
second H200 run lost its whole test stage to one 75 s timeout). Each group reports what ran, test by
test, also when its cap cut it short; a group's outcome can turn off the new kernels it tests for the
measurements after it (`gate`), so a kernel that fails on this GPU costs its numbers, not the run's.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parents[2]


class Group(NamedTuple):
    name: str
    calls: tuple[tuple[str, ...], ...]  # one pytest call's arguments each (files, -k)
    cap_s: float  # this group's seconds at most


# first: the new kernels compiled at a 3B layer's shapes (they gate the measurements: the int4 GEMV and
# the decode family, the fused step ops) and the plan's CUDA choices; the rest waits for the measurements
# (issue 47: both transformers baselines must fit in the same 6-minute run)
FIRST = (
    Group("new_kernels", (("tests/kernels/test_triton_cuda.py", "-k", "q4_gemv or step_ops"),
                          ("tests/kernels/test_triton_step_ops.py",),  # (in every dtype, odd sizes)
                          ("tests/runtime/test_cuda_plan.py",)), 50),
)
# last, with what time is left: the engine on CUDA (plan, graphs, greedy speculation identical, masks on
# the device; the speculation stage measures the identity too), the other kernels, the graphs' bookkeeping
REST = (
    Group("engine", (("tests/runtime/test_cuda.py",),), 60),
    Group("other_kernels", (("tests/kernels/test_triton_cuda.py", "-k", "not (q4_gemv or step_ops)"),
                            # (the fixed-shape step's CPU engine tests are CI's: minutes on a CPU)
                            ("tests/runtime/test_cuda_graphs.py", "-k", "not fixed_shape")), 60),
)
_LINE = re.compile(r"^(\S+::\S+) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)")
_WHY = re.compile(r"^(?:FAILED|ERROR) (\S+::\S+) - (.*)$")  # -rA's summary: a failure and its message


def run_group(group: Group, tokenizer: Path, left_s: float) -> dict[str, Any]:
    """One group in a subprocess, killed at min(its cap, left_s); its tests' outcomes from pytest's -v lines."""
    cap = max(10.0, min(group.cap_s, left_s))
    # (unbuffered: a group killed at its cap keeps the lines of the tests that finished)
    # (COLUMNS: -rA's summary lines, with each failure's message, not cut at 80 columns)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "1000", "ORIN_LLM_TEST_TOKENIZER": str(tokenizer),
           "PYTHONPATH": f"{ROOT}:{os.environ.get('PYTHONPATH', '')}"}
    out: dict[str, Any] = {"cap_s": round(cap, 1), "passed": 0, "failed": 0, "errors": 0, "skipped": 0,
                           "failing": [], "why": {}, "e_lines": [], "returncodes": []}
    started = time.perf_counter()
    log = Path(f"/tmp/orin_llm_gpu_tests_{group.name}.log")
    tail = ""
    for args in group.calls:
        left = cap - (time.perf_counter() - started)
        if left < 5:
            out["cut"] = f"no time left for {' '.join(args)}"
            break
        cmd = [sys.executable, "-m", "pytest", "-v", "-rA", "-p", "no:cacheprovider", *args]
        with log.open("w") as f:
            proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT)
            try:
                out["returncodes"].append(proc.wait(timeout=left))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                out["returncodes"].append(None)
                out["cut"] = f"cut at its cap of {cap:.0f} s in {' '.join(args)}"
        text = log.read_text(errors="replace")
        if not tail or not out["failing"]:  # (the tail of the first call with a failure stays)
            tail = text[-1500:]
        for line in text.splitlines():
            m = _WHY.match(line)
            if m:
                out["why"][m.group(1)] = m.group(2)[:400]
            elif line.startswith("E ") and len(out["e_lines"]) < 40:  # (a multi-line message: assert_close's)
                out["e_lines"].append(line[:300])
        for name, outcome in _outcomes(text):
            key = {"PASSED": "passed", "FAILED": "failed", "ERROR": "errors", "SKIPPED": "skipped"}.get(outcome)
            if key:
                out[key] += 1
            if outcome in ("FAILED", "ERROR"):
                out["failing"].append(name)
    out["seconds"] = round(time.perf_counter() - started, 1)
    out["ok"] = not out["failed"] and not out["errors"] and "cut" not in out and \
        all(rc in (0, 5) for rc in out["returncodes"])  # (5: every test deselected or skipped)
    out["tail"] = tail
    return out


def _outcomes(text: str) -> list[tuple[str, str]]:
    """(test, outcome) from pytest -v's progress lines, once each (-rA's summary repeats them)."""
    seen: dict[str, str] = {}
    for line in text.splitlines():
        m = _LINE.match(line)
        if m and m.group(1) not in seen:
            seen[m.group(1)] = m.group(2)
    return list(seen.items())


def run_groups(groups: tuple[Group, ...], tokenizer: Path, left: Callable[[], float]) -> dict[str, Any]:
    """Every group in order, each under its cap and the run's time left (`left()` seconds, 15 kept back)."""
    out: dict[str, Any] = {}
    for g in groups:
        remaining = left() - 15
        if remaining < 15:
            out[g.name] = {"ok": False, "not_run": f"{remaining + 15:.0f} s left"}
            continue
        out[g.name] = run_group(g, tokenizer, remaining)
    out["summary"] = "; ".join(  # (the log line: the groups themselves are too long to print)
        f"{name}: " + (f"not run, {v['not_run']}" if "not_run" in v else
                       f"{v['passed']} passed, {v['failed'] + v['errors']} failed, {v['skipped']} skipped"
                       + (f" ({v['cut']})" if "cut" in v else ""))
        for name, v in out.items())
    return out


def gate(results: dict[str, Any]) -> dict[str, str]:
    """The new kernels to turn off for the measurements, from the new_kernels group: name → why."""
    g = results.get("new_kernels")
    if not g or "returncodes" not in g:
        return {}
    failing = " ".join(g.get("failing", []))
    off = {}
    ran = g.get("passed", 0) + g.get("failed", 0) + g.get("errors", 0)
    if "q4_gemv" in failing or (ran == 0 and not g["ok"]):
        off["int4_kernel"] = "the Triton GEMV's CUDA tests failed here: torch's int4 kernel only"
    if "step_ops" in failing or (ran == 0 and not g["ok"]):
        off["fused_step"] = "the fused step ops' CUDA tests failed here: unfused"
    return off
