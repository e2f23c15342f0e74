"""Plans a robot can execute: the home's grammar on vs off, on the held-out homes and tasks.

For every held-out task (plans the calibration never saw) the same greedy request runs
unconstrained and constrained, each with plain decoding and with every drafter the engine has:

- executable: the share of plans whose every line is a step of the home (planning/home/steps.py), and the
  lines the unconstrained plans wrote that the home cannot execute;
- speed: decode tokens/s constrained over unconstrained (jump-forward included: tokens the grammar
  forces are emitted without a model step; `forced_tokens` counts them);
- speculation: each drafter's acceptance rate with and without the grammar;
- time to first step: when the first complete, valid line of a streamed plan arrived, against the
  whole plan (both from the request's start), which is what a robot that starts walking gains.

Runs on the torch engine (TensorRT-LLM 0.12 takes the grammar through its logits post-processor,
tested through the fake only).
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from ..planning.calibration_data import load_home, load_split
from ..planning.home import Step
from ..planning.home.steps import check_line
from ..planning.planner import Planner
from ..runtime.sampling import SamplingParams
from .common import progress, pyplot, write_json

MAX_TOKENS = 96


def _first_step_s(engine, gen, t0: float, env) -> tuple[float, float]:
    """(time to the first complete valid line, time to the whole plan), streamed, from t0."""
    text, first = "", None
    for delta in engine.deltas(gen):
        text += delta
        if first is None and "\n" in text and isinstance(check_line(text.split("\n", 1)[0], env), Step):
            first = time.perf_counter() - t0
    total = time.perf_counter() - t0
    return (first if first is not None else total), total


def run(engine, out: Path, quick: bool = False) -> dict:
    items = load_split("heldout")[::10] if quick else load_split("heldout")
    drafters = [m for m in ("lookup", "draft_model", "combined") if m in engine.speculation_modes]
    draft_items = items[:1] if quick else items[::5]  # the draft model is slow on a CPU (issue #17)
    params = SamplingParams(max_tokens=MAX_TOKENS)
    planners: dict[str, Planner] = {}
    rows = []
    try:
        for n, it in enumerate(items):
            planner = planners.get(it.home) or planners.setdefault(it.home, Planner(engine, load_home(it.home)))
            row = {"id": it.id, "home": it.home}
            for constrained in (False, True):
                key = "constrained" if constrained else "unconstrained"
                modes = ["none"] + (drafters if it in draft_items else [m for m in drafters if m == "lookup"])
                for mode in modes:
                    plan = planner.plan(it.task, params, speculation=mode, constrained=constrained)
                    t, s = plan.result.timings, plan.result.speculation
                    row[f"{key}/{mode}"] = {
                        "steps": len(plan.steps), "rejected": [r.as_dict() for r in plan.rejected],
                        "executable": bool(plan.steps) and not plan.rejected,
                        "decode_tokens_per_s": t.decode_tokens_per_s, "completion_tokens": t.completion_tokens,
                        "decode_s": t.total_s - t.ttft_s, "forced_tokens": t.forced_tokens,
                        "drafted": s.drafted, "accepted": s.accepted, "token_ids": plan.result.token_ids}
                gen = planner.start(it.task, params, speculation="none", constrained=constrained).request
                first, total = _first_step_s(planner.engine, gen, gen.started or time.perf_counter(),
                                             planner.prefix.environment)
                row[f"{key}/stream"] = {"first_step_s": first, "total_s": total}
            rows.append(row)
            c, u = row["constrained/none"], row["unconstrained/none"]
            progress(f"constrained {n + 1}/{len(items)} {it.id}: executable {u['executable']} → {c['executable']}, "
                     f"{u['decode_tokens_per_s']:.1f} → {c['decode_tokens_per_s']:.1f} tok/s, "
                     f"{c['forced_tokens']} forced")
    finally:
        for p in planners.values():
            for name in list(p.homes):
                engine.unpin(p.homes[name].pin)
    data = summarize(rows, drafters)
    data.update({"engine": engine.name, "backend": engine.manifest.backend, "tasks": len(items),
                 "max_tokens": MAX_TOKENS, "rows": rows})
    write_json(out, "constrained", data)
    _plot(data, out, engine.name)
    return data


def _speed(rows: list[dict], key: str) -> float:
    tokens = sum(max(0, r[key]["completion_tokens"] - 1) for r in rows if key in r)
    seconds = sum(r[key]["decode_s"] for r in rows if key in r)
    return tokens / seconds if seconds else 0.0


def summarize(rows: list[dict], drafters: list[str]) -> dict:
    out: dict = {"executable_share": {}, "decode_tokens_per_s": {}, "acceptance_rate": {}, "identical_greedy": {}}
    for key in ("unconstrained", "constrained"):
        out["executable_share"][key] = sum(r[f"{key}/none"]["executable"] for r in rows) / len(rows)
        out["decode_tokens_per_s"][key] = _speed(rows, f"{key}/none")
        for mode in drafters:
            have = [r for r in rows if f"{key}/{mode}" in r]
            drafted = sum(r[f"{key}/{mode}"]["drafted"] for r in have)
            accepted = sum(r[f"{key}/{mode}"]["accepted"] for r in have)
            out["acceptance_rate"][f"{key}/{mode}"] = accepted / drafted if drafted else 0.0
            out["identical_greedy"][f"{key}/{mode}"] = all(
                r[f"{key}/{mode}"]["token_ids"] == r[f"{key}/none"]["token_ids"] for r in have)
            out["decode_tokens_per_s"][f"{key}/{mode}"] = _speed(have, f"{key}/{mode}")
    c = [r["constrained/none"] for r in rows]
    out["constrained_over_unconstrained_decode"] = (out["decode_tokens_per_s"]["constrained"]
                                                     / out["decode_tokens_per_s"]["unconstrained"])
    out["forced_share"] = sum(x["forced_tokens"] for x in c) / max(1, sum(x["completion_tokens"] for x in c))
    out["unexecutable_lines_unconstrained"] = sum(len(r["unconstrained/none"]["rejected"]) for r in rows)
    first = [r["constrained/stream"]["first_step_s"] for r in rows]
    total = [r["constrained/stream"]["total_s"] for r in rows]
    out["time_to_first_step_ms"] = statistics.median(first) * 1e3
    out["time_to_whole_plan_ms"] = statistics.median(total) * 1e3
    return out


def _plot(data: dict, out: Path, name: str) -> None:
    plt = pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.6))
    share = data["executable_share"]
    a.bar(["unconstrained", "constrained"], [share["unconstrained"] * 100, share["constrained"] * 100],
          color=["gray", "tab:green"])
    a.set_ylabel("plans whose every line executes (%)")
    a.set_ylim(0, 105)
    a.set_title(f"{data['tasks']} held-out tasks")
    rows = data["rows"]
    xs = range(len(rows))
    b.plot(xs, [r["constrained/stream"]["total_s"] * 1e3 for r in rows], "o", label="whole plan")
    b.plot(xs, [r["constrained/stream"]["first_step_s"] * 1e3 for r in rows], "o", label="first step")
    b.set_xlabel("held-out task")
    b.set_ylabel("ms from the request's start")
    b.set_title("streamed constrained plans")
    b.legend()
    fig.suptitle(f"constrained plans, {name}")
    fig.tight_layout()
    fig.savefig(out / "constrained.png", dpi=120)
