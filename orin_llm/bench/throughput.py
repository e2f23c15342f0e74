"""Throughput with 1, 2, 4 and 8 concurrent clients through the daemon (issue #15): requests/s and
client-observed p50/p99 latency. Goal: ≥ 2× the requests/s at 4 clients over 1 client (continuous
batching: the daemon's requests decode together, one forward pass per step).

Same model, same tasks at every client count: a fixed list of requests (the daemon scenario's tasks,
numbered so that each is new to the KV cache), split evenly between the clients. Two request shapes:
`short` (4 tokens, the daemon scenario's request, which is mostly prefill) and `plan` (a whole plan
under the home's grammar, as a robot asks for it).

Daemons, all started at once and measured in turns, level by level, so that they see the same
machine (a shared VM drifts within a minute); every level runs twice, in the order 1, 2, 4, 8 and
then 8, 4, 2, 1, and its figures pool both passes:

- `default`: the daemon's default placement, which protects a policy next to it (CPUs all but the
  lowest, as many engine threads, nice 10; README). On a 2-core VM that is one engine thread;
- `all_cpus`: `--cpus all --nice 0` (the machine's every CPU, not niced);
- `serial`: the default placement with `--max-batch 1`: batching off, the reference for what it buys
  (torch engines: a TensorRT-LLM daemon batches inside its executor and refuses the option).
"""

from __future__ import annotations

import itertools
import statistics
import threading
import time
from contextlib import ExitStack
from pathlib import Path

from ..client import PlannerClient
from ..manifest import load_manifest
from ..server.process import DaemonProcess
from .common import percentile, progress, pyplot, write_json
from .daemon import TASKS

SHAPES = {"short": {"max_tokens": 4, "temperature": 0.0, "speculation": "none"},
          "plan": {"max_tokens": 64, "temperature": 0.0, "speculation": "none"}}
CONFIGS = {"default": (), "all_cpus": ("--cpus", "all", "--nice", "0"), "serial": ("--max-batch", "1")}
LEVELS = (1, 2, 4, 8)


def _level(socket: Path, tasks: list[str], clients: int, opts: dict) -> dict:
    """`tasks` split between `clients` threads, each with its own connection; all start together."""
    latencies: list[float] = []
    errors: list[str] = []
    start = threading.Barrier(clients + 1)

    def client(mine: list[str]) -> None:
        with PlannerClient(socket, timeout_s=600) as c:
            c.health()  # connected before the clock starts
            start.wait()
            for task in mine:
                t0 = time.perf_counter()
                try:
                    c.plan(task, **opts)
                    latencies.append((time.perf_counter() - t0) * 1e3)
                except Exception as e:  # counted and reported: a lost request is a failure
                    errors.append(str(e))

    threads = [threading.Thread(target=client, args=(tasks[k::clients],)) for k in range(clients)]
    for th in threads:
        th.start()
    start.wait()
    t0 = time.perf_counter()
    for th in threads:
        th.join()
    return {"requests": len(tasks), "errors": len(errors), "wall_s": time.perf_counter() - t0,
            "latencies_ms": latencies, "error_messages": errors[:3]}


