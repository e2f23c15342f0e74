"""The policy next door: what planning does to the robot's control loop, and what the control loop
does to planning. Two processes, as on a robot: the policy runner (orin_llm/policy/runner.py) ticking
at its control rate, and the planning daemon (server/process.py DaemonProcess) answering planning
requests sent back to back.

Phases, each measured on its own:

* `policy_alone` — the policy at its rate, nothing else running.
* `planner_alone` — planning requests back to back, no policy: the reference for the planner's cost.
* `together_unprotected` — both, the daemon as it was before it learned to give way (`--cpus all
  --nice 0`: every CPU, torch's own thread count), the policy wherever the kernel puts it.
* `planner_alone_protected` — the planner alone with the daemon's defaults, which protect the policy.
* `together` — both, with those defaults: the daemon on every CPU but the lowest, one engine thread
  per CPU, niced; the policy on the lowest CPU.
* the full run adds an ablation: the daemon's niceness alone (`together_nice_only`), its CPUs alone
  (`together_cpus_only`), and, where SCHED_FIFO is permitted, the defaults with the policy's loop
  at SCHED_FIFO 50 (`together_rt`): what remains once the planner gives way comes from elsewhere.

The policy's ticks are judged inside the window of the planning calls (first call's start to the
last call's end, CLOCK_MONOTONIC in both processes). Numbers from a STAND-IN policy are labelled so.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Optional

from ..client import PlannerClient
from ..placement import available_cpus, daemon_placement, rt_permitted
from ..policy.loop import Tick, summarize
from ..policy.process import PolicyProcess
from ..server.process import DaemonProcess
from .common import progress, pyplot, write_json

TASKS = ["Bring the mug from the kitchen to the coffee table.", "Switch off the bedside lamp.",
         "Put the towel in the laundry basket.", "Open the fridge.", "Close the front door.",
         "Pick up the book from the sofa.", "Water the plant in the living room.", "Go to the kitchen."]
OPTS = {"max_tokens": 48, "temperature": 0.0}
QUICK_OPTS = {**OPTS, "max_tokens": 12}


# The daemon as it was before it learned to give way: every CPU, torch's own thread count, not niced.
UNPROTECTED_DAEMON = ("--cpus", "all", "--nice", "0")


def protective_settings() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(daemon args, policy args): the daemon's defaults (placement.daemon_placement: every CPU but the
    lowest, one engine thread per CPU, niced), and the policy on the CPU the daemon leaves it."""
    return (), ("--cpus", str(min(available_cpus())))


def _rss_peak_bytes(pid: int) -> int:
    from ..policy.measure import proc_status_kib

    return proc_status_kib(pid).get("VmHWM", 0) * 1024


def _plan_back_to_back(client: PlannerClient, seconds: float, calls: list, min_requests: int,
                       opts: dict) -> list[dict]:
    """Planning requests one after another for `seconds` and at least `min_requests` (the one in flight
    then finishes)."""
    out = []
    end = time.monotonic() + seconds
    i = 0
    while time.monotonic() < end or len(out) < min_requests:
        t0 = time.monotonic()
        r = client.plan(TASKS[i % len(TASKS)], **opts)
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


def _co_run(engine_dir: Path, onnx: Path, rate_hz: float, seconds: float, min_requests: int, opts: dict,
            work: Path, daemon_args: tuple, policy_args: tuple, tag: str) -> dict:
    """The planner alone, then the planner with the policy ticking next to it, on one daemon."""
    out: dict = {"daemon_args": list(daemon_args), "policy_args": list(policy_args)}
    with DaemonProcess(engine_dir, extra=daemon_args) as daemon, PlannerClient(daemon.socket, timeout_s=600) as c:
        for t in TASKS[:3]:  # warm-up
            c.plan(t, **opts)
        progress(f"[{tag}] planner alone for {seconds:g} s")
        out["planner_alone"] = _planner_figures(_plan_back_to_back(c, seconds, [], min_requests, opts))
        progress(f"[{tag}] policy at {rate_hz:g} Hz with planning back to back for {seconds:g} s")
        calls: list = []
        with PolicyProcess(onnx, rate_hz, work / f"together-{tag}", policy_args) as policy:
            time.sleep(1.0)  # a second of ticks before the first call: the plot shows the change
            rows = _plan_back_to_back(c, seconds, calls, min_requests, opts)
            time.sleep(1.0)
            result = policy.stop()
        out["planner_rss_peak_bytes"] = _rss_peak_bytes(daemon.proc.pid)
    out["planner_together"] = _planner_figures(rows)
    out["policy_together"] = _policy_phase(result, rate_hz, calls[0][0], calls[-1][1])
    out["calls"] = [[round(a, 6), round(b, 6)] for a, b in calls]
    out["ticks"] = result["ticks"]
    out["policy_memory"] = result["memory"]
    return out


def _ratios(x: dict, alone: dict) -> dict:
    """TTFT and decode speed as multiples of planning alone (daemon as before, no policy)."""
    return {"ttft_over_alone": x["ttft_ms_median"] / alone["ttft_ms_median"],
            "decode_over_alone": x["decode_tokens_per_s_median"] / alone["decode_tokens_per_s_median"]}


