"""The results page's goal rows for each scenario run on a CPU (results_page.py): each reads the JSON
its scenario wrote, and holds the goal, our figure and its anchor's."""

from __future__ import annotations

import re

from .results_format import Row, _pct, duration, ms, ratio


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


def plan_quality_rows(d: dict) -> list[Row]:
    """`enforce` (and `enforce+goal`) against the grammar alone, per split, with the issue's goals."""
    rows = []
    for split, label in (("heldout", "held-out homes"), ("paraphrase", "paraphrase split (never tuned on)"),
                         ("hard", "hard home")):
        s = d["summary"].get(split)
        if not s or "enforce" not in s:
            continue
        e, g, goal = s["enforce"], s["grammar"], s["enforce+goal"]
        # a request with only a task reads its goal first (enforce+inferred); before that default, enforce
        plain_mode = "enforce+inferred" if "enforce+inferred" in s else "enforce"
        p = s[plain_mode]
        if split == "paraphrase":  # issue 43's goal: the plain request (a task, no goal) reaches it
            rows.append(Row(f"{label}: goal reached by the plain request (no goal sent), `{plain_mode}`", "≥ 70 %",
                            _pct(p["goal_success"]), _pct(g["goal_success"]), p["goal_success"] >= 0.7))
        # from the task text alone: the goal inferred by the model where the run has that mode, else enforce
        text_mode = "enforce+inferred" if "enforce+inferred" in s else "enforce"
        t = s[text_mode]
        rows += [
            Row(f"{label}: executable plans (no loop, ended by themselves), the plain request, `{plain_mode}`",
                "100 %", _pct(p["executability"]), _pct(g["executability"]), p["executability"] == 1),
            Row(f"{label}: goal reached from the task text, `{text_mode}`", "≥ 60 %" if split == "heldout" else "—",
                _pct(t["goal_success"]), _pct(g["goal_success"]),
                t["goal_success"] >= 0.6 if split == "heldout" else None),
            Row(f"{label}: goal reached with the goal given", "100 %", _pct(goal["goal_success"]),
                _pct(g["goal_success"]), goal["goal_success"] == 1),
            Row(f"{label}: time to plan, median, `enforce` (with the goal)", "—",
                f"{ms(e['plan_s_median'] * 1e3)} ({ms(goal['plan_s_median'] * 1e3)})", ms(g["plan_s_median"] * 1e3)),
        ]
        if t.get("inferred_goal_errors"):  # where a small model ends: what its reading got wrong
            errs = t["inferred_goal_errors"]
            kinds = ("wrong_kind", "wrong_thing", "missing", "extra")
            rows.append(Row(f"{label}: the goal read, facts wrong by kind (wrong kind / wrong thing / missing / "
                            f"extra), `{text_mode}`", "—", " / ".join(str(errs.get(k, 0)) for k in kinds), "—"))
        if "inferred_goal_covers" in t:
            rows.append(Row(f"{label}: goal read from the task text holds the reference's facts (exactly them), "
                            f"`{text_mode}`", "—",
                            f"{_pct(t['inferred_goal_covers'])} ({_pct(t['inferred_goal_exact'])})", "—"))
        elif "inferred_goal_exact" in t:
            rows.append(Row(f"{label}: goal read from the task text = the reference's, `{text_mode}`", "—",
                            _pct(t["inferred_goal_exact"]), "—"))
        if e.get("narrowing_share_of_step") is not None:
            share = e["narrowing_share_of_step"]
            rows.append(Row(f"{label}: the state's narrowing, per mask / a decode step's model time, `enforce`",
                            "≤ 5 %", f"{share:.1%} ({e['narrowing_ms_per_mask']:.2f} ms / "
                            f"{e['decode_step_ms']:.1f} ms)", "a decode step", share <= 0.05))
        if e.get("narrowing_share_of_decode") is not None:
            whole = e["narrowing_share_of_decode"]
            rows.append(Row(f"{label}: the state's narrowing, all of it / all the decode time, `enforce`",
                            "≤ 5 %", f"{whole:.1%}", "the decode time", whole <= 0.05))
    return rows


def plan_quality_modes(d: dict) -> list[str]:
    """Every mode's figures, a table per split."""
    lines = []
    for split, label in (("heldout", "Held-out homes"),
                         ("paraphrase", "The paraphrase split (everyday wording, new homes)"),
                         ("hard", "The hard home (own action names, no examples)")):
        s = d["summary"].get(split)
        if not s:
            continue
        tuned = d.get("tuned_on", {}).get(split)
        lines += [f"{label}, {s['tasks']} tasks{f' ({tuned})' if tuned else ''}:", "",
                  "| mode | executable | goal reached | goal-condition recall | length / reference (reached) "
                  "| time to plan, median | errors (unknown / affordance / precondition / loop / cut) |",
                  "|---|---|---|---|---|---|---|"]
        for mode in d["modes"]:
            m = s[mode]
            ratio = m["length_ratio_successful"]
            kinds = m["violation_kinds"]
            errors = " / ".join(str(kinds.get(k, 0)) for k in ("unknown", "affordance", "precondition", "loop", "cut"))
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
