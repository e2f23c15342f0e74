"""Interleaved traffic through the daemon (issue #15): plans on a ~4k-token home with chat completions
in between that use another system prompt (a speech interface or a scene describer sharing the daemon
with the planner): plan, chat, plan, chat, ...

Measured, as a client sees it (the wall time of a 1-token answer through the socket, and the daemon's
own `ttft_ms` next to it), in alternating blocks so that the ratios compare requests on the same
machine state (a shared 2-core VM drifts by tens of percent within a minute, see prefix.py):

- task alone: a chat with only the task turn (no home): the floor;
- warm plan: POST /v1/plan on the pinned home, right after a chat with another system prompt, as the
  daemon serves it (constrained to the home's grammar) and unconstrained;
- cold: the same conversation with the home computed in the request (a chat whose home has a name of
  its own, so that nothing past the system prompt's first line is cached).

Goals: warm plan / task alone ≤ 1.3×, cold / warm ≥ 20×. The daemon's KV cache keeps every prompt it
ran, so every measured request is new to it: tasks are numbered, and each cold request gets a home of
its own name (prefix.py). Each kind of request reports the prompt tokens it took from the cache
(`cached_prompt_tokens`) and computed, as the daemon answered them.
"""

from __future__ import annotations

import itertools
import shutil
import statistics
import tempfile
from pathlib import Path

from ..client import PlannerClient
from ..planning.calibration_data import home_names, load_home
from ..planning.home import prefix_messages, task_message
from ..server.process import DaemonProcess
from .common import engine_text, home_file, progress, pyplot, scaled_environment, timed_ms, write_json
from .prefix import TASK

ONE = {"max_tokens": 1, "temperature": 0.0}
# Another node of the robot's ROS 2 graph using the same daemon: its own system prompt, its own turns.
OTHER_SYSTEM = ("You are the voice of a home robot. Answer the person in one short, friendly sentence. "
                "Do not plan; another module does that.")
CHAT_TOKENS = 8  # the chats decode a few tokens: their output is cached as well
KINDS = ("task_alone", "warm_plan", "warm_plan_unconstrained", "chat_other", "cold")


