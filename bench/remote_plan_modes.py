"""A remote plan under the home's state (issue #35, item 1): `whole` (one request with the home's grammar,
the state checked on the robot, a plan with a step that cannot run answered locally) against `stepwise`
(one request per step with the grammar of the steps feasible now), on a real OpenAI-compatible engine.

Each mode plans the same calibration tasks (the first --tasks of each of --homes), greedy, under
`feasibility: enforce`, through HedgedBackend with the hedge out of the way (first_token_share 1, a
300 s budget), so every answer is the remote's when it passes the robot's check. The local engine alone
plans the same tasks for reference. Per mode: the share of plans the remote served (its plan passed the
check: on the grammar and executable in the home's state), the share equal to the reference plan, the
fallback reasons, wall time per plan (p50, mean), remote requests, and prompt, cached and generated
tokens per plan as the engine reported them.

    python bench/remote_plan_modes.py --engine engines/smollm2-135m-demo --remote http://127.0.0.1:8000 \
        [--homes city_flat,cottage,loft] [--tasks 4] [--max-tokens 64] [--out result.json]

The engine behind --remote must serve the same model and tokenizer (tests/backends/remote/vllm_replica.py starts
one from an engine directory).
"""
import argparse
import collections
import json
import statistics
import time

from orin_llm.backends.loader import load_engine
from orin_llm.backends.remote.hedged import HedgedBackend
from orin_llm.backends.remote.settings import RemoteSettings
from orin_llm.planning.calibration_data import load_home, load_split
from orin_llm.planning.planner import Planner
from orin_llm.runtime.engine_config import EngineConfig
from orin_llm.runtime.sampling import SamplingParams


def run_one(planner: Planner, task: str, home: str, params: SamplingParams) -> tuple:
    prefix = planner.home(home).prefix
    t0 = time.perf_counter()
    run = planner.start(task, params, home=home, feasibility="enforce")
    gen = run.request
    planner.engine.submit(gen)
    while not gen.done:
        planner.engine.step()
    if gen.error is not None:
        raise gen.error
    plan = planner.finish(run, prefix)
    return plan, gen, time.perf_counter() - t0


def summary(rows: list[dict]) -> dict:
    n = len(rows)
    remote = [r for r in rows if r["served_by"] == "remote"]
    out = {"plans": n, "served_remote": round(len(remote) / n, 3),
           "equal_to_reference": round(sum(r["equal"] for r in rows) / n, 3),
           "fallback_reasons": dict(collections.Counter(r["fallback_reason"] for r in rows if r["fallback_reason"])),
           "wall_s_p50": round(statistics.median(r["wall_s"] for r in rows), 3),
           "wall_s_mean": round(statistics.mean(r["wall_s"] for r in rows), 3)}
    if remote:
        for key in ("requests", "prompt_tokens", "cached_tokens", "completion_tokens", "steps"):
            out[f"{key}_per_remote_plan"] = round(statistics.mean(r[key] for r in remote), 1)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--engine", required=True)
    ap.add_argument("--remote", required=True)
    ap.add_argument("--homes", default="city_flat,cottage,loft")
    ap.add_argument("--tasks", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--modes", default="local,whole,stepwise")
    ap.add_argument("--out")
    args = ap.parse_args()
    homes = args.homes.split(",")
    items = [i for h in homes for i in [x for x in load_split("calib") if x.home == h][:args.tasks]]
    engine = load_engine(args.engine, EngineConfig.at_edge(device="cpu"))
    params = SamplingParams(max_tokens=args.max_tokens)
    result = {"engine": args.engine, "remote": args.remote, "homes": homes, "tasks_per_home": args.tasks,
              "max_tokens": args.max_tokens, "modes": {}}
    for mode in args.modes.split(","):
        backend = engine if mode == "local" else HedgedBackend(engine, RemoteSettings(
            args.remote, first_token_share=1.0, timeout_s=300, backoff_s=0.001, backoff_max_s=0.001, plans=mode))
        planner = Planner(backend, load_home(homes[0]))
        for h in homes:
            planner.set_environment(load_home(h), name=h)
        rows = []
        for item in items:
            plan, gen, wall = run_one(planner, item.task, item.home, params)
            report = getattr(gen, "report", {"served_by": "local"})
            remote = report.get("remote", {})
            t = plan.result.timings
            rows.append({"id": item.id, "served_by": report["served_by"], "fallback_reason":
                         report.get("fallback_reason") if mode != "local" else None,
                         "equal": [str(s) for s in plan.steps] == list(item.reference_plan),
                         "wall_s": wall, "requests": remote.get("requests", 0), "prompt_tokens": t.prompt_tokens,
                         "cached_tokens": t.cached_prompt_tokens, "completion_tokens": t.completion_tokens,
                         "steps": len(plan.steps), "violations": len(plan.violations)})
            print(json.dumps({"mode": mode, **rows[-1]}), flush=True)
        for h in homes:
            planner.remove(h)
        if planner.pin is not None:
            engine.unpin(planner.pin)
        result["modes"][mode] = {"summary": summary(rows), "plans": rows}
        print(json.dumps({"mode": mode, **result["modes"][mode]["summary"]}), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
