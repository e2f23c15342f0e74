"""The daemon's cost: socket + HTTP overhead per request, latency under 1/2/4/8 concurrent
clients, and the daemon's resident memory across many requests.

Overhead is measured per request as (client-observed latency − the daemon's own total_ms for
that request), which cancels the engine time exactly; the in-process engine on the same machine
is also timed for the same requests as a cross-check.
"""

from __future__ import annotations

import statistics
import threading
import time
from pathlib import Path

from ..client import PlannerClient
from ..server.process import DaemonProcess
from .common import progress, pyplot, write_json

TASKS = ["Open the fridge.", "Close the front door.", "Pick up the book.", "Switch on the floor lamp.",
         "Go to the kitchen.", "Put the mug in the sink.", "Bring the remote to the sofa.", "Say hello."]
OPTS = {"max_tokens": 4, "temperature": 0.0, "speculation": "none"}


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _timed_plan(client: PlannerClient, task: str) -> tuple[float, float]:
    t0 = time.perf_counter()
    r = client.plan(task, **OPTS)
    return (time.perf_counter() - t0) * 1e3, float(r["timings"]["total_ms"])


def run(engine_dir: Path, out: Path, quick: bool = False) -> dict:
    from ..environment import EXAMPLE_HOME_PATH, load_environment
    from ..runtime.engine import Engine
    from ..runtime.planner import Planner
    from ..runtime.sampling import SamplingParams

    n = 40 if quick else 200
    soak = 100 if quick else 1000
    data: dict = {"engine_dir": str(engine_dir), "request": OPTS}
    with DaemonProcess(engine_dir) as daemon, PlannerClient(daemon.socket, timeout_s=300) as client:
        for t in TASKS:  # warm-up
            _timed_plan(client, t)
        progress(f"{n} sequential requests through the socket")
        lat, srv = zip(*[_timed_plan(client, TASKS[i % len(TASKS)]) for i in range(n)], strict=True)
        overhead = [a - b for a, b in zip(lat, srv, strict=True)]
        data["sequential"] = {"requests": n, "latency_ms_median": statistics.median(lat),
                              "latency_ms_p99": _pct(list(lat), 0.99),
                              "server_total_ms_median": statistics.median(srv),
                              "overhead_ms_median": statistics.median(overhead),
                              "overhead_ms_p99": _pct(overhead, 0.99)}
        progress(f"overhead per request: median {data['sequential']['overhead_ms_median']:.2f} ms, "
                 f"p99 {data['sequential']['overhead_ms_p99']:.2f} ms")
        data["concurrency"] = []
        for clients in (1, 2, 4, 8):
            results: list[float] = []
            errors: list[str] = []
            per = max(4, n // 4 // clients)

            def worker(k: int, per: int = per, results: list = results, errors: list = errors) -> None:
                with PlannerClient(daemon.socket, timeout_s=300) as c:
                    for i in range(per):
                        try:
                            results.append(_timed_plan(c, TASKS[(k + i) % len(TASKS)])[0])
                        except Exception as e:  # counted, reported: a lost request fails the target
                            errors.append(str(e))

            t0 = time.perf_counter()
            threads = [threading.Thread(target=worker, args=(k,)) for k in range(clients)]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
            wall = time.perf_counter() - t0
            row = {"clients": clients, "requests": len(results) + len(errors), "errors": len(errors),
                   "latency_ms_median": statistics.median(results), "latency_ms_p99": _pct(results, 0.99),
                   "requests_per_s": len(results) / wall}
            data["concurrency"].append(row)
            progress(f"{clients} clients: median {row['latency_ms_median']:.0f} ms, p99 "
                     f"{row['latency_ms_p99']:.0f} ms, {row['errors']} errors")
        progress(f"{soak} requests for the memory soak")
        rss = [_rss_kib(daemon.proc.pid)]
        for i in range(soak):
            client.plan(TASKS[i % len(TASKS)], **OPTS)
            if (i + 1) % max(1, soak // 10) == 0:
                rss.append(_rss_kib(daemon.proc.pid))
        data["rss_kib"] = rss
        data["rss_growth_kib"] = rss[-1] - rss[1] if len(rss) > 2 else 0
    progress("the same requests in-process (cross-check)")
    engine = Engine.load(engine_dir, draft=False)
    planner = Planner(engine, load_environment(EXAMPLE_HOME_PATH))
    params = SamplingParams(max_tokens=OPTS["max_tokens"])
    inproc = []
    for i in range(n):
        t0 = time.perf_counter()
        planner.plan(TASKS[i % len(TASKS)], params, speculation="none")
        inproc.append((time.perf_counter() - t0) * 1e3)
    data["in_process_ms_median"] = statistics.median(inproc)
    data["socket_minus_in_process_ms_median"] = data["sequential"]["latency_ms_median"] - statistics.median(inproc)
    write_json(out, "daemon", data)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    cs = [r["clients"] for r in data["concurrency"]]
    ax.plot(cs, [r["latency_ms_median"] for r in data["concurrency"]], "o-", label="median")
    ax.plot(cs, [r["latency_ms_p99"] for r in data["concurrency"]], "o-", label="p99")
    ax.set_xlabel("concurrent clients")
    ax.set_ylabel("request latency (ms)")
    ax.set_xscale("log", base=2)
    ax.set_title("planning requests through the Unix socket")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "daemon.png", dpi=120)
    return data
