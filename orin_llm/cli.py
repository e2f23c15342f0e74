"""`orin-llm`: a thin typer layer over build, runtime and server. Errors a user can fix print
one line and exit 2; anything else is a bug and keeps its traceback.

Help is click's plain layout (rich_markup_mode=None): typer's rich layout (typer 0.29) prints a
type column for every parameter, flags included, so each flag read `--embedded <bool>` and even
`--help <bool>`, as if it took a value; the plain layout writes a type only for options that take
one (typer/core.py, TyperOption.get_help_record)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from .errors import OrinError
from .server.config import DEFAULT_ENGINE, typer_command

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False, rich_markup_mode=None,
                  help="Build, serve and call a planning LLM on Jetson AGX Orin (and anywhere else).")
environment_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                              help="Show or replace the home of a running daemon.")
app.add_typer(environment_app, name="environment")
state_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                        help="Show or update the state of a running daemon's home (where the robot is, what it "
                             "holds, where things lie, what is open or on).")
app.add_typer(state_app, name="state")

SPECULATION_HELP = ("Drafter for speculative decoding: auto, none, lookup, draft_model or combined "
                    "(an engine without a draft model has auto, none and lookup).")
FEASIBILITY_HELP = ("enforce: every step's preconditions hold in the state simulated from the steps before it; "
                    "report: the home's grammar only, and the violations listed; off: no state checked.")
GOAL_HELP = ("A fact the plan must make true, written like a step: at(mug, sink), holding(mug), robot_at(kitchen), "
             "open(fridge), closed(fridge), on(tv), off(tv), done(wipe, table), said (repeatable); "
             "`--goal infer`: the model reads the goal in the task text (the default where a goal can be "
             "checked); `--goal none`: no goal, the model's plan as it decodes it.")
SOCKET_HELP = "Daemon socket (default: $ORIN_LLM_SOCKET, else the user's, else /run/orin-llm/planner.sock)."


@app.command()
def build(
    profile: Optional[Path] = typer.Option(None, help="Build profile (TOML)."),
    embedded: bool = typer.Option(False, "--embedded", help="Build the embedded default profile."),
    out: Optional[Path] = typer.Option(None, help="Engine directory to write (default engines/<name>)."),
    force: bool = typer.Option(False, "--force", help="Replace an existing engine directory."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress lines."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the memory plan and every build "
                                 "command without running anything."),
) -> None:
    """Build an engine directory from a profile (memory plan, weights, draft, KV scales)."""
    from .build.pipeline import build_engine
    from .profile import embedded_profile, load_profile

    if embedded == (profile is not None):
        raise OrinError("give exactly one of --profile FILE or --embedded")
    prof = embedded_profile() if embedded else load_profile(profile)
    target = out or Path("engines") / prof.name
    if prof.backend == "trtllm" and not dry_run:  # the machine's own warnings first (orin-llm doctor's too)
        from .doctor.preflight import preflight

        for w in preflight():
            typer.echo(f"warning: {w}", err=True)
    path = build_engine(prof, target, profile.parent if profile else None, quiet=quiet, force=force,
                        dry_run=dry_run)
    if not dry_run:
        typer.echo(str(path))


@app.command()
def calibrate(
    engine: Path = typer.Option(DEFAULT_ENGINE, help="Engine directory to (re)calibrate."),
    split: str = typer.Option("calib", help="Calibration split (calibration/<split>.jsonl)."),
    limit: Optional[int] = typer.Option(None, help="Use at most this many items (round-robin over homes)."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress lines."),
) -> None:
    """Derive static INT8 KV scales (absmax per layer and KV head) and store them in the engine."""
    from .build.calibrate import calibrate_engine

    manifest = calibrate_engine(engine, split, limit, quiet=quiet)
    for role, entry in (("target", manifest.target), ("draft", manifest.draft)):
        if entry is not None:
            typer.echo(f"{role}: {entry.kv_cache.scales}")


@app.command()
def memory(
    profile: Path = typer.Option(..., help="Build profile (TOML)."),
    as_json: bool = typer.Option(False, "--json", help="Print the plan as JSON."),
    engine: Optional[Path] = typer.Option(None, help="A trtllm engine directory built from the profile: plan with "
                                          "its engine files' real sizes (measured) instead of the estimates."),
) -> None:
    """Plan unified memory: weights, KV cache and headroom next to the policy model."""
    from .build.memory import check_feasible, engine_file_sizes, format_plan, plan_memory
    from .profile import load_profile

    sizes = None
    if engine is not None:
        sizes = engine_file_sizes(engine)
        if not sizes:
            raise OrinError(f"{engine}: no TensorRT-LLM engine files (target/rank*.engine) here; build it with "
                            "orin-llm build, or leave out --engine for the estimates")
    plan = plan_memory(load_profile(profile), profile.parent, engine_files=sizes)
    typer.echo(json.dumps(memory_json(plan), indent=2) if as_json else format_plan(plan))
    check_feasible(plan)  # infeasible: one line with the numbers that do not fit, exit 2
    if plan.deployment.get("refused"):  # a combination TensorRT-LLM 0.12 refuses: the rule and the fix, exit 2
        raise OrinError(plan.deployment["refused"])


def memory_json(plan) -> dict:
    d = plan.as_dict()
    keep = ("kv_bytes_per_token", "weights_bytes", "max_kv_tokens", "kv_bytes")
    out = {m: ({k: d[m][k] for k in keep} if d[m] else None) for m in ("target", "draft")}
    out.update({k: d[k] for k in ("total_bytes", "budget_bytes", "headroom_bytes", "feasible", "problems",
                                  "warm_homes", "deployment", "measured", "estimated")})
    out["detail"] = d
    return out


def _params(max_tokens, temperature, top_p, seed, stop):
    from .runtime.sampling import SamplingParams

    return SamplingParams(max_tokens=max_tokens, temperature=temperature, top_p=top_p, seed=seed,
                          stop=list(stop or []))


@app.command()
def generate(
    prompt: str = typer.Argument(..., metavar="PROMPT", help="The prompt (wrapped in the chat template unless --raw)."),
    engine: Path = typer.Option(DEFAULT_ENGINE, help="Engine directory."),
    max_tokens: int = typer.Option(128, help="Most tokens to generate."),
    temperature: float = typer.Option(0.0, help="Sampling temperature; 0 = greedy."),
    top_p: float = typer.Option(1.0, help="Nucleus sampling: keep the most likely tokens up to this probability."),
    seed: Optional[int] = typer.Option(None, help="Random seed for sampling (temperature > 0)."),
    stop: Optional[list[str]] = typer.Option(None, metavar="TEXT", help="Stop string (repeatable)."),
    speculation: str = typer.Option("auto", help=SPECULATION_HELP),
    raw: bool = typer.Option(False, "--raw", help="Send the prompt as is, without the chat template."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of streaming."),
    device: str = typer.Option("auto", help="cpu, cuda, or auto."),
) -> None:
    """Generate text from an engine, streaming tokens as they come."""
    from .server.cli import load_engine

    eng = load_engine(engine, device=device)
    ids = eng.encode(prompt) if raw else eng.chat_ids([{"role": "user", "content": prompt}])
    gen = eng.generate(ids, _params(max_tokens, temperature, top_p, seed, stop), speculation)
    if as_json:
        res = eng.run(gen)
        typer.echo(json.dumps({"engine": eng.name, "text": res.text, "finish_reason": res.finish_reason,
                               "timings": res.timings.as_dict(), "speculation": res.speculation.as_dict()}))
        return
    for delta in eng.deltas(gen):
        sys.stdout.write(delta)
        sys.stdout.flush()
    res = gen.result
    typer.echo("")
    typer.echo(_timing_line(res.timings, res.speculation), err=True)


def _timing_line(t, spec) -> str:
    return (f"-- {t.prompt_tokens} prompt tokens ({t.cached_prompt_tokens} cached), "
            f"{t.completion_tokens} completion tokens, TTFT {t.ttft_s * 1e3:.0f} ms, "
            f"decode {t.decode_tokens_per_s:.1f} tok/s, total {t.total_s * 1e3:.0f} ms; "
            f"speculation {spec.drafter}: {spec.accepted}/{spec.drafted} drafts accepted")


def _serve(config) -> None:
    from .server.cli import serve_command

    serve_command(config)


# Its options are DaemonConfig's fields (server/config.py), which `python -m orin_llm.server.daemon` shares.
app.command(name="serve")(typer_command(_serve, "Serve planning calls over a local Unix socket (HTTP/1.1, "
                                        "OpenAI-compatible chat too)."))


@app.command()
def plan(
    task: str = typer.Argument(..., metavar="TASK", help="What the robot should do."),
    socket: Optional[Path] = typer.Option(None, help=SOCKET_HELP),
    engine: Optional[Path] = typer.Option(None, help="Run in-process on this engine instead of the daemon."),
    environment: Optional[Path] = typer.Option(None, help="In-process only: home environment (YAML, JSON or "
                                               "text); default: the example home."),
    observation: Optional[list[str]] = typer.Option(None, metavar="TEXT", help="An observation (repeatable)."),
    max_tokens: Optional[int] = typer.Option(None, help="Most plan tokens (default 128)."),
    temperature: Optional[float] = typer.Option(None, help="Sampling temperature; 0 or unset = greedy."),
    seed: Optional[int] = typer.Option(None, help="Random seed for sampling (temperature > 0)."),
    speculation: str = typer.Option("auto", help=SPECULATION_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print the response as JSON."),
    stream: bool = typer.Option(False, "--stream", help="Print the plan as it is decoded."),
    timeout_s: float = typer.Option(120.0, help="Give up waiting for the daemon after this long."),
    goal: Optional[list[str]] = typer.Option(None, metavar="FACT", help=GOAL_HELP),
    deadline_ms: Optional[int] = typer.Option(None, help="Give up after this long (the daemon answers 504); a "
                                              "goal's search ends within it (default 10 s for the search)."),
    feasibility: str = typer.Option("enforce", help=FEASIBILITY_HELP),
    state: Optional[str] = typer.Option(None, metavar="JSON", help="A change to the home's state for this plan "
                                        "only, as JSON: '{\"robot_at\": \"kitchen\"}' (the keys `orin-llm state "
                                        "show` prints)."),
) -> None:
    """Ask for a plan: through the daemon's socket, or in-process with --engine. With --goal it says
    whether the plan reaches the goal, and which facts it leaves false."""
    from .server.cli import feasibility_options

    plan_opts = feasibility_options(goal, feasibility, state)
    if deadline_ms is not None and deadline_ms < 1:
        raise OrinError(f"--deadline-ms must be at least 1, got {deadline_ms}")
    if engine is None:
        if environment is not None:
            raise OrinError(f"--environment applies in-process (with --engine); the daemon has its own home: "
                            f"replace it with `orin-llm environment push {environment}`")
        from .server.cli import plan_command

        plan_command(task, socket, observation, as_json, stream, max_tokens, temperature, seed, timeout_s,
                     speculation, {**plan_opts, "deadline_ms": deadline_ms})
        return
    from .planning.home import EXAMPLE_HOME_PATH, load_environment
    from .planning.plans import Plan
    from .server.cli import load_planner, summary
    from .server.jobs import feasibility_fields, ms

    env = load_environment(environment or EXAMPLE_HOME_PATH)  # a bad home fails before the engine loads
    planner = load_planner(engine, env)
    prefix = planner.prefix
    params = _params(max_tokens or 128, temperature or 0.0, 1.0, seed, None)
    deadline_s = deadline_ms / 1e3 if deadline_ms is not None else None
    run = planner.start(task, params, observation, speculation, **plan_opts, deadline_s=deadline_s, empty_ok=True)
    if isinstance(run, Plan):  # the goal holds already: nothing was decoded
        res, goal_s = run, run.goal_reading_s
    else:
        for delta in planner.engine.deltas(run.request):
            if stream and not as_json:
                sys.stdout.write(delta)
                sys.stdout.flush()
        res, goal_s = planner.finish(run, prefix), run.goal_s
    out = {"plan": res.text, "steps": [{"action": s.action, "args": list(s.args)} for s in res.steps],
           "environment": env.name, "environment_version": res.environment_version, "engine": planner.engine.name,
           "finish_reason": res.result.finish_reason,
           "timings": {**res.result.timings.as_dict(), "goal_reading_ms": ms(goal_s)},
           "speculation": res.result.speculation.as_dict(),
           **feasibility_fields(res)}
    if as_json:
        typer.echo(json.dumps(out))
        return
    typer.echo("" if stream else res.text)
    typer.echo(summary(out), err=True)


@app.command()
def health(
    socket: Optional[Path] = typer.Option(None, help=SOCKET_HELP),
    wait: float = typer.Option(0.0, help="Wait up to this many seconds for the daemon to be ready (it may "
                               "still be starting: loading the engine, pinning the home)."),
    as_json: bool = typer.Option(False, "--json", help="Print the daemon's /health as JSON."),
) -> None:
    """Is the daemon ready? Its engine, home and queue. Exit 0: ready · 1: not ready · 2: not there."""
    from .server.cli import health_command

    if not health_command(socket, wait, as_json):
        raise typer.Exit(1)


@environment_app.command("show")
def environment_show(
    socket: Optional[Path] = typer.Option(None, help=SOCKET_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print JSON (the shape PUT takes) instead of YAML."),
) -> None:
    """Print the daemon's current home (YAML), and its version on stderr."""
    from .server.cli import environment_show_command

    environment_show_command(socket, as_json)


