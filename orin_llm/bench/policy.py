"""The policy next door: what planning does to the robot's control loop, and what the control loop
does to planning. Two processes, as on a robot: the policy runner (orin_llm/policy/runner.py) ticking
at its control rate, and the planning daemon (server/process.py DaemonProcess) answering planning
requests sent back to back.

Phases, each measured on its own:

* `policy_alone` — the policy at its rate, nothing else running.
* `planner_alone` — planning requests back to back, no policy: the reference for the planner's cost.
* `together_unprotected` — both, the daemon started as it always was (no placement settings).
* `planner_alone_protected` — the planner alone with the settings that protect the policy.
* `together` — both, with those settings: the daemon on the CPUs the policy does not use, niced,
  its engine threads matched to its CPUs; the policy on its own CPU.

The policy's ticks are judged inside the window of the planning calls (first call's start to the
last call's end, CLOCK_MONOTONIC in both processes). Numbers from a STAND-IN policy are labelled so.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Optional

from ..client import PlannerClient
from ..placement import available_cpus, format_cpus, parse_cpus
from ..policy.loop import Tick, summarize
from ..policy.process import PolicyProcess
from ..server.process import DaemonProcess
from .common import progress, pyplot, write_json

TASKS = ["Bring the mug from the kitchen to the coffee table.", "Switch off the bedside lamp.",
         "Put the towel in the laundry basket.", "Open the fridge.", "Close the front door.",
         "Pick up the book from the sofa.", "Water the plant in the living room.", "Go to the kitchen."]
OPTS = {"max_tokens": 48, "temperature": 0.0}


def protective_settings(policy_cpus: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(daemon args, policy args) that keep the policy's CPUs to the policy and let it win the scheduler."""
    rest = available_cpus() - parse_cpus(policy_cpus)
    daemon = ("--nice", "10")
    if rest:
        daemon = ("--cpus", format_cpus(rest), "--threads", str(len(rest)), *daemon)
    return daemon, ("--cpus", policy_cpus)


def _rss_peak_bytes(pid: int) -> int:
    from ..policy.measure import proc_status_kib

    return proc_status_kib(pid).get("VmHWM", 0) * 1024


def _plan_back_to_back(client: PlannerClient, seconds: float, calls: list) -> list[dict]:
    """Planning requests one after another for `seconds` (the one in flight then finishes)."""
    out = []
    end = time.monotonic() + seconds
    i = 0
    while time.monotonic() < end or not out:
        t0 = time.monotonic()
        r = client.plan(TASKS[i % len(TASKS)], **OPTS)
        t1 = time.monotonic()
        calls.append((t0, t1))
        t = r["timings"]
        out.append({"latency_ms": (t1 - t0) * 1e3, "ttft_ms": t["ttft_ms"],
                    "decode_tokens_per_s": t["decode_tokens_per_s"], "completion_tokens": t["completion_tokens"]})
        i += 1
    return out


def _planner_figures(rows: list[dict]) -> dict:
    return {"requests": len(rows),
            "ttft_ms_median": statistics.median(r["ttft_ms"] for r in rows),
            "decode_tokens_per_s_median": statistics.median(r["decode_tokens_per_s"] for r in rows),
            "latency_ms_median": statistics.median(r["latency_ms"] for r in rows),
            "completion_tokens_median": statistics.median(r["completion_tokens"] for r in rows)}


def _ticks(result: dict) -> list[Tick]:
    return [Tick(*t) for t in result["ticks"]]


def _policy_phase(result: dict, rate_hz: float, since: Optional[float] = None, until: Optional[float] = None) -> dict:
    return {**summarize(_ticks(result), rate_hz, since, until), "placement": result["placement"],
            "backend": result["backend"], "device": result["device"]}


def _co_run(engine_dir: Path, onnx: Path, rate_hz: float, seconds: float, work: Path, daemon_args: tuple,
            policy_args: tuple, tag: str) -> dict:
    """The planner alone, then the planner with the policy ticking next to it, on one daemon."""
    out: dict = {"daemon_args": list(daemon_args), "policy_args": list(policy_args)}
    with DaemonProcess(engine_dir, extra=daemon_args) as daemon, PlannerClient(daemon.socket, timeout_s=600) as c:
        for t in TASKS[:3]:  # warm-up
            c.plan(t, **OPTS)
        progress(f"[{tag}] planner alone for {seconds:g} s")
        out["planner_alone"] = _planner_figures(_plan_back_to_back(c, seconds, []))
        progress(f"[{tag}] policy at {rate_hz:g} Hz with planning back to back for {seconds:g} s")
        calls: list = []
        with PolicyProcess(onnx, rate_hz, work / f"together-{tag}", policy_args) as policy:
            time.sleep(1.0)  # a second of ticks before the first call: the plot shows the change
            rows = _plan_back_to_back(c, seconds, calls)
            time.sleep(1.0)
            result = policy.stop()
        out["planner_rss_peak_bytes"] = _rss_peak_bytes(daemon.proc.pid)
    out["planner_together"] = _planner_figures(rows)
    out["policy_together"] = _policy_phase(result, rate_hz, calls[0][0], calls[-1][1])
    out["calls"] = [[round(a, 6), round(b, 6)] for a, b in calls]
    out["ticks"] = result["ticks"]
    out["policy_memory"] = result["memory"]
    return out


