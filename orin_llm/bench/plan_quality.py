"""Plans that work in the home: executability and goal success on the held-out homes, on a home
with its own action names and no examples (the hard case), and on the paraphrase split (homes and
everyday wording written apart from the generator, heldout/paraphrase/: never tuned on), for five ways
of planning.

The anchors are ProgPrompt's (executability, success rate, goal-condition recall) and the Embodied
Agent Interface's (errors sorted into unknown, affordance and precondition). For every task:

- the goal is the one the paraphrase split's writer gave; elsewhere what the task's reference plan
  makes true, found by simulating it
  (planning/home/goals.py goal_of_plan: where the objects it moves end up, the devices and doors it
  leaves changed, the `other` actions it does, whether it speaks);
- each mode plans greedily: `off` (free text), `grammar` (the home's grammar only), `enforce` (the
  grammar narrowed at each step by the state the plan has reached, no goal: the model's plan as it
  decodes it) and `enforce+goal` (the goal given: the planner checks its candidates and searches when
  they fail) and `enforce+inferred` (from the task text alone: the model writes the goal's facts under
  the home's goal grammar, planning/goal_infer.py, and the planner plans to them as with a given goal;
  the plan is scored against the reference's goal, the inferred one is kept in the row). The last is
  the plain request's path: a request with only a task takes it (the planner's default);
- the plan is simulated from the home's state (planning/home/world.py): executable when it has steps,
  every line is a step, every step's preconditions hold, no step brings the world back to a state the
  plan had been in (docs/HOMES.md, no loops) and the plan ended by itself (a plan cut by max_tokens is
  not one a robot can finish); goal success when it is executable and reaches every fact of the goal;
  goal-condition recall, the share of the goal's facts it reaches (a step that cannot run changes
  nothing, as on a robot); its length against the reference's; the time the request took.

Modes enforce, enforce+goal and enforce+inferred need a planner that takes `feasibility` and `goal`
(issue #32); on one that does not, they are left out of the JSON with that reason. Torch engines only, as the
constrained scenario.
"""

from __future__ import annotations

import inspect
import json
import statistics
import time
from collections import Counter
from pathlib import Path
from typing import Optional

from ..errors import OrinError
from ..planning.calibration_data import CalibrationItem, default_root, load_home, load_split
from ..planning.home import Environment, load_environment, loops, simulate
from ..planning.home.goals import goal_of_plan, parse_goal
from ..planning.home.steps import check_steps
from .common import progress, pyplot, write_json

MODES = ("off", "grammar", "enforce", "enforce+goal", "enforce+inferred")
MAX_TOKENS = 160  # the longest reference plan is 10 steps; room for a few more
HARD_HOME = "canal_house"
# A goal's request deadline: the model's candidates, then the search, within it (the planner's own
# default is for a robot's request on a fast machine; on a loaded 2-core VM one candidate can take longer).
GOAL_DEADLINE_S = 120.0
SPLITS = ("heldout", "hard", "paraphrase")
PARAPHRASE = Path(__file__).resolve().parents[2] / "heldout" / "paraphrase"
TUNED_ON = {"heldout": "the generator's held-out split: its wording is the calibration split's, which the goal "
                       "reading's cues were fitted to",
            "hard": "held out from tuning, written by the same generator's author; its results were read",
            "paraphrase": "never tuned on: written apart, by a writer who saw only docs/HOMES.md"}