@environment_app.command("push")
def environment_push(
    file: Path = typer.Argument(..., metavar="FILE", help="The home: a .yaml/.yml, .json, .txt or .md file."),
    socket: Optional[Path] = typer.Option(None, help=SOCKET_HELP),
    if_match: Optional[int] = typer.Option(None, help="Replace it only if the daemon is still at this "
                                           "version (from `environment show`); else nothing changes."),
) -> None:
    """Replace a running daemon's home (checked here first); it pins the new prefix at once."""
    from .server.cli import environment_push_command

    environment_push_command(file, socket, if_match)


@state_app.command("show")
def state_show(
    socket: Optional[Path] = typer.Option(None, help=SOCKET_HELP),
    environment: Optional[str] = typer.Option(None, metavar="NAME", help="A named home (default: the default "
                                              "home)."),
) -> None:
    """Print the home's current state as JSON (what the daemon plans from)."""
    from .server.cli import state_show_command

    state_show_command(socket, environment)


@state_app.command("update")
def state_update(
    update: str = typer.Argument(..., metavar="JSON", help="What changed, as JSON: '{\"robot_at\": \"kitchen\", "
                                 "\"holding\": \"mug\"}'; keys left out stay as they are."),
    socket: Optional[Path] = typer.Option(None, help=SOCKET_HELP),
    environment: Optional[str] = typer.Option(None, metavar="NAME", help="A named home (default: the default "
                                              "home)."),
) -> None:
    """Report what really happened: the home's state changes, the home itself stays cached (only the
    state part of the prompt is computed again)."""
    from .server.cli import state_update_command

    state_update_command(update, socket, environment)