def run(engine_dir: Path, out: Path, quick: bool = False) -> dict:
    size = 1024 if quick else 4096
    rounds, per_round, cold_per_round = (2, 2, 1) if quick else (5, 4, 2)
    text = engine_text(engine_dir)
    render = lambda env: text.chat_text(prefix_messages(env), add_generation_prompt=False)  # noqa: E731
    limit = text.manifest.limits["max_input_len"]
    env = scaled_environment([load_home(n) for n in home_names()], text.encode, render, min(size, limit - 64))
    home = home_file(env, Path(tempfile.mkdtemp(prefix="orin-llm-traffic-")))
    env_tokens = len(text.encode(render(env)))
    numbers = itertools.count()
    samples: dict[str, list[dict]] = {k: [] for k in KINDS}

    def task() -> str:  # every request is new to the daemon's cache (module doc)
        return f"Request {next(numbers)}: {TASK}"

    progress(f"traffic: starting the daemon; it prefills the home first ({env_tokens} tokens: seconds for the "
             "embedded model, minutes for a 3B on one core)")
    # a 3B-shaped engine (bench/shaped.py) on the daemon's one core prefills a 4k home in ~3 minutes
    with DaemonProcess(engine_dir, extra=("--environment", str(home), "--state-dir", "none"), ready_s=1800) as daemon, \
            PlannerClient(daemon.socket, timeout_s=600) as c:
        health = c.health()
        prefix_tokens = health["prefix_tokens"]
        # the cache serves whole blocks: a warm plan takes the home's full blocks and computes the rest
        block = health["kv_cache"].get("pool", {}).get("block_size", 1)
        calls = {
            "task_alone": lambda: c.chat([task_message(task())], **ONE),
            "warm_plan": lambda: c.plan(task(), speculation="none", **ONE),
            "warm_plan_unconstrained": lambda: c.plan(task(), speculation="none", constrained=False, **ONE),
            "chat_other": lambda: c.chat([{"role": "system", "content": OTHER_SYSTEM},
                                          {"role": "user", "content": f"Utterance {next(numbers)}: is dinner "
                                                                      "ready yet?"}],
                                         max_tokens=CHAT_TOKENS, temperature=0.0),
            "cold": lambda: c.chat(prefix_messages(env.model_copy(update={"name": f"cold{next(numbers)}_{env.name}"}))
                                   + [task_message(task())], **ONE),
        }

        def measure(kind: str) -> None:
            ms, answer = timed_ms(calls[kind])
            samples[kind].append({"client_ms": ms, **{k: answer["timings"][k] for k in (
                "ttft_ms", "queue_ms", "prompt_tokens", "cached_prompt_tokens", "computed_prompt_tokens")}})

        progress(f"traffic: home of {prefix_tokens} tokens pinned; {rounds} rounds of alternating blocks")
        calls["cold"]()  # untimed: the first long prefill of this process sets up its kernels
        for r in range(rounds):
            calls["task_alone"]()  # each block after one untimed call of its kind (prefix.py _side_by_side)
            for _ in range(per_round):
                measure("task_alone")
            calls["chat_other"](), calls["warm_plan"]()
            for _ in range(per_round):  # plan, chat, plan, chat ...: each plan right after another prompt
                measure("chat_other")
                measure("warm_plan")
                measure("chat_other")
                measure("warm_plan_unconstrained")
            for _ in range(cold_per_round):
                measure("cold")
            progress(f"traffic: round {r + 1}/{rounds}: alone {samples['task_alone'][-1]['client_ms']:.0f} ms, warm "
                     f"{samples['warm_plan'][-1]['client_ms']:.0f} ms, cold {samples['cold'][-1]['client_ms']:.0f} ms")
        metrics = _scrape(c.metrics(), ("orin_llm_kv_pool_evictions", "orin_llm_prefix_hit_tokens",
                                        "orin_llm_kv_pool_blocks_pinned", "orin_llm_preemptions"))
    shutil.rmtree(home.parent, ignore_errors=True)
    kinds = {k: _summary(v) for k, v in samples.items()}
    med = {k: v["client_ms_median"] for k, v in kinds.items()}
    engine_med = {k: v["ttft_ms_median"] for k, v in kinds.items()}
    data = {"engine_dir": str(engine_dir), "home": env.name, "prefix_tokens": prefix_tokens,
            "rounds": rounds, "per_round": per_round, "cold_per_round": cold_per_round, "chat_tokens": CHAT_TOKENS,
            "daemon_args": ["--state-dir", "none"], "kinds": kinds,
            "ratios": {"warm_over_task_alone": med["warm_plan"] / med["task_alone"],
                       "warm_unconstrained_over_task_alone": med["warm_plan_unconstrained"] / med["task_alone"],
                       "cold_over_warm": med["cold"] / med["warm_plan"],
                       "cold_over_warm_unconstrained": med["cold"] / med["warm_plan_unconstrained"]},
            "ratios_engine_ttft": {"warm_over_task_alone": engine_med["warm_plan"] / engine_med["task_alone"],
                                   "cold_over_warm": engine_med["cold"] / engine_med["warm_plan"]},
            "goals": {"warm_over_task_alone_max": 1.3, "cold_over_warm_min": 20.0},
            "block_size": block, "home_recomputed": sum(
                s["cached_prompt_tokens"] < prefix_tokens // block * block
                for s in samples["warm_plan"] + samples["warm_plan_unconstrained"]),
            "metrics": metrics, "samples": samples}
    r = data["ratios"]
    progress(f"traffic: warm / alone {r['warm_over_task_alone']:.2f} (unconstrained "
             f"{r['warm_unconstrained_over_task_alone']:.2f}), cold / warm {r['cold_over_warm']:.1f}×; the home "
             f"computed again in {data['home_recomputed']} warm plans")
    write_json(out, "traffic", data)
    _plot(data, out / "traffic.png")
    return data


def _summary(samples: list[dict]) -> dict:
    def col(k: str) -> list[float]:
        return [s[k] for s in samples]

    return {"requests": len(samples), "client_ms_median": statistics.median(col("client_ms")),
            "client_ms_min": min(col("client_ms")), "client_ms_max": max(col("client_ms")),
            "ttft_ms_median": statistics.median(col("ttft_ms")), "queue_ms_median": statistics.median(col("queue_ms")),
            "prompt_tokens_median": statistics.median(col("prompt_tokens")),
            "cached_prompt_tokens_min": min(col("cached_prompt_tokens")),
            "cached_prompt_tokens_max": max(col("cached_prompt_tokens")),
            "computed_prompt_tokens_median": statistics.median(col("computed_prompt_tokens"))}


def _scrape(text: str, names: tuple[str, ...]) -> dict[str, float]:
    """Unlabelled samples of the daemon's /metrics (Prometheus text)."""
    found = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in names:
            found[name] = float(value)
    return found


def _plot(data: dict, path: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    kinds = [k for k in KINDS if data["kinds"][k]["requests"]]
    for i, k in enumerate(kinds):
        ys = [s["client_ms"] for s in data["samples"][k]]
        ax.plot([i] * len(ys), ys, ".", alpha=0.5, color="gray")
        ax.plot([i], [data["kinds"][k]["client_ms_median"]], "o", color="C0")
    labels = {"task_alone": "task alone", "warm_plan": "warm plan", "warm_plan_unconstrained": "warm plan\n(free text)",
              "chat_other": f"chat, other\nsystem ({data['chat_tokens']} tok)", "cold": "cold\n(home computed)"}
    ax.set_xticks(range(len(kinds)), [labels[k] for k in kinds], fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("client latency of a 1-token answer (ms)")
    r = data["ratios"]
    ax.set_title(f"interleaved traffic, home of {data['prefix_tokens']} tokens: warm/alone "
                 f"{r['warm_over_task_alone']:.2f}, cold/warm {r['cold_over_warm']:.0f}×", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
