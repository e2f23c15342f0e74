"""A 5-turn agent loop through the daemon (issue #15): task → plan → act → observation → replan. Each
turn adds an observation and the previous plan. Per turn: the prompt tokens, the tokens served from the
cache and the tokens computed, as the daemon answered them, and the engine's TTFT.

Two clients of the same loop, alternated (each loop with a task of its own number, so that neither
finds the other's turns cached):

- `conversation`: POST /v1/plan with a conversation id; each request sends only the new observation.
  The daemon keeps the turns (its plans included) and builds the next turn's ids from the last turn's,
  so only the new turn is computed while the prompt grows.
- `resent`: no conversation; each request re-sends every earlier observation and plan as
  observations. The KV cache still holds the last turn's prompt, so what it shares with this one (the
  task and the observations up to the last) is not computed again either; the previous plan, which
  the last turn generated but this one sends as text, is.

For scale, each loop also reports what a runtime that caches only the pinned home (the one before the
paged KV cache) would have computed: every prompt token after the home, each turn.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from ..client import PlannerClient
from ..server.process import DaemonProcess
from .common import progress, pyplot, timed_ms, write_json

TASK = "Bring the mug from the kitchen to the sofa."
OBSERVATIONS = ["the robot is in the hallway", "the mug is not on the counter", "the mug is in the sink",
                "the robot holds the mug", "a blanket lies on the sofa"]
PLAN = {"max_tokens": 64, "temperature": 0.0, "speculation": "none"}
FIELDS = ("prompt_tokens", "cached_prompt_tokens", "computed_prompt_tokens", "completion_tokens", "ttft_ms")


def _loop(c: PlannerClient, task: str, conversation: str | None) -> list[dict]:
    turns: list[dict] = []
    sent: list[str] = []  # what the resent client has told the daemon so far
    for obs in OBSERVATIONS:
        if conversation is not None:
            ms, answer = timed_ms(lambda o=obs: c.plan(task, [o], conversation=conversation, **PLAN))
        else:
            ms, answer = timed_ms(lambda o=[*sent, obs]: c.plan(task, o, **PLAN))
            plan = "; ".join(answer["plan"].splitlines()) or "(empty)"
            sent += [obs, f"previous plan: {plan}"]
        turns.append({"client_ms": ms, **{k: answer["timings"][k] for k in FIELDS}})
    return turns


def run(engine_dir: Path, out: Path, quick: bool = False) -> dict:
    repeats = 1 if quick else 3
    loops: dict[str, list[list[dict]]] = {"conversation": [], "resent": []}
    with DaemonProcess(engine_dir, extra=("--state-dir", "none")) as daemon, \
            PlannerClient(daemon.socket, timeout_s=600) as c:
        health = c.health()
        c.plan("Say hello.", **PLAN)  # untimed: the first plan of the process sets up its kernels
        for r in range(repeats):
            for mode in loops:
                task = f"Loop {r}-{mode}: {TASK}"  # new to the cache (module doc)
                loops[mode].append(_loop(c, task, f"agents-{r}" if mode == "conversation" else None))
                t = loops[mode][-1]
                progress(f"agents: {mode}: prompt {' → '.join(str(x['prompt_tokens']) for x in t)} tokens, computed "
                         f"{', '.join(str(x['computed_prompt_tokens']) for x in t)}")
    per_turn = {mode: [{k: statistics.median(loop[i][k] for loop in runs) for k in (*FIELDS, "client_ms")}
                       for i in range(len(OBSERVATIONS))] for mode, runs in loops.items()}
    summary = {mode: {"prompt_tokens_turn1": turns[0]["prompt_tokens"],
                      "prompt_tokens_last": turns[-1]["prompt_tokens"],
                      "computed_after_turn1_max": max(t["computed_prompt_tokens"] for t in turns[1:]),
                      "computed_after_turn1_mean": statistics.mean(t["computed_prompt_tokens"] for t in turns[1:]),
                      "computed_total": sum(t["computed_prompt_tokens"] for t in turns),
                      # what a runtime that caches only the pinned home (the one before the paged cache) computes
                      "after_home_total": sum(t["prompt_tokens"] - health["prefix_tokens"] for t in turns),
                      "ttft_ms_after_turn1_median": statistics.median(t["ttft_ms"] for t in turns[1:])}
               for mode, turns in per_turn.items()}
    data = {"engine_dir": str(engine_dir), "home": health["environment"]["name"],
            "prefix_tokens": health["prefix_tokens"], "turns": len(OBSERVATIONS), "repeats": repeats,
            "block_size": health["kv_cache"].get("pool", {}).get("block_size", 1),
            "request": PLAN, "daemon_args": ["--state-dir", "none"], "per_turn": per_turn, "summary": summary,
            "loops": loops}
    c, r = summary["conversation"], summary["resent"]
    progress(f"agents: computed per turn after the first: conversation ≤ {c['computed_after_turn1_max']}, resent ≤ "
             f"{r['computed_after_turn1_max']} (prompt {c['prompt_tokens_turn1']} → {c['prompt_tokens_last']} / "
             f"{r['prompt_tokens_last']})")
    write_json(out, "agents", data)
    _plot(data, out / "agents.png")
    return data


def _plot(data: dict, path: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    turns = range(1, data["turns"] + 1)
    for mode, color in (("conversation", "C0"), ("resent", "C1")):
        rows = data["per_turn"][mode]
        ax.plot(turns, [r["prompt_tokens"] for r in rows], "o--", color=color, label=f"{mode}: prompt tokens")
        ax.plot(turns, [r["computed_prompt_tokens"] for r in rows], "s-", color=color,
                label=f"{mode}: computed (prefilled)")
    ax.set_yscale("log")
    ax.set_xticks(list(turns))
    ax.set_xlabel("turn of the agent loop")
    ax.set_ylabel("tokens")
    ax.set_title(f"a {data['turns']}-turn agent loop through the daemon ({data['home']}, "
                 f"{data['prefix_tokens']}-token home)", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