@app.command()
def demo(
    engine: Path = typer.Option(DEFAULT_ENGINE, help="Engine directory (built from the embedded profile if absent)."),
) -> None:
    """The main job end to end: build if needed, start the daemon, ask it for plans, stop it."""
    from .build.pipeline import build_engine
    from .client import PlannerClient
    from .profile import embedded_profile
    from .server.cli import summary
    from .server.process import DaemonProcess

    if not (engine / "manifest.json").is_file():
        typer.echo(f"building the embedded engine into {engine} (once) ...", err=True)
        build_engine(embedded_profile(), engine, force=True)
    typer.echo("starting the planning daemon ...", err=True)
    # tasks shaped like the example home's few-shot examples: what the 135M model plans well
    tasks = ["Bring the mug from the kitchen to the coffee table.",
             "Switch off the floor lamp and tell me when you are done.",
             "Bring the glasses from the bedroom to the sofa."]
    with DaemonProcess(engine) as daemon, PlannerClient(daemon.socket, timeout_s=300) as client:
        health = client.health()
        typer.echo(f"daemon ready on {daemon.socket}: engine {health['engine']}, environment "
                   f"{health['environment']['name']} v{health['environment']['version']} "
                   f"({health['prefix_tokens']} prefix tokens pinned)\n")
        for task in tasks:
            typer.echo(f"task: {task}")
            result: dict = {}
            for event in client.plan_stream(task, max_tokens=96):
                if "delta" in event:
                    sys.stdout.write(event["delta"])
                    sys.stdout.flush()
                result = event
            spec = result.get("speculation", {})
            typer.echo("\n" + summary(result))
            typer.echo(f"-- speculation {spec.get('drafter')}: {spec.get('accepted')}/{spec.get('drafted')} "
                       f"drafts accepted, {spec.get('mean_accepted_length')} tokens per target step\n")


