"""The CLI's `serve`, `plan` and `environment` commands as plain functions (the typer layer in
orin_llm/cli.py only declares the options), and the engine loading of the in-process ones. Problems a
user can fix raise OrinError: one line, exit 2."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

from ..errors import OrinError
from .config import DaemonConfig


def load_engine(engine: Path, **options):
    """The engine for an in-process command (`generate`, `plan --engine`): it loads for seconds, so
    stderr says so and how long it took (stdout may be parsed: --json)."""
    from ..manifest import load_manifest
    from ..progress import announced
    from ..runtime.engine import Engine
    from ..runtime.engine_config import EngineConfig
    from .config import env_threads

    # A missing or corrupt manifest is one line of error, with no "loading ..." line before it.
    manifest = options.pop("manifest", None) or load_manifest(engine)
    with announced(f"loading {engine}"):
        return Engine.load(engine, EngineConfig.at_edge(threads=env_threads(), **options), manifest=manifest)


def load_planner(engine: Path, env):
    """`plan --engine`'s planner: the engine loaded, then the home's prefix computed and pinned (seconds
    more on a CPU), each said on stderr as load_engine says."""
    from ..planning.planner import Planner
    from ..progress import announced

    eng = load_engine(engine)
    with announced(f"pinning the home {env.name!r}"):
        return Planner(eng, env)


def serve_command(config: DaemonConfig) -> None:
    """Run the planning daemon until SIGTERM/SIGINT."""
    from .daemon import serve

    serve(config)


FEASIBILITY = ("enforce", "report", "off")  # planning/planner.py's, here without importing torch


def feasibility_options(goal: Optional[list[str]], feasibility: str, state: Optional[str]) -> dict:
    """--goal, --feasibility and --state as /v1/plan fields, checked here so that a typo is one line."""
    if feasibility not in FEASIBILITY:
        raise OrinError(f"--feasibility {feasibility!r}: choose enforce, report or off")
    opts: dict = {"feasibility": feasibility}
    if goal:
        for word in ("infer", "none"):
            if word in goal and list(goal) != [word]:
                raise OrinError(f"--goal {word} stands alone (infer: the model reads the goal in the task text, "
                                "the default; none: no goal); or give the facts (--goal 'at(mug, sink)' --goal said)")
        opts["goal"] = goal[0] if list(goal) in (["infer"], ["none"]) else list(goal)
    if state is not None:
        opts["state"] = json_object(state, "--state")
    return opts


def json_object(text: str, what: str) -> dict:
    try:
        value = json.loads(text)
    except ValueError as e:
        raise OrinError(f"{what}: not JSON ({e}); write an object like '{{\"robot_at\": \"kitchen\"}}'") from None
    if not isinstance(value, dict):
        raise OrinError(f"{what}: must be a JSON object like '{{\"robot_at\": \"kitchen\"}}', got {text!r}")
    return value


def plan_command(task: str, socket: Optional[Path], observations: Optional[list[str]], as_json: bool,
                 stream: bool, max_tokens: Optional[int], temperature: Optional[float], seed: Optional[int],
                 timeout_s: float, speculation: str = "auto", plan_opts: Optional[dict] = None) -> None:
    """Ask the daemon for a plan. --json prints the response (with --stream: one JSON event per line).
    `plan_opts`: feasibility_options()'s fields."""
    from ..client import PlannerClient, PlannerError

    opts = {"max_tokens": max_tokens, "temperature": temperature, "seed": seed, "speculation": speculation,
            **(plan_opts or {})}
    try:
        with PlannerClient(socket, timeout_s=timeout_s) as client:
            if not stream:
                result = client.plan(task, observations, **opts)
                if as_json:
                    print(json.dumps(result))
                    return
                print(result["plan"])
            else:
                result = {}
                for event in client.plan_stream(task, observations, **opts):
                    if as_json:
                        print(json.dumps(event), flush=True)
                    elif "delta" in event:
                        sys.stdout.write(event["delta"])
                        sys.stdout.flush()
                    result = event
                if as_json:
                    return
                print()
    except PlannerError as e:
        raise OrinError(str(e)) from None
    print(summary(result), file=sys.stderr)


def summary(result: dict) -> str:
    """Two lines for a person: the steps, then tokens and timings. With a daemon the queue wait comes
    first, then the goal's reading (goal "infer"), then the engine's figures, then what the client
    waited (all of them)."""
    steps = "; ".join(f"{s['action']}({', '.join(s['args'])})" for s in result.get("steps", []))
    t = result.get("timings", {})
    cached = f"{t.get('cached_prompt_tokens')} cached"
    engine = (f"TTFT {t.get('ttft_ms', 0):.0f} ms, decode {t.get('decode_tokens_per_s', 0):.1f} tok/s, "
              f"total {t.get('total_ms', 0):.0f} ms")
    if t.get("goal_reading_ms"):  # goal "infer": the goal read in the task text, before the plan
        engine = f"goal read in {t['goal_reading_ms']:.0f} ms, then {engine}"
    if "queue_ms" in t:  # from the daemon
        engine = (f"queued {t['queue_ms']:.0f} ms, then {engine} (since arrival: TTFT "
                  f"{t['ttft_since_arrival_ms']:.0f} ms, total {t['total_since_arrival_ms']:.0f} ms)")
    n = len(result.get("steps", []))
    head = f"-- {n} step(s): {steps}"
    if result.get("finish_reason") == "length":  # the plan did not end: max_tokens cut it
        head = f"-- {n} step(s), cut at max_tokens (the plan did not end by itself): {steps}"
    elif n == 0 and (result.get("search") or {}).get("source") == "start":
        head = "-- no step: the goal holds already"
    return (head + "\n" + feasibility_lines(result) +
            f"-- environment v{result.get('environment_version')}, {t.get('prompt_tokens')} prompt tokens "
            f"({cached}), {t.get('completion_tokens')} completion tokens, {engine}")


