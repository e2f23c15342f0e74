"""A fleet of robots planning on a site server (issue #35): N robots, each a real orin-llm daemon
(`serve --remote`) with its home (M homes, so robots share them), against two real vLLM CPU replicas
behind vLLM's router, once per router policy: round_robin, cache_aware (the router's prefix tree) and
kv_aware (the replicas' own KV events), on the same traffic. The daemons lay the prompts out as they
always do (the home first), and plan with the product's defaults: `feasibility: enforce` and
`--remote-plans stepwise`, so a plan is several engine requests (one per step, each with the grammar
of the steps feasible then, its prompt the plan's prompt and the steps so far). What is measured is
what a robot really sends.

Reported per policy: plans and the engine requests they made (each answer's `remote.requests`), the
engines' own prefix-cache hit rate (`vllm:prefix_cache_hits_total` over
`vllm:prefix_cache_queries_total`, both replicas, after a reset of their caches), the cached tokens
the engines reported in each answer's usage (summed over its requests), the engine requests each
replica served (its own `vllm:request_success_total`), the plan's first token as the robot's client
saw it (the first text of a streamed /v1/plan: a remote plan is released whole once the daemon has
checked it, so this is close to the plan's latency) and the plan's latency, p50/p99. Then the link
fails, on one robot: both replicas stalled
(SIGSTOP), one replica killed, the router stopped; each time, how long the robot waited for an answer
and who gave it, against the same robot's engine alone (a daemon without --remote).

CPU replicas of the embedded model stand in for a GPU server: hit rates and where requests go carry
over to a real one; absolute latencies do not (and 2 cores shared by the replicas, the router and the
robots make them noisy). Skipped, with the reason, without the vLLM venv (`make vllm`)."""

from __future__ import annotations

import re
import shutil
import signal
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Optional

from ..client import PlannerClient, PlannerError
from ..errors import OrinError
from ..planning.calibration_data import load_home, load_split
from ..server.process import DaemonProcess
from . import site
from .common import home_file, percentile, progress, pyplot, write_json

POLICIES = ("round_robin", "cache_aware", "kv_aware")
COUNTERS = ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total", "vllm:request_success_total")
MAX_TOKENS = 24
FIRST_TOKEN_SHARE = 0.5  # the daemons' --remote-first-token-share
ROUTED_DEADLINE_MS = 120_000  # CPU replicas under four robots at once are slow: no hedging while routing
FAILURE_DEADLINE_MS = 4_000  # the link-failure phase: the local engine starts at FIRST_TOKEN_SHARE of it
FEASIBILITY = "enforce"  # the product's defaults: only steps the home's state allows,
REMOTE_PLANS = "stepwise"  # asked one step per request (backends/remote/stepwise.py)
# the model's own plan, as the fleet runs so far measured it: a plain request now reads a goal first and may
# answer from the search (issue #43), a path these rows do not measure yet
GOAL = "none"
FAILURE_POLICY = "cache_aware"