@app.command()
def doctor(
    engine: Optional[Path] = typer.Option(None, help="Also check this engine directory against this device."),
    policy: Optional[Path] = typer.Option(None, help="A policy runner's measurement (JSON): set it against the "
                                          "engine's memory plan."),
    as_json: bool = typer.Option(False, "--json", help="Print the checks as one JSON object."),
) -> None:
    """Check this machine for the planner: JetPack/L4T, TensorRT-LLM, power mode, memory, swap, and the
    measured policy against the plan. Exit 0: ok · 1: warnings (e.g. not a Jetson) · 2: errors."""
    from .doctor import diagnose

    report = diagnose(engine, policy=policy)
    typer.echo(json.dumps(report.as_dict(), indent=2) if as_json else "\n".join(report.lines()))
    raise typer.Exit(report.exit_code)


SCENARIOS = ("prefix", "kv", "speculative", "constrained", "plan_quality", "daemon", "policy", "traffic", "agents",
             "throughput", "restart", "fleet", "kernels")


@app.command()
def bench(
    scenario: str = typer.Option("all", help=f"One of {', '.join(SCENARIOS)}; several separated by commas "
                                 "(one run, side by side); or all."),
    engine: Path = typer.Option(DEFAULT_ENGINE, help="Engine directory."),
    out: Path = typer.Option(Path("bench-out"), help="Directory for JSON, PNG and report.md."),
    quick: bool = typer.Option(False, "--quick", help="A short smoke run."),
    policy: Optional[Path] = typer.Option(None, help="policy scenario: the policy's ONNX file (default: a STAND-IN "
                                          "policy generated into --out)."),
    policy_rate_hz: float = typer.Option(30.0, help="policy scenario: the control rate."),
    llama_python: Optional[str] = typer.Option(None, help="kernels scenario: the python of a venv with "
                                               "llama-cpp-python, for llama.cpp's numbers beside ours (default: "
                                               "$ORIN_LLM_LLAMA_PYTHON; neither: skipped)."),
    splits: str = typer.Option("heldout,hard,paraphrase", help="plan_quality scenario: the task splits, "
                               "comma-separated: heldout (the generator's), hard (a home of its own), paraphrase "
                               "(everyday wording, never tuned on)."),
) -> None:
    """Measure TTFT with the pinned prefix, INT8 KV, speculative decoding, the daemon, and the policy next
    door (the planner and a policy at its control rate side by side) on a torch or TensorRT-LLM engine,
    while sampling memory and power by phase (tegrastats on a Jetson); JSON, plots and report.md."""
    from .bench import run_scenarios

    chosen = SCENARIOS if scenario == "all" else tuple(s.strip() for s in scenario.split(","))
    unknown = [s for s in chosen if s not in SCENARIOS]
    if unknown:
        raise OrinError(f"unknown scenario {unknown[0]!r}; choose from {', '.join(SCENARIOS)} or all")
    from .bench.plan_quality import SPLITS

    picked = tuple(x.strip() for x in splits.split(",") if x.strip())
    if not picked or any(x not in SPLITS for x in picked):
        raise OrinError(f"--splits {splits!r}: choose among {', '.join(SPLITS)}")
    report = run_scenarios(chosen, engine, out, quick, policy, policy_rate_hz, llama_python, picked)
    typer.echo(str(report))


def main() -> None:
    try:
        app()
    except OrinError as e:
        typer.echo(f"error: {e}", err=True)
        raise SystemExit(2) from None
    except KeyboardInterrupt:
        raise SystemExit(130) from None


if __name__ == "__main__":
    main()