def feasibility_lines(result: dict) -> str:
    """What the simulation found: each violated step, and the goal reached or the facts missing."""
    lines = [f"-- violation at step {v['index']} {v['step']}: {v['reason']}" for v in result.get("violations") or []]
    if result.get("goal_inferred"):
        lines.append(f"-- goal read in the task: {', '.join(result['goal_inferred'])}")
    lines += [f"-- left out of the goal read: {d}" for d in result.get("goal_dropped") or []]
    lines += [f"-- doubt: {d}" for d in result.get("goal_doubts") or []]
    if result.get("goal_reached") is not None:
        search = result.get("search") or {}
        source = f" (plan from the {search['source']})" if search.get("source") in ("model", "search") else ""
        whose = "the goal read in the task" if result.get("goal_source") == "inferred" else "the goal given"
        if result["goal_reached"]:
            lines.append(f"-- {whose} reached{source}: {', '.join(result.get('goal') or [])}")
        else:
            why = f"; {search['reason']}" if search.get("reason") else ""
            lines.append(f"-- {whose} not reached: missing {', '.join(result.get('goal_missing') or [])}{why}")
    return "".join(line + "\n" for line in lines)


def health_command(socket: Optional[Path], wait_s: float, as_json: bool) -> bool:
    """Print the daemon's health; with wait_s > 0, wait that long for it to be ready first, whatever
    the first attempts get (no socket yet, a timeout, "loading"). Returns whether it is ready."""
    from ..client import NotReady, PlannerClient, PlannerError

    try:
        with PlannerClient(socket, timeout_s=max(wait_s, 30)) as client:
            h = client.wait_ready(wait_s) if wait_s > 0 else client.health()
    except NotReady as e:  # it answers: say how it is (exit 1), as without --wait
        h = e.health
    except PlannerError as e:
        raise OrinError(str(e)) from None
    if as_json:
        print(json.dumps(h))
    elif "engine" not in h:  # still loading (or failed to): no engine to describe yet
        print(f"{h['status']}: no engine yet, {h.get('loading_s', 0):.1f} s after the daemon started"
              + (f"; {h['error']}" if "error" in h else ""))
    else:
        env, queue = h["environment"], h["queue"]
        print(f"{h['status']}: engine {h['engine']} ({h['backend']}, {h['device']}), environment {env['name']!r} "
              f"v{env['version']} ({h['prefix_tokens']} prefix tokens pinned), queue {queue['depth']}/"
              f"{queue['capacity']}{', one running' if queue['running'] else ''}")
    return bool(h["ready"])


def environment_show_command(socket: Optional[Path], as_json: bool) -> None:
    """Print the daemon's home: YAML (or JSON) on stdout, its version on stderr."""
    import yaml

    from ..client import PlannerClient, PlannerError

    try:
        with PlannerClient(socket, timeout_s=30) as client:
            got = client.get_environment()
    except PlannerError as e:
        raise OrinError(str(e)) from None
    home = got["environment"]
    print(json.dumps(home, indent=2, ensure_ascii=False) if as_json
          else yaml.safe_dump(home, sort_keys=False, allow_unicode=True, width=100), end="" if not as_json else "\n")
    print(f"-- environment {home.get('name')!r}, version {got['version']}", file=sys.stderr)


def environment_push_command(file: Path, socket: Optional[Path], if_match: Optional[int]) -> None:
    """Validate a home file here (errors name the file and line), then PUT it with If-Match."""
    from ..client import PlannerClient, PlannerError
    from ..planning.home import load_environment

    env = load_environment(file)
    body = env.model_dump(mode="json", exclude_none=True)
    try:
        with PlannerClient(socket, timeout_s=300) as client:  # the daemon prefills the new prefix first
            r = client.put_environment(body, if_match=if_match)
    except PlannerError as e:
        if e.status == 412:
            raise OrinError(f"{e.message}; nothing was changed") from None
        raise OrinError(str(e)) from None
    print(f"environment {r['name']!r} is now version {r['version']} ({r['prefix_tokens']} prefix tokens pinned)")


def state_show_command(socket: Optional[Path], environment: Optional[str]) -> None:
    """Print the home's state as JSON."""
    from ..client import PlannerClient, PlannerError

    try:
        with PlannerClient(socket, timeout_s=30) as client:
            state = client.get_state(environment)
    except PlannerError as e:
        raise OrinError(str(e)) from None
    print(json.dumps(state, indent=2, ensure_ascii=False))


def state_update_command(update: str, socket: Optional[Path], environment: Optional[str]) -> None:
    """Send what changed; print the new state, and what the change cost on stderr."""
    from ..client import PlannerClient, PlannerError

    body = json_object(update, "the state update")
    try:
        with PlannerClient(socket, timeout_s=120) as client:
            r = client.update_state(body, environment)
    except PlannerError as e:
        raise OrinError(f"{e}; nothing was changed" if e.status == 422 else str(e)) from None
    print(json.dumps(r["state"], indent=2, ensure_ascii=False))
    print(f"-- environment v{r['environment_version']}: {r['computed_tokens']} tokens computed for the change",
          file=sys.stderr)
