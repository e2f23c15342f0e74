"""The daemon's cost: socket + HTTP overhead per request, latency under 1/2/4/8 concurrent
clients, and the daemon's resident memory across many requests.

Overhead is measured per request as (client-observed latency − the daemon's own total_ms for
that request), which cancels the engine time exactly; the in-process engine on the same machine
is also timed for the same requests as a cross-check.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path

from ..client import PlannerClient
from ..server.process import DaemonProcess
from .common import home_file, percentile, progress, pyplot, write_json

TASKS = ["Open the fridge.", "Close the front door.", "Pick up the book.", "Switch on the floor lamp.",
         "Go to the kitchen.", "Put the mug in the sink.", "Bring the remote to the sofa.", "Say hello."]
OPTS = {"max_tokens": 4, "temperature": 0.0, "speculation": "none"}


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _timed_plan(client: PlannerClient, task: str) -> tuple[float, float]:
    t0 = time.perf_counter()
    r = client.plan(task, **OPTS)
    return (time.perf_counter() - t0) * 1e3, float(r["timings"]["total_ms"])


def _latency_ms(call) -> float:
    t0 = time.perf_counter()
    call()
    return (time.perf_counter() - t0) * 1e3


def prefix_via_socket(engine_dir: Path, engine, quick: bool) -> list[dict]:
    """The prefix scenario's ratios as a client sees them: TTFT (a 1-token answer, client-observed)
    with the environment pinned in the daemon (POST /v1/plan) vs the same conversation computed in
    full (POST /v1/chat/completions whose system turn differs by one trailing space, so nothing
    matches the pinned prefix) vs the task alone (a chat with only the task turn)."""
    from ..planning.calibration_data import home_names, load_home
    from ..planning.home import prefix_messages, task_message
    from .common import scaled_environment
    from .prefix import TASK

    homes = [load_home(n) for n in home_names()]
    render = lambda env: engine.chat_text(prefix_messages(env), add_generation_prompt=False)  # noqa: E731
    one = {"max_tokens": 1, "temperature": 0.0}
    rows = []
    for size in [1024] if quick else [1024, 4096]:
        env = scaled_environment(homes, engine.encode, render, size)
        messages = prefix_messages(env) + [task_message(TASK)]
        cold_messages = [{**messages[0], "content": messages[0]["content"] + " "}] + messages[1:]
        path = home_file(env, Path(tempfile.mkdtemp(prefix="orin-llm-env-")))
        repeats = 3 if quick else 5
        with DaemonProcess(engine_dir, extra=("--environment", str(path))) as daemon, \
                PlannerClient(daemon.socket, timeout_s=600) as c:
            plan = lambda: c.plan(TASK, speculation="none", **one)  # noqa: E731
            alone, cold, warm = [], [], []
            for _ in range(repeats):
                alone.append(_latency_ms(lambda: c.chat([task_message(TASK)], **one)))
                cold.append(_latency_ms(lambda m=cold_messages: c.chat(m, **one)))
                plan()  # the chats took the cache: the daemon pins the environment again
                warm.append(_latency_ms(plan))
            cached = plan()["timings"]["cached_prompt_tokens"]
        shutil.rmtree(path.parent, ignore_errors=True)
        row = {"prefix_tokens": cached, "ttft_cold_ms": statistics.median(cold),
               "ttft_warm_ms": statistics.median(warm), "ttft_task_alone_ms": statistics.median(alone)}
        row["cold_over_warm"] = row["ttft_cold_ms"] / row["ttft_warm_ms"]
        row["warm_over_task_alone"] = row["ttft_warm_ms"] / row["ttft_task_alone_ms"]
        rows.append(row)
        progress(f"through the socket, prefix {cached} tokens: cold {row['ttft_cold_ms']:.0f} ms, warm "
                 f"{row['ttft_warm_ms']:.1f} ms ({row['cold_over_warm']:.1f}×), task alone "
                 f"{row['ttft_task_alone_ms']:.1f} ms (warm/alone {row['warm_over_task_alone']:.2f})")
    return rows


def run(engine_dir: Path, out: Path, quick: bool = False) -> dict:
    from ..backends.loader import load_engine
    from ..planning.home import EXAMPLE_HOME_PATH, load_environment
    from ..planning.planner import Planner
    from ..runtime.engine_config import EngineConfig
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
                              "latency_ms_p99": percentile(list(lat), 0.99),
                              "server_total_ms_median": statistics.median(srv),
                              "overhead_ms_median": statistics.median(overhead),
                              "overhead_ms_p99": percentile(overhead, 0.99)}
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
                   "latency_ms_median": statistics.median(results), "latency_ms_p99": percentile(results, 0.99),
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
    engine = load_engine(engine_dir, EngineConfig.at_edge(draft=False))  # either backend
    planner = Planner(engine, load_environment(EXAMPLE_HOME_PATH))
    params = SamplingParams(max_tokens=OPTS["max_tokens"])
    inproc = []
    for i in range(n):
        t0 = time.perf_counter()
        planner.plan(TASKS[i % len(TASKS)], params, speculation="none")
        inproc.append((time.perf_counter() - t0) * 1e3)
    data["in_process_ms_median"] = statistics.median(inproc)
    data["socket_minus_in_process_ms_median"] = data["sequential"]["latency_ms_median"] - statistics.median(inproc)
    if engine.manifest.backend == "torch":  # the torch engine here only renders and tokenizes
        progress("the pinned prefix through the socket")
        data["prefix_via_socket"] = prefix_via_socket(engine_dir, engine, quick)
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
