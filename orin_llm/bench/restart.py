"""Lookup acceptance on the first 20 requests after a restart, with and without the persisted history
(issue #15). The lookup drafter continues n-grams of earlier plans; the daemon keeps those plans per
environment in its `--state-dir` and reloads them when it starts again.

1. A daemon with a fresh state directory plans N warm-up tasks in a held-out home (tasks written from
   the home's own objects, places and devices, none of them a measured task), then stops (SIGTERM:
   it saves its histories on the way out).
2. Two daemons start: `restarted`, on that state directory, and `fresh`, on an empty one (it drafts
   from the build's seed plans only, as the restarted one did before its warm-up). Each gets the same
   20 held-out tasks of that home (the calibration data's held-out split), in the same order, in
   turns so that their timings see the same machine.

Greedy plans are the same with any history (speculation is lossless), so the two daemons' plans are
compared too; what the history changes is how many drafted tokens the target accepts, hence how many
target steps a plan takes.
"""

from __future__ import annotations

import json
import shutil
import statistics
import tempfile
from collections.abc import Iterator
from pathlib import Path

from ..client import PlannerClient
from ..planning.calibration_data import load_home, load_split
from ..planning.home import Environment
from ..server.process import DaemonProcess
from .common import home_file, progress, pyplot, write_json

# goal "none": the model's own plans, the ones the lookup history speeds up (a plain request would read a goal
# and may answer from the search, which decodes nothing)
PLAN = {"max_tokens": 64, "temperature": 0.0, "speculation": "lookup", "goal": "none"}


def warmup_tasks(env: Environment, n: int, exclude: set[str]) -> list[str]:
    """`n` distinct tasks in `env` from its own names (bring, put, switch), none of them in `exclude`."""
    words = lambda name: name.replace("_", " ")  # noqa: E731
    objects = [o for r in env.rooms for o in r.objects]
    devices = [d for r in env.rooms for d in r.devices or []]
    places = [p for r in env.rooms for p in r.places if p not in devices]

    def candidates() -> Iterator[str]:
        for i in range(len(objects) * len(places) * 2):
            o, p = words(objects[i % len(objects)]), words(places[(i * 7 + 3) % len(places)])
            yield (f"Bring the {o} to the {p}.", f"Put the {o} on the {p}.")[i % 2]
            if devices and i % 3 == 0:
                yield f"Switch {('on', 'off')[i // 3 % 2]} the {words(devices[i // 3 % len(devices)])}."

    tasks = list(dict.fromkeys(t for t in candidates() if t not in exclude))
    if len(tasks) < n:
        raise ValueError(f"home {env.name!r} gives only {len(tasks)} warm-up tasks, {n} asked")
    return tasks[:n]


def history_files(state: Path) -> list[dict]:
    """The lookup histories a daemon left in its state directory: file, key and how many plans."""
    files = []
    for path in sorted(state.glob("lookup/*/lookup-*.json")):
        data = json.loads(path.read_text())
        outputs = data.get("outputs", [])
        files.append({"file": str(path.relative_to(state)), "key": data.get("key"), "outputs": len(outputs),
                      "tokens": sum(len(o) for o in outputs)})
    return files