def run(engine_dir: Path, out: Path, quick: bool = False, policy_onnx: Optional[Path] = None,
        rate_hz: float = 30.0) -> dict:
    from ..manifest import load_manifest
    from ..policy.standin import export_stand_in, is_stand_in

    seconds, min_requests, opts = (6.0, 2, QUICK_OPTS) if quick else (20.0, 5, OPTS)
    work = out / "policy-runs"
    if policy_onnx is None:
        policy_onnx = export_stand_in("cpu", work / "stand-in-cpu.onnx")
        progress(f"stand-in policy (cpu shape, random weights) written to {policy_onnx}")
    stand_in = is_stand_in(policy_onnx)
    daemon_args, policy_args = protective_settings()
    where, threads = daemon_placement()
    data: dict = {"engine_dir": str(engine_dir), "policy_onnx": str(policy_onnx), "stand_in": stand_in,
                  "rate_hz": rate_hz, "seconds_per_phase": seconds, "min_requests": min_requests, "request": opts,
                  "protective": {"daemon": {**where.as_dict(), "threads": threads},
                                 "policy_args": list(policy_args)},
                  "unprotected": {"daemon_args": list(UNPROTECTED_DAEMON), "policy_args": []}}
    if stand_in:
        data["note"] = "STAND-IN policy: random weights; honest for timing and memory, never for behaviour"

    progress(f"policy alone at {rate_hz:g} Hz for {seconds:g} s")
    with PolicyProcess(policy_onnx, rate_hz, work / "alone", policy_args) as policy:
        time.sleep(seconds)
        alone = policy.stop()
    phases = {"policy_alone": _policy_phase(alone, rate_hz)}
    unprotected = _co_run(engine_dir, policy_onnx, rate_hz, seconds, min_requests, opts, work, UNPROTECTED_DAEMON, (),
                          "unprotected")
    protected = _co_run(engine_dir, policy_onnx, rate_hz, seconds, min_requests, opts, work, daemon_args,
                        policy_args, "protected")
    phases["together_unprotected"] = unprotected["policy_together"]
    phases["together"] = protected["policy_together"]
    ref = unprotected["planner_alone"]
    if not quick:  # which setting does the protecting: each of the two alone
        data["ablation"] = []
        variants = [("nice only", ("--cpus", "all"), ()), ("CPUs only", ("--nice", "0"), policy_args)]
        if rt_permitted():  # the policy's own setting on a robot: what is left to fix once the planner gives way
            variants.append(("defaults + policy SCHED_FIFO", (), (*policy_args, "--rt-priority", "50")))
        for name, d_args, p_args in variants:
            v = _co_run(engine_dir, policy_onnx, rate_hz, seconds, min_requests, opts, work, d_args, p_args,
                        name.replace(" ", "-").lower())
            key = {"nice only": "together_nice_only", "CPUs only": "together_cpus_only"}.get(name, "together_rt")
            phases[key] = v["policy_together"]
            data["ablation"].append({"name": name, "daemon_args": list(d_args), "policy_args": list(p_args),
                                     "policy": v["policy_together"], "planner_alone": v["planner_alone"],
                                     "planner_together": v["planner_together"],
                                     "together_over_alone": _ratios(v["planner_together"], ref),
                                     "alone_over_alone": _ratios(v["planner_alone"], ref)})
    data["phases"] = phases
    data["planner"] = {
        "alone": ref, "together_unprotected": unprotected["planner_together"],
        "alone_protected": protected["planner_alone"], "together": protected["planner_together"],
        "alone_protected_over_alone": _ratios(protected["planner_alone"], ref),
        "together_over_alone": _ratios(protected["planner_together"], ref),
        "together_unprotected_over_alone": _ratios(unprotected["planner_together"], ref)}
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
    progress(f"planner with the protective settings next to the policy: TTFT ×{r['ttft_over_alone']:.2f}, "
             f"decode ×{r['decode_over_alone']:.2f} of planning alone")
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
        for i, (a, b) in enumerate(tl["calls"]):  # alternating shades: one band per planning call
            ax.axvspan(a - t0, b - t0, color="tab:orange", alpha=0.25 if i % 2 else 0.1, lw=0)
        xs = [t[1] - t0 for t in ticks]
        ys = [(t[3] - t[1]) * 1e3 for t in ticks]
        ax.plot(xs, ys, ".", ms=2, color="tab:blue")
        ax.axhline(period, color="tab:red", lw=0.8, ls="--")
        late = sum(y > period for y in ys)
        skipped = sum(b[0] - a[0] - 1 for a, b in zip(ticks, ticks[1:], strict=False))
        ax.set_title(f"{title}: {late + skipped} missed deadlines ({late} late ticks, {skipped} skipped releases)",
                     fontsize=9)
        ax.set_ylabel("tick latency (ms)")
    axes[-1].set_xlabel("time (s); shaded bands: one planning call each; dashed: the deadline (one period)")
    label = "STAND-IN policy" if data["stand_in"] else "policy"
    fig.suptitle(f"{label} at {data['rate_hz']:g} Hz next to the planning daemon", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