def run(engine_dir: Path, out: Path, quick: bool = False) -> dict:
    levels = (1, 2) if quick else LEVELS
    configs = {"default": CONFIGS["default"]} if quick else dict(CONFIGS)
    skipped = {}
    if load_manifest(engine_dir).backend != "torch" and "serial" in configs:  # the daemon refuses --max-batch there
        del configs["serial"]
        skipped["serial"] = "TensorRT-LLM batches inside its executor: the daemon refuses --max-batch"
    per_level = {"short": 8, "plan": 4} if quick else {"short": 48, "plan": 24}
    numbers = itertools.count()
    raw: dict = {c: {s: {n: [] for n in levels} for s in SHAPES} for c in configs}
    with ExitStack() as stack:
        daemons = {name: stack.enter_context(DaemonProcess(engine_dir, extra=("--state-dir", "none", *args)))
                   for name, args in configs.items()}
        health = {}
        for name, d in daemons.items():
            with PlannerClient(d.socket, timeout_s=600) as c:
                health[name] = c.health()
                for opts in SHAPES.values():  # untimed: each shape's first request sets up kernels
                    c.plan(TASKS[0], **opts)
        for order in (levels, tuple(reversed(levels))):
            for clients in order:
                for shape, opts in SHAPES.items():
                    # the same tasks for every daemon at this level; numbered: new to each daemon's cache
                    tasks = [f"Request {next(numbers):06d}: {TASKS[i % len(TASKS)]}" for i in range(per_level[shape])]
                    for name, d in daemons.items():
                        raw[name][shape][clients].append(_level(d.socket, tasks, clients, opts))
                        r = raw[name][shape][clients][-1]
                        progress(f"throughput: {name}, {shape}, {clients} clients: "
                                 f"{r['requests'] / r['wall_s']:.2f} requests/s, {r['errors']} errors")
    results = {name: {shape: [_pooled(clients, runs) for clients, runs in by_level.items()]
                      for shape, by_level in shapes.items()} for name, shapes in raw.items()}
    speedup = {name: {shape: _over_one(rows) for shape, rows in shapes.items()} for name, shapes in results.items()}
    data = {"engine_dir": str(engine_dir), "home": health["default"]["environment"]["name"],
            "shapes": SHAPES, "requests_per_level": per_level, "passes": 2,
            "configs": {name: {"daemon_args": ["--state-dir", "none", *args], "scheduler": health[name]["scheduler"]}
                        for name, args in configs.items()},
            "skipped": skipped, "results": results, "speedup_over_one_client": speedup,
            "speedup_clients": 4 if 4 in levels else max(levels), "goal_4_over_1": 2.0}
    for name in configs:
        progress(f"throughput: {name}: {data['speedup_clients']} clients over 1: " + ", ".join(
            f"{shape} {s:.2f}×" for shape, s in speedup[name].items()))
    write_json(out, "throughput", data)
    _plot(data, out / "throughput.png")
    return data


def _pooled(clients: int, runs: list[dict]) -> dict:
    """One level's passes together: requests/s over their summed wall time, percentiles over every request."""
    latencies = [x for r in runs for x in r["latencies_ms"]]
    done = sum(len(r["latencies_ms"]) for r in runs)
    return {"clients": clients, "requests": sum(r["requests"] for r in runs), "errors": sum(r["errors"] for r in runs),
            "requests_per_s": done / sum(r["wall_s"] for r in runs),
            "requests_per_s_by_pass": [len(r["latencies_ms"]) / r["wall_s"] for r in runs],
            "latency_ms_p50": statistics.median(latencies) if latencies else None,
            "latency_ms_p99": percentile(latencies, 0.99) if latencies else None,
            "error_messages": [m for r in runs for m in r["error_messages"]][:3]}


def _over_one(rows: list[dict]) -> float:
    """Requests/s at 4 clients (or the most measured) over 1 client."""
    by = {r["clients"]: r["requests_per_s"] for r in rows}
    return by[4 if 4 in by else max(by)] / by[1]


def _plot(data: dict, path: Path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for (name, shapes), color in zip(data["results"].items(), ("C0", "C1", "C2"), strict=False):
        for shape, style in (("plan", "o-"), ("short", "s--")):
            rows = shapes[shape]
            xs = [r["clients"] for r in rows]
            axes[0].plot(xs, [r["requests_per_s"] for r in rows], style, color=color, label=f"{name}, {shape}")
            if shape == "plan":
                axes[1].plot(xs, [r["latency_ms_p50"] for r in rows], "o-", color=color, label=f"{name} p50")
                axes[1].plot(xs, [r["latency_ms_p99"] for r in rows], "^:", color=color, label=f"{name} p99")
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrent clients")
        ax.legend(fontsize=7)
    axes[0].set_yscale("log")
    axes[0].set_ylabel("requests/s")
    axes[1].set_ylabel("latency of a whole plan (ms)")
    fig.suptitle("throughput through the daemon (default: protective placement; all_cpus: --cpus all --nice 0; "
                 "serial: --max-batch 1)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