def run(engine_dir: Path, out: Path, quick: bool = False) -> dict:
    warmup_n, measured_n = (4, 4) if quick else (40, 20)
    heldout = load_split("heldout")
    home_name = heldout[0].home
    tasks = [item.task for item in heldout if item.home == home_name][:measured_n]
    env = load_home(home_name)
    work = Path(tempfile.mkdtemp(prefix="orin-llm-restart-"))
    home = home_file(env, work)
    warm, fresh = work / "state-warm", work / "state-fresh"
    warmup = warmup_tasks(env, warmup_n, set(tasks))
    progress(f"restart: {warmup_n} warm-up plans in {home_name}, then the first {measured_n} after a restart")
    with DaemonProcess(engine_dir, extra=("--environment", str(home), "--state-dir", str(warm))) as d, \
            PlannerClient(d.socket, timeout_s=600) as c:
        for task in warmup:
            c.plan(task, **PLAN)
    saved = history_files(warm)  # written when the daemon stopped (and every few seconds before)
    runs: dict[str, list[dict]] = {"restarted": [], "fresh": []}
    with DaemonProcess(engine_dir, extra=("--environment", str(home), "--state-dir", str(warm))) as r, \
            DaemonProcess(engine_dir, extra=("--environment", str(home), "--state-dir", str(fresh))) as f, \
            PlannerClient(r.socket, timeout_s=600) as rc, PlannerClient(f.socket, timeout_s=600) as fc:
        clients = {"restarted": rc, "fresh": fc}
        for i, task in enumerate(tasks):
            for name in (("restarted", "fresh") if i % 2 == 0 else ("fresh", "restarted")):
                a = clients[name].plan(task, **PLAN)
                runs[name].append({"task": task, "plan": a["plan"], **a["speculation"],
                                   **{k: a["timings"][k] for k in ("completion_tokens", "forced_tokens",
                                                                   "decode_tokens_per_s", "total_ms")}})
    data = {"engine_dir": str(engine_dir), "home": home_name, "warmup_requests": warmup_n,
            "measured_requests": measured_n, "request": PLAN, "warmup_tasks": warmup,
            "history_saved": saved,
            "summary": {name: _summary(rows) for name, rows in runs.items()},
            "identical_plans": all(a["plan"] == b["plan"]
                                   for a, b in zip(runs["restarted"], runs["fresh"], strict=True)),
            "requests": runs}
    r, f = data["summary"]["restarted"], data["summary"]["fresh"]
    progress(f"restart: acceptance on the first {measured_n}: {r['acceptance_rate']:.2f} with the persisted history, "
             f"{f['acceptance_rate']:.2f} without; tokens per target step (median) "
             f"{r['mean_accepted_length_median']:.2f} vs {f['mean_accepted_length_median']:.2f}")
    write_json(out, "restart", data)
    _plot(data, out / "restart.png")
    shutil.rmtree(work, ignore_errors=True)  # the saved states; a run that failed leaves them to look at
    return data


def _summary(rows: list[dict]) -> dict:
    drafted, accepted = sum(r["drafted"] for r in rows), sum(r["accepted"] for r in rows)
    return {"drafted": drafted, "accepted": accepted, "acceptance_rate": accepted / drafted if drafted else 0.0,
            "mean_accepted_length_median": statistics.median(r["mean_accepted_length"] for r in rows),
            "acceptance_rate_per_request_median": statistics.median(r["acceptance_rate"] for r in rows),
            "decode_tokens_per_s_median": statistics.median(r["decode_tokens_per_s"] for r in rows),
            "completion_tokens": sum(r["completion_tokens"] for r in rows)}


def _plot(data: dict, path: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, color in (("restarted", "C0"), ("fresh", "C1")):
        rows = data["requests"][name]
        cum, acc, dr = [], 0, 0
        for r in rows:
            acc, dr = acc + r["accepted"], dr + r["drafted"]
            cum.append(acc / dr if dr else 0.0)
        label = (f"restarted on the state of {data['warmup_requests']} plans" if name == "restarted"
                 else "fresh state (the build's seed plans only)")
        ax.plot(range(1, len(rows) + 1), [r["acceptance_rate"] for r in rows], ".", color=color, alpha=0.5)
        ax.plot(range(1, len(rows) + 1), cum, "-", color=color, label=f"{label}: cumulative")
    ax.set_xlabel("request after the start")
    ax.set_ylabel("lookup acceptance rate (dots: per request)")
    ax.set_ylim(0, 1)
    ax.set_title(f"lookup drafter after a restart ({data['home']}, held-out tasks)", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
