"""Check the hand-written wording tuning set (calibration/wording/).

Run from the repository root:

    PYTHONPATH=. .venv/bin/python calibration/wording/check.py

For every task in tasks.jsonl: the home loads (load_environment, which also checks the home's
examples), the goal parses (parse_goal), the reference plan parses (check_steps, nothing rejected),
the goal does NOT hold in the home's start state, every step can run in the state the plan has
reached (World.check is None, then World.apply), the plan has no loops (loops()), and the goal
holds at the end. Prints one line per task and "all tasks pass" at the end; exits 1 on any problem.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

from orin_llm.planning.home import World, load_environment, loops
from orin_llm.planning.home.goals import parse_goal
from orin_llm.planning.home.steps import check_steps

HERE = Path(__file__).resolve().parent
HOMES = HERE / "homes"
TASKS = HERE / "tasks.jsonl"
KEYS = {"id", "home", "task", "goal", "reference_plan"}


def check_task(row: dict, envs: dict) -> list[str]:
    problems: list[str] = []
    if set(row) != KEYS:
        return [f"keys {sorted(row)} != {sorted(KEYS)}"]
    home = row["home"]
    if home not in envs:
        return [f"no home {home!r} in {HOMES}"]
    if not re.fullmatch(rf"{re.escape(home)}-\d\d", row["id"]):
        problems.append(f"id {row['id']!r} is not <home>-NN")
    if not isinstance(row["task"], str) or not row["task"].strip():
        problems.append("empty task text")
    if not row["goal"] or not row["reference_plan"]:
        return problems + ["empty goal or reference plan"]
    env = envs[home]
    try:
        goal = parse_goal(row["goal"], env)
    except Exception as exc:  # OrinError and friends: the goal is refused
        return problems + [f"goal refused: {exc}"]
    steps, rejected = check_steps("\n".join(row["reference_plan"]), env)
    if rejected or len(steps) != len(row["reference_plan"]):
        return problems + [f"plan rejected: {[(r.line, r.reason) for r in rejected]}"]
    world = World.start(env)
    if goal.reached(world):
        problems.append("goal already holds at the start")
    for i, step in enumerate(steps):
        violation = world.check(step.action, step.args, i)
        if violation is not None:
            return problems + [f"step {i} {row['reference_plan'][i]} cannot run: {violation.kind} - {violation.reason}"]
        world = world.apply(step.action, step.args)
    missing = goal.missing(world)
    if missing or not goal.reached(world):
        problems.append(f"goal not reached, missing {missing}")
    looped = loops(env, steps)
    if looped:
        problems.append(f"plan loops at steps {looped}")
    return problems


def main() -> int:
    failures = 0
    envs = {}
    for path in sorted(HOMES.glob("*.yaml")):
        try:
            env = load_environment(path)
        except Exception as exc:
            print(f"FAIL home {path.name}: {exc}")
            failures += 1
            continue
        if env.name != path.stem:
            print(f"FAIL home {path.name}: name {env.name!r} differs from the file name")
            failures += 1
        envs[env.name] = env
        print(f"ok   home {env.name}: {len(env.rooms)} rooms, {len(env.actions)} actions, {len(env.examples)} examples")
    rows = []
    for n, line in enumerate(TASKS.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            print(f"FAIL tasks.jsonl line {n}: {exc}")
            failures += 1
    ids = Counter(r.get("id") for r in rows)
    for dup in [i for i, c in ids.items() if c > 1]:
        print(f"FAIL duplicate id {dup}")
        failures += 1
    for row in rows:
        problems = check_task(row, envs)
        tag = row.get("id", "?")
        if problems:
            failures += 1
            print(f"FAIL {tag}: " + "; ".join(problems))
        else:
            print(f"ok   {tag}: {len(row['goal'])} facts, {len(row['reference_plan'])} steps | {row['task']}")
    per_home = Counter(r.get("home") for r in rows)
    print(f"{len(rows)} tasks: " + ", ".join(f"{h} {c}" for h, c in sorted(per_home.items())))
    if failures:
        print(f"{failures} problem(s)")
        return 1
    print("all tasks pass")
    return 0


if __name__ == "__main__":
    sys.exit(main())
