"""Check the held-out paraphrase split (heldout/paraphrase/): its homes load, and every task's
reference plan runs step by step from the home's start state and reaches the task's goal, which
does not already hold at the start.

    PYTHONPATH=. .venv/bin/python heldout/paraphrase/check.py

Prints one line per task and a summary; exits 1 on any problem.

Besides the simulator's own rules (docs/HOMES.md: a step that cannot run is a problem), the plans are
held to two stricter ones, since an unknown fact never blocks a step in the simulator:
- the robot moves explicitly: a step that acts on a thing (pick, place, open, close, a switch, an
  `other` action) comes only after the plan's first navigate step;
- a container is opened explicitly: picking from, or placing into, a place that opens and closes
  needs it known open at that step (a `place` into it or a `pick` from it while its state is unknown
  is a problem).
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from orin_llm.planning.home import World, load_environment  # noqa: E402
from orin_llm.planning.home.goals import parse_goal  # noqa: E402
from orin_llm.planning.home.steps import check_steps  # noqa: E402

MIN_HOMES, MIN_TASKS = 3, 45
KEYS = {"id", "home", "task", "goal", "reference_plan"}
ACTING = {"pick", "place", "open", "close", "switch_on", "switch_off", "other"}


def check_homes() -> tuple[dict, list[str]]:
    homes, problems = {}, []
    for path in sorted((HERE / "homes").glob("*.yaml")):
        try:
            env = load_environment(str(path))
            World.start(env)
        except Exception as e:  # noqa: BLE001 - report every home's problem, then fail
            problems.append(f"home {path.name}: {e}")
            continue
        if env.name != path.stem:
            problems.append(f"home {path.name}: its name is {env.name!r}, not the file stem {path.stem!r}")
        homes[path.stem] = env
    return homes, problems


def check_task(task: dict, homes: dict) -> list[str]:
    problems = []
    if set(task) != KEYS:
        return [f"keys {sorted(task)}, want {sorted(KEYS)}"]
    env = homes.get(task["home"])
    if env is None:
        return [f"no home {task['home']!r} in homes/"]
    if not re.fullmatch(rf"para-{re.escape(task['home'])}-\d\d", task["id"]):
        problems.append(f"id {task['id']!r} is not para-{task['home']}-NN")
    if not isinstance(task["task"], str) or not task["task"].strip():
        problems.append("the task text is empty")
    try:
        goal = parse_goal(task["goal"], env)
    except Exception as e:  # noqa: BLE001
        return problems + [f"goal: {e}"]
    steps, rejected = check_steps("\n".join(task["reference_plan"]), env)
    for r in rejected:
        problems.append(f"plan line rejected: {r.as_dict()}")
    if len(steps) != len(task["reference_plan"]):
        problems.append(f"{len(steps)} steps read from {len(task['reference_plan'])} plan lines")

    world = World.start(env)
    for fact in goal.facts:
        if fact.holds(world):
            problems.append(f"goal fact {fact} already holds at the start")
    openable = env.openable_places()
    moved = False
    for i, step in enumerate(steps):
        kind = env.action(step.action).effective_kind
        if kind in ACTING and not moved:
            problems.append(f"step {i} {step}: acts before the plan has moved the robot")
        if kind == "pick":
            where = world.location(step.args[0])
            if where in openable and world.is_open(where) is not True:
                problems.append(f"step {i} {step}: takes from {where} without opening it first")
        if kind == "place" and step.args[1] in openable and world.is_open(step.args[1]) is not True:
            problems.append(f"step {i} {step}: puts into {step.args[1]} without opening it first")
        v = world.check(step.action, step.args, index=i)
        if v is not None:
            problems.append(f"step {i} {step} cannot run ({v.kind}): {v.reason}")
            continue
        world = world.apply(step.action, step.args)
        moved = moved or kind == "navigate"
    missing = goal.missing(world)
    if missing:
        problems.append(f"goal not reached, missing: {', '.join(missing)}")
    return problems


def main() -> int:
    homes, problems = check_homes()
    for p in problems:
        print("FAIL", p)
    tasks = []
    for n, line in enumerate((HERE / "tasks.jsonl").read_text().splitlines(), 1):
        if line.strip():
            try:
                tasks.append(json.loads(line))
            except json.JSONDecodeError as e:
                problems.append(f"tasks.jsonl line {n}: {e}")
                print("FAIL", problems[-1])
    seen = Counter(t.get("id") for t in tasks)
    for tid, c in seen.items():
        if c > 1:
            problems.append(f"id {tid} used {c} times")
            print("FAIL", problems[-1])
    kinds: Counter = Counter()
    for t in tasks:
        found = check_task(t, homes)
        if found:
            problems += [f"{t.get('id')}: {p}" for p in found]
            print(f"FAIL {t.get('id')}: " + "; ".join(found))
        else:
            print(f"ok   {t['id']:<24} {len(t['reference_plan']):>2} steps  goal {', '.join(t['goal'])}")
        for f in t.get("goal", []):
            k = f.split("(")[0].strip()
            if k == "done":
                gives = ("hand_over", "give", "present", "hand")
                k = "done(give)" if any(f"done({a}," in f.replace(" ", "") for a in gives) else "done(other)"
            kinds[k] += 1
    per_home = Counter(t.get("home") for t in tasks)
    for h in homes:
        if not per_home[h]:
            problems.append(f"home {h} has no tasks")
            print("FAIL", problems[-1])
    if len(homes) < MIN_HOMES:
        problems.append(f"{len(homes)} homes, want at least {MIN_HOMES}")
    if len(tasks) < MIN_TASKS:
        problems.append(f"{len(tasks)} tasks, want at least {MIN_TASKS}")
    print(f"\n{len(homes)} homes, {len(tasks)} tasks: " + ", ".join(f"{h} {per_home[h]}" for h in homes))
    print("goal facts by kind: " + ", ".join(f"{k} {c}" for k, c in sorted(kinds.items())))
    print(f"{len(problems)} problem(s)" if problems else "all tasks pass")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
