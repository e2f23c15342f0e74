"""The goal read from a task's words (planning/goal_infer.py), alone, against each task's goal: the tuning
loop for the goal reading, on a set written to tune on (calibration/wording/: everyday wording, homes of
its own) or on the generator's calibration split. Greedy, on a real engine, one home's planner at a time.

    python bench/goal_reading.py --engine engines/smollm2-135m-demo [--set calibration/wording] [--out r.json]

Per task: the facts read, the goal, and what the reading got wrong (bench/plan_quality.py goal_errors);
then the shares of goals read exactly and covered, and the error counts. Never point it at a held-out
set: what is measured here is what gets tuned.
"""
from __future__ import annotations

import argparse
import collections
import json
import time
from pathlib import Path

from orin_llm.backends.loader import load_engine
from orin_llm.bench.plan_quality import goal_errors
from orin_llm.errors import OrinError
from orin_llm.planning.goal_infer import infer_goal
from orin_llm.planning.home import load_environment
from orin_llm.planning.home.goals import goal_of_plan
from orin_llm.planning.home.steps import check_steps
from orin_llm.planning.planner import Planner
from orin_llm.runtime.engine_config import EngineConfig


def tasks(where: Path) -> list[tuple[dict, Path]]:
    """(row, home file) for a set laid out as calibration/wording/ (homes/, tasks.jsonl)."""
    rows = [json.loads(line) for line in (where / "tasks.jsonl").read_text().splitlines() if line.strip()]
    return [(r, where / "homes" / f"{r['home']}.yaml") for r in rows]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--engine", required=True)
    ap.add_argument("--set", default="calibration/wording", help="a directory with homes/ and tasks.jsonl")
    ap.add_argument("--out")
    args = ap.parse_args()
    if "heldout" in args.set:
        raise SystemExit("goal_reading.py tunes: point it at a tuning set, never at a held-out one")
    engine = load_engine(args.engine, EngineConfig.at_edge())
    rows, planners = [], {}
    for row, home in tasks(Path(args.set)):
        env = load_environment(home)
        planner = planners.get(home) or planners.setdefault(home, Planner(engine, env))
        goal = row.get("goal") or goal_of_plan(env, check_steps("\n".join(row["reference_plan"]), env)[0], env.state)
        t0 = time.perf_counter()
        try:
            read = infer_goal(engine, planner.home(), row["task"]).facts
        except OrinError as e:
            read = []
            print(f"{row['id']}: {e}")
        errors = goal_errors(read, goal)
        rows.append({"id": row["id"], "task": row["task"], "goal": goal, "read": read, "errors": errors,
                     "ms": round((time.perf_counter() - t0) * 1e3, 1)})
        mark = "ok" if set(read) == set(goal) else ("covers" if set(read) >= set(goal) else "x")
        print(f"{row['id']:>16} {mark:6} read {read} goal {goal} {errors or ''}", flush=True)
    n = len(rows)
    errors = collections.Counter(e for r in rows for e in r["errors"])
    summary = {"tasks": n, "exact": sum(set(r["read"]) == set(r["goal"]) for r in rows) / n,
               "covers": sum(set(r["read"]) >= set(r["goal"]) for r in rows) / n, "errors": dict(errors)}
    print(json.dumps(summary))
    if args.out:
        Path(args.out).write_text(json.dumps({"set": args.set, "summary": summary, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