def _ratios(alone: dict, together: dict, reference: dict) -> dict:
    return {"ttft_together_over_alone": together["ttft_ms_median"] / alone["ttft_ms_median"],
            "decode_together_over_alone": together["decode_tokens_per_s_median"] / alone["decode_tokens_per_s_median"],
            "ttft_over_reference": together["ttft_ms_median"] / reference["ttft_ms_median"],
            "decode_over_reference": together["decode_tokens_per_s_median"] / reference["decode_tokens_per_s_median"]}


def run(engine_dir: Path, out: Path, quick: bool = False, policy_onnx: Optional[Path] = None,
        rate_hz: float = 30.0, policy_cpus: str = "0") -> dict:
    from ..manifest import load_manifest
    from ..policy.standin import export_stand_in, is_stand_in

    seconds = 6.0 if quick else 20.0
    work = out / "policy-runs"
    if policy_onnx is None:
        policy_onnx = export_stand_in("cpu", work / "stand-in-cpu.onnx")
        progress(f"stand-in policy (cpu shape, random weights) written to {policy_onnx}")
    stand_in = is_stand_in(policy_onnx)
    daemon_args, policy_args = protective_settings(policy_cpus)
    data: dict = {"engine_dir": str(engine_dir), "policy_onnx": str(policy_onnx), "stand_in": stand_in,
                  "rate_hz": rate_hz, "seconds_per_phase": seconds, "request": OPTS,
                  "protective": {"daemon_args": list(daemon_args), "policy_args": list(policy_args)}}
    if stand_in:
        data["note"] = "STAND-IN policy: random weights; honest for timing and memory, never for behaviour"

    progress(f"policy alone at {rate_hz:g} Hz for {seconds:g} s")
    with PolicyProcess(policy_onnx, rate_hz, work / "alone", policy_args) as policy:
        time.sleep(seconds)
        alone = policy.stop()
    phases = {"policy_alone": _policy_phase(alone, rate_hz)}
    unprotected = _co_run(engine_dir, policy_onnx, rate_hz, seconds, work, (), (), "unprotected")
    protected = _co_run(engine_dir, policy_onnx, rate_hz, seconds, work, daemon_args, policy_args, "protected")
    phases["together_unprotected"] = unprotected["policy_together"]
    phases["together"] = protected["policy_together"]
    ref = unprotected["planner_alone"]
    data["phases"] = phases
    data["planner"] = {
        "alone": ref, "together_unprotected": unprotected["planner_together"],
        "alone_protected": protected["planner_alone"], "together": protected["planner_together"],
        "protected_alone_over_alone": _ratios(ref, protected["planner_alone"], ref),
        "together_over_alone": _ratios(ref, protected["planner_together"], ref),
        "together_unprotected_over_alone": _ratios(ref, unprotected["planner_together"], ref)}
    plan = load_manifest(engine_dir).memory_plan or {}
    data["memory"] = {
        "policy_planned_bytes": plan.get("policy_bytes"), "policy_planned_source": plan.get("policy_source"),
        "policy_measured": protected["policy_memory"],
        "planner_planned_bytes": (plan.get("total_bytes") or 0) - (plan.get("policy_bytes") or 0)
        - (plan.get("reserved_bytes") or 0) or None,
        "planner_measured_rss_peak_bytes": protected["planner_rss_peak_bytes"]}
    for name, key in (("policy_alone", "policy_alone"), ("together (unprotected)", "together_unprotected"),
                      ("together (protected)", "together")):
        p = phases[key]
        progress(f"{name}: p50 {p['tick_p50_ms']:.2f} ms, p99 {p['tick_p99_ms']:.2f} ms, "
                 f"max {p['tick_max_ms']:.2f} ms, "
                 f"{p['missed_deadlines']} missed of {p['ticks']}")
    r = data["planner"]["together_over_alone"]
    progress(f"planner with the protective settings next to the policy: TTFT ×{r['ttft_over_reference']:.2f}, "
             f"decode ×{r['decode_over_reference']:.2f} of planning alone")
    data["timeline"] = {"unprotected": {"calls": unprotected["calls"], "ticks": unprotected["ticks"]},
                        "protected": {"calls": protected["calls"], "ticks": protected["ticks"]},
                        "alone": {"calls": [], "ticks": alone["ticks"]}}
    write_json(out, "policy", data)
    _plot(data, out / "policy.png")
    return data


def _plot(data: dict, path: Path) -> None:
    plt = pyplot()
    panels = [("alone", "policy alone"), ("unprotected", "with planning, daemon as before"),
              ("protected", "with planning, protective settings")]
    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 7), sharey=True)
    period = 1e3 / data["rate_hz"]
    for ax, (key, title) in zip(axes, panels, strict=True):
        tl = data["timeline"][key]
        ticks = tl["ticks"]
        t0 = ticks[0][1] if ticks else 0.0
        for a, b in tl["calls"]:
            ax.axvspan(a - t0, b - t0, color="tab:orange", alpha=0.15, lw=0)
        xs = [t[1] - t0 for t in ticks]
        ys = [(t[3] - t[1]) * 1e3 for t in ticks]
        ax.plot(xs, ys, ".", ms=2, color="tab:blue")
        ax.axhline(period, color="tab:red", lw=0.8, ls="--")
        missed = sum(y > period for y in ys)
        ax.set_title(f"{title}: {missed} late ticks", fontsize=9)
        ax.set_ylabel("tick latency (ms)")
    axes[-1].set_xlabel("time (s); shaded: planning calls; dashed: deadline")
    label = "STAND-IN policy" if data["stand_in"] else "policy"
    fig.suptitle(f"{label} at {data['rate_hz']:g} Hz next to the planning daemon", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