def run(engine_dir: Path, out: Path, quick: bool = False) -> Optional[dict]:
    why = site.missing()
    if why:
        progress(f"fleet: skipped: {why}")
        return None
    robots, n_homes, per_robot = (4, 2, 2) if quick else (4, 3, 4)
    heldout = load_split("heldout")  # its homes: bungalow, duplex, villa
    homes = [load_home(n) for n in sorted({i.home for i in heldout})[:n_homes]]
    tasks = {h.name: [i.task for i in heldout if i.home == h.name] for h in homes}
    fleet = []
    for i in range(robots):  # robots of one home ask different tasks: only the home is shared
        home = homes[i % n_homes].name
        mine = [tasks[home][(i // n_homes * per_robot + k) % len(tasks[home])] for k in range(per_robot)]
        fleet.append({"robot": i, "home": home, "tasks": mine})
    progress(f"fleet: {robots} robots (orin-llm daemons), {n_homes} homes, {per_robot} plans each, policies "
             f"{', '.join(POLICIES)}; on 2 CPU cores about {4 if quick else 5} minutes, more on a busy machine: two "
             "vLLM replicas load (30-60 s each), the daemons, each policy's traffic, then the link failures")
    work = Path(tempfile.mkdtemp(prefix="orin-llm-fleet-"))
    model = site.model_dir(engine_dir, work / "model")
    replicas: list[site.Replica] = []
    router: Optional[site.Router] = None
    daemons: list[DaemonProcess] = []
    router_port = site.free_port()
    try:
        for i in range(2):  # one at a time: two loading at once on two cores only slows both
            progress(f"fleet: starting vLLM replica {i + 1}/2")
            replicas.append(site.Replica(model, work / f"vllm{i}.log", kv_events_port=site.free_port()).ready())
        router = site.Router(replicas, POLICIES[0], work / f"router-{POLICIES[0]}.log", router_port).ready()
        for r in fleet:
            progress(f"fleet: starting robot {r['robot']} (home {r['home']})")
            daemons.append(DaemonProcess(engine_dir, extra=(
                "--environment", str(home_file(next(h for h in homes if h.name == r["home"]), work)),
                "--state-dir", "none", "--remote", router.url, "--remote-model", "embedded",
                "--remote-plans", REMOTE_PLANS, "--remote-first-token-share", str(FIRST_TOKEN_SHARE))).__enter__())
        policies: dict[str, Any] = {}
        for policy in POLICIES:
            if policy != POLICIES[0]:
                router = _restart(router, replicas, policy, work, router_port)
                if router is None:
                    policies[policy] = {"error": _kv_lines(work / f"router-{policy}.log", everything=True)}
                    continue
            policies[policy] = _policy_run(policy, fleet, daemons, replicas)
            policies[policy]["router_metrics"] = router.routing_metrics()
            policies[policy]["router_log"] = _kv_lines(router.log_path) if policy == "kv_aware" else []
        # the link fails behind the policy a site would run (kv_aware needs more set up than a plain router)
        router = _restart(router, replicas, FAILURE_POLICY, work, router_port)
        local_daemon = DaemonProcess(engine_dir, extra=(
            "--environment", str(home_file(next(h for h in homes if h.name == fleet[0]["home"]), work)),
            "--state-dir", "none")).__enter__()
        try:
            failures = _failures(daemons[0], local_daemon, fleet[0]["tasks"], replicas, router)
        finally:
            local_daemon.__exit__()
    finally:
        for d in daemons:
            d.__exit__()
        if router is not None:
            router.stop()
        for r in replicas:
            r.stop()
    data = {"engine_dir": str(engine_dir), "robots": robots, "homes": [h.name for h in homes],
            "plans_per_robot": per_robot, "max_tokens": MAX_TOKENS, "feasibility": FEASIBILITY,
            "remote_plans": REMOTE_PLANS, "replicas": 2, "replica_flags": list(site.flags()),
            "vllm_block_size": site.BLOCK_SIZE,
            "daemon_args": ["--remote", "ROUTER", "--remote-model", "embedded", "--remote-plans", REMOTE_PLANS,
                            "--remote-first-token-share", str(FIRST_TOKEN_SHARE), "--state-dir", "none"],
            "routed_deadline_ms": ROUTED_DEADLINE_MS, "failure_deadline_ms": FAILURE_DEADLINE_MS,
            "failure_router_policy": FAILURE_POLICY,
            "fleet": [{k: r[k] for k in ("robot", "home", "tasks")} for r in fleet],
            "policies": policies, "failures": failures}
    write_json(out, "fleet", data)
    _plot(data, out / "fleet.png")
    shutil.rmtree(work, ignore_errors=True)  # the logs of a run that failed stay there (its error names them)
    return data


def _restart(router: Optional[site.Router], replicas: list[site.Replica], policy: str, work: Path,
             port: int) -> Optional[site.Router]:
    """The router with another policy on the same port (the daemons know only its URL); None when it
    does not start with this policy (the reason is in its log, which the JSON keeps)."""
    if router is not None:
        router.stop()
    try:
        return site.Router(replicas, policy, work / f"router-{policy}.log", port).ready()
    except OrinError as e:
        progress(f"fleet: {policy}: the router did not start: {str(e)[:300]}")
        return None


def _plan(daemon: DaemonProcess, task: str, deadline_ms: int) -> dict:
    """One plan, streamed as a robot's client would read it: `ttft_ms` is when its first text arrived
    at the client, `client_ms` when the whole answer had."""
    first: Optional[float] = None
    answer: dict = {}
    with PlannerClient(daemon.socket, timeout_s=600) as c:
        t0 = time.perf_counter()
        try:
            for event in c.plan_stream(task, max_tokens=MAX_TOKENS, temperature=0.0, deadline_ms=deadline_ms,
                                       feasibility=FEASIBILITY, goal=GOAL):
                if first is None and event.get("delta"):
                    first = time.perf_counter()
                answer = event
        except PlannerError as e:  # a missed deadline is a measurement: the row says so, the run goes on
            end = time.perf_counter()
            return {"client_ms": (end - t0) * 1e3, "ttft_ms": ((first or end) - t0) * 1e3, "served_by": "none",
                    "error": str(e), "fallback": None, "fallback_reason": None, "finish_reason": None,
                    "engine_requests": 0, "steps": 0, "violations": 0}
        end = time.perf_counter()
    remote = answer.get("remote") or {}
    return {"client_ms": (end - t0) * 1e3, "ttft_ms": ((first or end) - t0) * 1e3,
            "served_by": answer.get("served_by", "local"), "fallback": answer.get("fallback"),
            "fallback_reason": answer.get("fallback_reason"), "finish_reason": answer.get("finish_reason"),
            # the daemon's own: from its first request to the engine's first token (of the plan's first step)
            "daemon_ttft_ms": answer["timings"]["ttft_ms"], "prompt_tokens": answer["timings"]["prompt_tokens"],
            "engine_requests": remote.get("requests", 0), "cached_tokens": remote.get("cached_tokens"),
            "network_ms": remote.get("network_ms"), "engine_ms": remote.get("engine_ms"), "plan": answer.get("plan"),
            "steps": len(answer.get("steps") or ()), "violations": len(answer.get("violations") or ())}


def _counters(replicas: list[site.Replica]) -> list[dict[str, float]]:
    return [r.metrics(COUNTERS) for r in replicas]


def _policy_run(policy: str, fleet: list[dict], daemons: list[DaemonProcess], replicas: list[site.Replica]) -> dict:
    for r in replicas:  # every policy starts from cold caches: the same traffic, the same start
        r.reset_prefix_cache()
    before = _counters(replicas)
    samples: list[dict] = []
    lock, start = threading.Lock(), threading.Barrier(len(fleet))

    def robot(r: dict, daemon: DaemonProcess) -> None:
        start.wait()  # all robots at once: a new home's first plans arrive together, as in a building
        for task in r["tasks"]:
            s = {"robot": r["robot"], "home": r["home"], **_plan(daemon, task, ROUTED_DEADLINE_MS)}
            with lock:
                samples.append(s)

    progress(f"fleet: {policy}: {len(fleet)} robots planning at once")
    t0 = time.perf_counter()
    threads = [threading.Thread(target=robot, args=(r, d)) for r, d in zip(fleet, daemons, strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall_s = time.perf_counter() - t0
    after = _counters(replicas)
    delta = [{k: a[k] - b[k] for k in COUNTERS} for b, a in zip(before, after, strict=True)]
    hits = sum(d["vllm:prefix_cache_hits_total"] for d in delta)
    queries = sum(d["vllm:prefix_cache_queries_total"] for d in delta)
    remote = [s for s in samples if s["served_by"] == "remote"]
    ttft = [s["ttft_ms"] for s in remote]
    requests = sum(s["engine_requests"] for s in remote)
    out = {"plans": len(samples), "served_remote": len(remote), "engine_requests": requests,
           "requests_per_plan": requests / len(remote) if remote else None, "wall_s": wall_s,
           "engine_hit_rate": hits / queries if queries else None, "engine_hit_tokens": hits,
           "engine_query_tokens": queries,
           "usage_cached_tokens": sum(s["cached_tokens"] or 0 for s in remote),
           "usage_prompt_tokens": sum(s["prompt_tokens"] for s in remote),
           "requests_per_replica": [d["vllm:request_success_total"] for d in delta],  # engine requests
           "ttft_ms_p50": percentile(ttft, 0.5) if ttft else None,
           "ttft_ms_p99": percentile(ttft, 0.99) if ttft else None,
           "client_ms_p50": percentile([s["client_ms"] for s in samples], 0.5),
           "client_ms_p99": percentile([s["client_ms"] for s in samples], 0.99),
           "steps_per_plan": statistics.mean(s["steps"] for s in samples), "samples": samples}
    progress(f"fleet: {policy}: {len(remote)}/{len(samples)} plans remote in {requests} engine requests, hit "
             f"rate {_pct(out['engine_hit_rate'])} of prompt tokens, requests per replica "
             f"{out['requests_per_replica']}, TTFT at the client p50 {_ms(out['ttft_ms_p50'])} p99 "
             f"{_ms(out['ttft_ms_p99'])}, plan p50 {_ms(out['client_ms_p50'])} p99 {_ms(out['client_ms_p99'])}, "
             f"{wall_s:.0f} s")
    return out


def _failures(robot: DaemonProcess, local: DaemonProcess, tasks: list[str], replicas: list[site.Replica],
              router: Optional[site.Router]) -> dict:
    """One robot's answer time when the link fails, against its engine alone. After a failure the daemon
    rests the remote (1 s, doubling): the second plan of each case shows the rest (no remote tried)."""
    task = tasks[0]
    _plan(local, task, FAILURE_DEADLINE_MS)  # untimed: a daemon's first plan sets up the home's grammar
    out: dict[str, Any] = {"local_alone": [_plan(local, task, FAILURE_DEADLINE_MS) for _ in range(5)]}
    out["remote_ok"] = [_plan(robot, task, FAILURE_DEADLINE_MS) for _ in range(3)]

    def case(name: str, act, undo=None) -> None:
        # from a remote answer: no rest is left from the case before (a success ends it), so this case's
        # first plan shows how its own failure is detected
        out[name + "_remote_first_s"] = _until_remote(robot, task)
        progress(f"fleet: link failure: {name}")
        act()
        try:
            out[name] = [_plan(robot, task, FAILURE_DEADLINE_MS) for _ in range(2)]
        finally:
            if undo:
                undo()
        if undo:
            out[name + "_recovered_after_s"] = _until_remote(robot, task)

    case("replicas_stalled", lambda: [r.signal(signal.SIGSTOP) for r in replicas],
         lambda: [r.signal(signal.SIGCONT) for r in replicas])
    case("replica_killed", lambda: replicas[1].signal(signal.SIGKILL))
    if router is not None:
        case("router_stopped", router.stop)
    local_ms = statistics.median(s["client_ms"] for s in out["local_alone"])
    out["local_alone_ms_median"] = local_ms
    out["added_ms"] = {k: [s["client_ms"] - local_ms for s in v] for k, v in out.items()
                       if isinstance(v, list) and k != "local_alone"}
    for k, v in out["added_ms"].items():
        answers = ", ".join(f"{s['served_by']} +{a:.0f} ms" for s, a in zip(out[k], v, strict=True))
        progress(f"fleet: {k}: {answers}")
    return out


def _until_remote(robot: DaemonProcess, task: str, limit_s: float = 60) -> Optional[float]:
    """Seconds until a plan is served remotely again (None: not within limit_s), each plan with the routed
    phase's deadline, which a healthy CPU replica meets."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < limit_s:
        if _plan(robot, task, ROUTED_DEADLINE_MS)["served_by"] == "remote":
            return time.perf_counter() - t0
        time.sleep(1)
    return None


def _kv_lines(log: Path, everything: bool = False) -> list[str]:
    """The router's lines about KV events (kv_aware): whether it subscribed and scored by them."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", log.read_text(errors="replace"))  # its terminal colours
    lines = [ln for ln in text.splitlines() if everything or "kv" in ln.lower()]
    return lines[-12:]


def _pct(x: Optional[float]) -> str:
    return "n/a" if x is None else f"{100 * x:.0f} %"


def _ms(x: Optional[float]) -> str:
    return "n/a" if x is None else f"{x:.0f} ms"


def _plot(data: dict, path: Path) -> None:
    plt = pyplot()
    ran = [p for p, v in data["policies"].items() if "error" not in v]
    fig, (a, b, c) = plt.subplots(1, 3, figsize=(11, 3.6))
    rates = [100 * (data["policies"][p]["engine_hit_rate"] or 0) for p in ran]
    a.bar(ran, rates, color="C0")
    a.set_ylabel("engines' prefix-cache hit rate (%)")
    a.set_ylim(0, 100)
    for i, r in enumerate(rates):
        a.text(i, r + 2, f"{r:.0f}", ha="center", fontsize=8)
    for j, label in enumerate(("p50", "p99")):
        key = f"ttft_ms_{label}"
        b.bar([i + (j - 0.5) * 0.4 for i in range(len(ran))], [data["policies"][p][key] or 0 for p in ran], 0.4,
              label=label)
    b.set_xticks(range(len(ran)), ran)
    b.set_ylabel("first token at the robot's client (ms)")
    b.legend(fontsize=8)
    f = data["failures"]
    cases = ["local_alone", "remote_ok", *[k for k in ("replicas_stalled", "replica_killed", "router_stopped")
                                           if k in f]]
    for i, k in enumerate(cases):
        for s in f[k]:
            if s["served_by"] == "none":  # no answer: the plan failed (its row's error says why)
                c.plot([i], [s["client_ms"]], "x", color="C3")
                continue
            c.plot([i], [s["client_ms"]], "o", color="C2" if s["served_by"] == "local" else "C1")
    c.set_xticks(range(len(cases)), [k.replace("_", "\n") for k in cases], fontsize=7)
    c.plot([], [], "o", color="C1", label="served remotely")
    c.plot([], [], "o", color="C2", label="served locally")
    c.plot([], [], "x", color="C3", label="no answer (error)")
    c.axhline(data["failure_deadline_ms"], color="gray", ls="--", lw=0.8, label="deadline")
    c.set_ylabel("one robot's answer time (ms)")
    c.legend(fontsize=7)
    fig.suptitle(f"{data['robots']} robots, {len(data['homes'])} homes ({data['feasibility']}, {data['remote_plans']} "
                 "remote plans), 2 vLLM CPU replicas behind vllm-router (CPU stands in for a GPU server: compare "
                 "rates, not absolute times)", fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    fig.savefig(path, dpi=120)