def hard_home(root: Optional[Path] = None) -> tuple[Environment, list[CalibrationItem]]:
    """The hard held-out home (calibration/hard/): its Environment and its tasks."""
    where = (Path(root) if root else default_root()) / "hard"
    env = load_environment(where / f"{HARD_HOME}.yaml")
    items = []
    for lineno, line in enumerate((where / f"{HARD_HOME}.jsonl").read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                row = json.loads(line)
                items.append(CalibrationItem(row["id"], row["home"], row["task"], list(row["reference_plan"])))
            except (json.JSONDecodeError, KeyError) as err:
                raise OrinError(f"{where / HARD_HOME}.jsonl:{lineno}: not a task row ({err})") from None
    return env, items


def paraphrase_split(root: Path = PARAPHRASE) -> list[tuple[CalibrationItem, Environment]]:
    """The paraphrase split (heldout/paraphrase/README.md): its tasks, each with its goal and home."""
    homes: dict[str, Environment] = {}
    out = []
    path = root / "tasks.jsonl"
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            item = CalibrationItem(row["id"], row["home"], row["task"], list(row["reference_plan"]),
                                   list(row["goal"]))
        except (json.JSONDecodeError, KeyError, TypeError) as err:
            raise OrinError(f"{path}:{lineno}: not a task row ({err})") from None
        if item.home not in homes:
            homes[item.home] = load_environment(root / "homes" / f"{item.home}.yaml")
        out.append((item, homes[item.home]))
    return out


def tasks(quick: bool = False, splits: tuple[str, ...] = SPLITS) -> list[tuple[str, CalibrationItem, Environment]]:
    """(split, item, home) for every task of the run: the held-out split, the hard home's, the paraphrase
    split's (those of `splits`)."""
    homes: dict[str, Environment] = {}
    held = load_split("heldout") if "heldout" in splits else []
    env, hard = hard_home() if "hard" in splits else (None, [])
    para = paraphrase_split() if "paraphrase" in splits else []
    if quick:
        held, hard, para = held[::15], hard[::7], para[::13]
    out = [("heldout", it, homes.setdefault(it.home, load_home(it.home))) for it in held]
    return out + [("hard", it, env) for it in hard] + [("paraphrase", it, e) for it, e in para]


def reference_goal(env: Environment, item: CalibrationItem) -> list[str]:
    steps, rejected = check_steps("\n".join(item.reference_plan), env)
    if rejected:
        raise OrinError(f"{item.id}: its reference plan has lines that are not steps ({rejected[0].line!r})")
    return goal_of_plan(env, steps)


def score(env: Environment, text: str, facts: list[str], reference_len: int, truncated: bool = False) -> dict:
    """A plan's text judged in `env` from its state against the goal `facts`."""
    steps, rejected = check_steps(text, env, truncated=truncated)
    world, violations = simulate(env, steps)
    goal = parse_goal(facts, env)
    missing = goal.missing(world)
    looping = loops(env, steps)
    executable = bool(steps) and not rejected and not violations and not looping and not truncated
    kinds = Counter(v.kind for v in violations)
    if rejected:
        kinds["unknown"] += len(rejected)  # a line that is not a step of the home: a hallucination
    if looping:
        kinds["loop"] += len(looping)  # a step back to a state the plan had been in
    if truncated:
        kinds["cut"] += 1  # max_tokens ended it, not the plan
    return {"steps": len(steps), "rejected": len(rejected), "violations": [v.as_dict() for v in violations],
            "loops": looping, "truncated": truncated,
            "violation_kinds": dict(kinds), "executable": executable, "goal": facts, "missing": missing,
            "goal_success": executable and not missing, "recall": 1 - len(missing) / len(facts),
            "length_ratio": len(steps) / reference_len}


def _fact(text: str) -> tuple[str, tuple[str, ...]]:
    name, _, rest = text.partition("(")
    return name.strip(), tuple(a.strip() for a in rest.rstrip(")").split(",") if a.strip())


def goal_errors(read: list[str], reference: list[str]) -> list[str]:
    """What a goal read in the task got wrong against the reference goal, one word per reference fact it
    missed: `wrong_thing` (the same kind of fact about another thing or place: at(mug, sofa) for
    at(mug, table)), `wrong_kind` (another kind of fact about the same thing: robot_at(desk) for
    at(glasses, desk), on(lamp) for off(lamp)), `missing` (nothing about it); then `extra` per fact
    read that answers none of the reference's."""
    got = [_fact(f) for f in read]
    used: set[int] = set()
    out = []
    for ref in (f for f in reference if f not in read):
        name, args = _fact(ref)
        same = [i for i, (n, a) in enumerate(got) if n == name and set(a) & set(args)]
        other = [i for i, (n, a) in enumerate(got) if n != name and set(a) & set(args)]
        if same:
            out.append("wrong_thing")
            used.update(same)
        elif other:
            out.append("wrong_kind")
            used.update(other)
        else:
            out.append("missing")
    out += ["extra" for i, f in enumerate(read) if f not in reference and i not in used]
    return out


def planner_modes(planner_cls) -> tuple[list[str], dict[str, str]]:
    """The modes this planner can run, and why the others are left out."""
    params = inspect.signature(planner_cls.plan).parameters
    if "feasibility" in params and "goal" in params:
        return list(MODES), {}
    why = "this planner takes no feasibility/goal (issue #32's runtime part): run it on a checkout that has it"
    return ["off", "grammar"], {"enforce": why, "enforce+goal": why, "enforce+inferred": why}


def _plan(planner, task: str, mode: str, facts: list[str], with_feasibility: bool, max_tokens: int):
    from ..runtime.sampling import SamplingParams

    params = SamplingParams(max_tokens=max_tokens)
    kwargs: dict = {"speculation": "none", "constrained": mode != "off"}
    if with_feasibility:
        kwargs["feasibility"] = {"off": "off", "grammar": "report"}.get(mode, "enforce")
        kwargs["goal"] = "none"  # the modes without a goal: the model's plan as it decodes it
        if mode == "enforce+goal":
            kwargs["goal"], kwargs["deadline_s"] = facts, GOAL_DEADLINE_S
        elif mode == "enforce+inferred":
            kwargs["goal"], kwargs["deadline_s"] = "infer", GOAL_DEADLINE_S
    return planner.plan(task, params, **kwargs)


def run(engine, out: Path, quick: bool = False, items: Optional[list] = None,
        modes: Optional[list[str]] = None, max_tokens: int = MAX_TOKENS, splits: tuple[str, ...] = SPLITS) -> dict:
    from ..planning.planner import Planner

    runnable, skipped = planner_modes(Planner)
    modes = [m for m in (modes or runnable) if m in runnable]
    with_feasibility = not skipped
    chosen = items if items is not None else tasks(quick, splits)
    planners: dict[str, Planner] = {}
    rows = []
    try:
        for n, (split, it, env) in enumerate(chosen):
            planner = planners.get(env.name) or planners.setdefault(env.name, Planner(engine, env))
            facts = it.goal or reference_goal(env, it)
            row: dict = {"id": it.id, "split": split, "home": env.name, "task": it.task, "goal": facts,
                         "reference_steps": len(it.reference_plan)}
            for mode in modes:
                t0 = time.perf_counter()
                plan = _plan(planner, it.task, mode, facts, with_feasibility, max_tokens)
                took = time.perf_counter() - t0
                scored = score(env, plan.text, facts, len(it.reference_plan),
                               truncated=plan.result.finish_reason == "length")
                t = plan.result.timings
                row[mode] = {**scored, "plan": plan.text, "plan_s": took,
                             "finish_reason": plan.result.finish_reason,
                             "completion_tokens": t.completion_tokens,
                             "search": getattr(plan, "search", None),
                             # the answer's own generation: its masks, the state's share of them, and its
                             # decode steps (the model's: forced tokens take none), for the mask's cost
                             "mask_ms": t.mask_s * 1e3, "feasibility_ms": t.feasibility_s * 1e3, "masks": t.masks,
                             "decode_ms": max(0.0, t.total_s - t.ttft_s - t.mask_s) * 1e3,
                             "decode_steps": max(0, t.completion_tokens - t.forced_tokens - 1)}
                if mode == "enforce+inferred":
                    row[mode]["goal_inferred"] = plan.goal_inferred
            rows.append(row)
            progress(f"plan_quality {n + 1}/{len(chosen)} {it.id}: " + ", ".join(
                f"{m} {'ok' if row[m]['executable'] else 'x'}/{'goal' if row[m]['goal_success'] else '-'}"
                for m in modes))
    finally:
        for p in planners.values():
            for name in list(p.homes):
                engine.unpin(p.homes[name].pin)
    data = {"engine": engine.name, "backend": engine.manifest.backend, "max_tokens": max_tokens,
            "goal_deadline_s": GOAL_DEADLINE_S,
            "modes": modes, "skipped_modes": skipped, "tuned_on": {s: TUNED_ON[s] for s in SPLITS},
            "summary": summarize(rows, modes), "rows": rows}
    write_json(out, "plan_quality", data)
    plot(data, out, engine.name)
    return data


def summarize(rows: list[dict], modes: list[str]) -> dict:
    """Per split (heldout, hard) and mode: the shares, recall, lengths, times and error kinds."""
    out: dict = {}
    for split in SPLITS:
        mine = [r for r in rows if r["split"] == split]
        if not mine:
            continue
        out[split] = {"tasks": len(mine)}
        for mode in modes:
            got = [r[mode] for r in mine if mode in r]
            ratios = [g["length_ratio"] for g in got if g["goal_success"]]
            kinds: Counter = Counter()
            for g in got:
                kinds.update(g["violation_kinds"])
            sources = Counter((g["search"] or {}).get("source") for g in got if g.get("search"))
            out[split][mode] = {
                "executability": sum(g["executable"] for g in got) / len(got),
                "goal_success": sum(g["goal_success"] for g in got) / len(got),
                "goal_condition_recall": statistics.fmean(g["recall"] for g in got),
                "length_ratio_successful": statistics.median(ratios) if ratios else None,
                "plan_s_median": statistics.median(g["plan_s"] for g in got),
                "plan_s_max": max(g["plan_s"] for g in got),
                "cut_by_max_tokens": sum(g["finish_reason"] == "length" for g in got),
                "violation_kinds": dict(kinds), "search_sources": dict(sources)}
            masks, steps = sum(g.get("masks", 0) for g in got), sum(g.get("decode_steps", 0) for g in got)
            if masks and steps:  # the state's narrowing per mask against a decode step's model time
                narrowed = sum(g["feasibility_ms"] for g in got)
                narrow, step = narrowed / masks, sum(g["decode_ms"] for g in got) / steps
                # and all of it against all the decode time (masks included): a model step runs after
                # several masks where the grammar forces tokens, so this share is the larger one
                spent = sum(g["decode_ms"] + g["mask_ms"] for g in got)
                out[split][mode].update(narrowing_ms_per_mask=narrow, decode_step_ms=step,
                                        narrowing_share_of_step=narrow / step if step else None,
                                        narrowing_share_of_decode=narrowed / spent)
            if mode == "enforce+inferred":  # how often the model read the reference's goal itself
                read = [(set(r[mode].get("goal_inferred") or []), set(r["goal"])) for r in mine if mode in r]
                out[split][mode]["inferred_goal_exact"] = sum(g == ref for g, ref in read) / len(read)
                # every reference fact read, and maybe more (where the speaker is: robot_at, which the
                # reference plan's goal leaves out)
                out[split][mode]["inferred_goal_covers"] = sum(g >= ref for g, ref in read) / len(read)
                # where a small model ends: what the reading got wrong, per kind of error
                errors: Counter = Counter()
                for r in mine:
                    if mode in r:
                        errors.update(goal_errors(r[mode].get("goal_inferred") or [], r["goal"]))
                out[split][mode]["inferred_goal_errors"] = dict(errors)
    return out


def plot(data: dict, out: Path, name: str) -> None:
    plt = pyplot()
    splits = [s for s in SPLITS if s in data["summary"]]
    fig, axes = plt.subplots(1, len(splits), figsize=(6.0 * len(splits), 3.9), squeeze=False)
    modes = data["modes"]
    metrics = (("executability", "executable"), ("goal_success", "goal reached"),
               ("goal_condition_recall", "goal-condition recall"))
    width = 0.8 / len(metrics)
    for ax, split in zip(axes[0], splits, strict=True):
        s = data["summary"][split]
        for k, (key, label) in enumerate(metrics):
            xs = [i + (k - 1) * width for i in range(len(modes))]
            ax.bar(xs, [s[m][key] * 100 for m in modes], width, label=label)
        ax.set_xticks(range(len(modes)), modes, rotation=15, fontsize=8)
        ax.set_ylim(0, 105)
        ax.set_ylabel("% of tasks")
        title = {"heldout": "held-out homes (generator's wording)",
                 "paraphrase": "paraphrase: everyday wording, new homes",
                 "hard": f"{HARD_HOME}: own action names, no examples"}[split]
        ax.set_title(f"{title} ({s['tasks']} tasks)", fontsize=9)
    axes[0][0].legend(fontsize=8, loc="upper left")
    fig.suptitle(f"plan quality, {name}")
    fig.tight_layout()
    fig.savefig(out / "plan_quality.png", dpi=120)
    plt.close(fig)
