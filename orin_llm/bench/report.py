"""One Markdown report from whatever scenario JSONs a run wrote, set against published anchors
for the Orin. On other machines the anchors are shown for scale only: different hardware."""

from __future__ import annotations

import json
from pathlib import Path

# Published Jetson AGX Orin 64 GB numbers (decode tokens/s, batch 1).
ANCHORS = [
    ("MLC LLM, Llama 3.2 3B, INT4", 80.4),
    ("TensorRT-LLM 0.12-jetson, Llama 3 8B, INT4", 35.9),
]
ORIN_BANDWIDTH = 204.8e9  # bytes/s, LPDDR5: decode cannot beat bandwidth / weight bytes per token


def _load(out: Path, name: str):
    p = out / f"{name}.json"
    return json.loads(p.read_text()) if p.is_file() else None


def write_report(out: Path, manifest=None) -> Path:
    lines = ["# orin-llm benchmark report", ""]
    anything = next((d for n in ("prefix", "speculative", "constrained", "kv", "daemon", "policy", "traffic", "agents",
                                 "throughput", "restart", "kernels")
                     if (d := _load(out, n))), None)
    if anything:
        m = anything["machine"]
        lines += [f"Machine: {m.get('gpu', 'CPU')} · {m['platform']} · torch {m['torch']} · "
                  f"{m['cpu_count']} cores · backend {anything.get('backend', 'torch')} · "
                  f"command `{anything['command']}`", ""]
    on_orin = bool(manifest is not None and manifest.backend == "trtllm")
    lines += ["## Anchors (Jetson AGX Orin 64 GB, published)", "", "| what | decode tok/s |", "|---|---|"]
    lines += [f"| {name} | {tps} |" for name, tps in ANCHORS]
    if manifest is not None and (wb := ((manifest.memory_plan or {}).get("target") or {}).get("weights_bytes")):
        lines.append(f"| bandwidth bound for this target ({wb / 1e9:.2f} GB of weights) | "
                     f"{ORIN_BANDWIDTH / wb:.1f} |")
    if not on_orin:
        lines += ["", "_This run is not on an Orin with TensorRT-LLM engines: the anchors are for scale only._"]
    if (d := _load(out, "prefix")):
        lines += ["", "## Pinned environment prefix (TTFT)", "",
                  "| prefix tokens | cached tokens | cold ms | warm ms | task alone ms | cold/warm | warm/alone |",
                  "|---|---|---|---|---|---|---|"]
        lines += [f"| {r['prefix_tokens']} | {r.get('cached_prompt_tokens', 'n/a')} | {r['ttft_cold_ms']:.0f} | "
                  f"{r['ttft_warm_ms']:.1f} | {r['ttft_task_alone_ms']:.1f} | {r['cold_over_warm']:.1f}× | "
                  f"{r['warm_over_task_alone']:.2f} |" for r in d["rows"]]
        if any("requests" in r for r in d["rows"]):
            kv = d["kv"]
            lines += ["", f"TensorRT-LLM, block reuse {'on' if kv['block_reuse'] else 'off'}, "
                          f"{kv['tokens_per_block']} tokens per block. Prompt tokens that blocks stored by earlier "
                          "requests could hold (upper bound), warm / cold / task alone: "
                      + "; ".join(f"prefix {r['prefix_tokens']}: " + " / ".join(
                          f"{r['requests'][k]['reusable_tokens']} of {r['requests'][k]['prompt_tokens']}"
                          for k in ("warm", "cold", "task_alone")) for r in d["rows"])]
    if (d := _load(out, "constrained")):
        share, speed = d["executable_share"], d["decode_tokens_per_s"]
        lines += ["", f"## Constrained plans ({d['tasks']} held-out tasks)", "",
                  "| | unconstrained | constrained |", "|---|---|---|",
                  f"| plans whose every line executes | {share['unconstrained']:.0%} | {share['constrained']:.0%} |",
                  f"| decode tok/s (plain) | {speed['unconstrained']:.1f} | {speed['constrained']:.1f} |"]
        lines += [f"| acceptance, {m} | {d['acceptance_rate'].get('unconstrained/' + m, 0):.2f} | "
                  f"{d['acceptance_rate'].get('constrained/' + m, 0):.2f} |"
                  for m in ("lookup", "draft_model", "combined") if f"constrained/{m}" in d["acceptance_rate"]]
        lines += ["", f"Constrained / unconstrained decode: {d['constrained_over_unconstrained_decode']:.2f}× "
                      f"({d['forced_share']:.0%} of constrained tokens forced by the grammar, no model step). "
                      f"Unconstrained plans wrote {d['unexecutable_lines_unconstrained']} lines the home cannot "
                      f"execute. Streamed: first step at {d['time_to_first_step_ms']:.0f} ms, whole plan at "
                      f"{d['time_to_whole_plan_ms']:.0f} ms (medians). Greedy output identical with every drafter: "
                      f"{all(d['identical_greedy'].values())}."]
    if (d := _load(out, "speculative")):
        lines += ["", "## Speculative decoding (held-out planning tasks)", "",
                  "| mode | decode tok/s | vs plain (same mode) | vs fastest plain | acceptance | mean accepted length "
                  "| same as plain |", "|---|---|---|---|---|---|---|"]
        lines += [f"| {k} | {r['decode_tokens_per_s']:.1f} | {r['speedup_vs_plain']:.2f}× | "
                  f"{r['speedup_vs_fast_plain']:.2f}× | {r['acceptance_rate']:.2f} | {r['mean_accepted_length']:.2f} | "
                  f"{r['identical_to_plain']} |" for k, r in d["results"].items()]
        if d.get("exact_mode"):
            lines += ["", f"Exact mode: {d['exact_mode']}."]
        if (c := d.get("draft")):
            lines += ["", f"Draft ({c['draft_weights']}): {c['draft_ms_per_token']:.2f} ms/token vs target "
                          f"{c['target_ms_per_token']:.2f} ms/token ({c['draft_over_target_time']:.2f}×)."]
    if (d := _load(out, "kv")) and "agreement" in d:  # a TensorRT-LLM engine: its one compiled KV dtype
        plan, bpt = d["memory_plan"], d["kv_bytes_per_token"]
        speeds = [v for vs in d["decode_tokens_per_s"].values() for v in vs]
        lines += ["", f"## KV cache of the TensorRT-LLM engine ({d['kv_cache_dtype']})", "",
                  f"KV bytes/token: int8 {bpt['int8']:,}, fp16 {bpt['fp16']:,} (fp16 / this engine's: "
                  f"{d['fp16_over_kv_cache_bytes']:.1f}×); memory plan: {plan['max_kv_tokens']} tokens, "
                  f"{(plan['kv_bytes'] or 0) / 2**30:.2f} GiB; decode {max(speeds):.1f} tok/s (best of {len(speeds)}, "
                  f"{d['decode_tokens']} tokens).", "",
                  f"Greedy agreement with full precision is not measured on this engine: {d['agreement']['reason']}. "
                  f"See {d['agreement']['see']}."]
    elif d:
        ph, pt = d["per_head_scales"], d["per_tensor_scales"]
        lines += ["", "## INT8 KV cache vs full precision (held-out split, teacher forced)", "",
                  "| scales | argmax agreement | mean abs Δ logprob |", "|---|---|---|",
                  f"| per layer, per KV head | {ph['argmax_agreement']:.4f} | {ph['mean_abs_dlogprob']:.4f} |",
                  f"| per layer (per tensor) | {pt['argmax_agreement']:.4f} | {pt['mean_abs_dlogprob']:.4f} |", "",
                  f"KV bytes/token: {d['kv_bytes_per_token']}; decode speed int8/fp32: "
                  f"{d['int8_over_fp32_decode']:.2f}×"]
    if (d := _load(out, "daemon")):
        s = d["sequential"]
        lines += ["", "## Daemon (Unix socket + HTTP)", "",
                  f"Overhead per request: median {s['overhead_ms_median']:.2f} ms, p99 {s['overhead_ms_p99']:.2f} ms "
                  f"(client latency − the daemon's own total_ms, {s['requests']} requests).", "",
                  "| clients | median ms | p99 ms | req/s | errors |", "|---|---|---|---|---|"]
        lines += [f"| {r['clients']} | {r['latency_ms_median']:.0f} | {r['latency_ms_p99']:.0f} | "
                  f"{r['requests_per_s']:.1f} | {r['errors']} |" for r in d["concurrency"]]
        lines += ["", f"Daemon RSS over the soak (KiB): {d['rss_kib'][0]} → {d['rss_kib'][-1]} "
                      f"(growth after warm-up {d['rss_growth_kib']} KiB)"]
    if (d := _load(out, "policy")):
        lines += policy_section(d)
    for name, section in (("traffic", traffic_section), ("agents", agents_section),
                          ("throughput", throughput_section), ("restart", restart_section),
                          ("kernels", kernels_section)):
        if (d := _load(out, name)):
            lines += section(d)
    if (d := _load(out, "samples")):
        lines += ["", f"## Memory and power by phase (source: {d['source']})", "",
                  "| phase | samples | peak memory used GiB | mean power W |", "|---|---|---|---|"]
        for name, p in d["phases"].items():
            power = f"{p['mean_power_mw'] / 1e3:.1f}" if p["mean_power_mw"] is not None else "n/a (no power sensor)"
            lines.append(f"| {name} | {p['samples']} | {p['peak_mem_used_bytes'] / 2**30:.2f} | {power} |")
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def policy_section(d: dict) -> list[str]:
    """The co-run: the policy's ticks alone and next to planning, the planner's cost, memory plan vs measured."""
    label = "STAND-IN policy (random weights: honest for time and memory, not for behaviour)" if d["stand_in"] \
        else "policy"
    ph, pl = d["phases"], d["planner"]
    lines = ["", "## The policy next door", "",
             f"{label} `{d['policy_onnx']}` at {d['rate_hz']:g} Hz ({ph['policy_alone']['backend']} on "
             f"{ph['policy_alone']['device']}); planning requests back to back ({d['request']}).", "",
             "| phase | ticks | tick p50 ms | tick p99 ms | tick max ms | missed deadlines |",
             "|---|---|---|---|---|---|"]
    for key, name in (("policy_alone", "policy alone"), ("together_unprotected", "with planning, daemon as before"),
                      ("together", "with planning, protective defaults")):
        p = ph[key]
        lines.append(f"| {name} | {p['ticks']} | {p['tick_p50_ms']:.2f} | {p['tick_p99_ms']:.2f} | "
                     f"{p['tick_max_ms']:.2f} | {p['missed_deadlines']} |")
    lines += ["", "| planner | requests | TTFT ms | decode tok/s | TTFT × alone | decode × alone |",
              "|---|---|---|---|---|---|"]
    for key, ratio, name in (("alone", None, "alone, daemon as before"),
                             ("together_unprotected", "together_unprotected_over_alone", "with the policy, as before"),
                             ("alone_protected", "alone_protected_over_alone", "alone, protective defaults"),
                             ("together", "together_over_alone", "with the policy, protective defaults")):
        p = pl[key]
        r = pl[ratio] if ratio else {"ttft_over_alone": 1.0, "decode_over_alone": 1.0}
        lines.append(f"| {name} | {p['requests']} | {p['ttft_ms_median']:.0f} | "
                     f"{p['decode_tokens_per_s_median']:.1f} | {r['ttft_over_alone']:.2f} | "
                     f"{r['decode_over_alone']:.2f} |")
    if d.get("ablation"):
        lines += ["", "Each protective setting alone (same run):", "",
                  "| daemon | policy | missed deadlines | tick p99 ms | planner TTFT × alone | decode × alone |",
                  "|---|---|---|---|---|---|"]
        for a in d["ablation"]:
            r = a["together_over_alone"]
            lines.append(f"| {' '.join(a['daemon_args']) or '(defaults)'} | {' '.join(a['policy_args']) or '-'} | "
                         f"{a['policy']['missed_deadlines']} of {a['policy']['ticks']} | "
                         f"{a['policy']['tick_p99_ms']:.2f} | {r['ttft_over_alone']:.2f} | "
                         f"{r['decode_over_alone']:.2f} |")
    m = d["memory"]
    planned = m["policy_planned_bytes"]
    measured = m["policy_measured"]["total_bytes"]
    lines += ["", f"Memory: policy planned {(planned or 0) / 2**20:.0f} MiB ({m['policy_planned_source']}), measured "
                  f"{measured / 2**20:.0f} MiB ({m['policy_measured']['backend']}: peak RSS"
                  + (" + device" if m["policy_measured"]["device_bytes"] else "") + "); planner planned "
                  f"{(m['planner_planned_bytes'] or 0) / 2**20:.0f} MiB (weights, KV, workspace), measured peak RSS "
                  f"{m['planner_measured_rss_peak_bytes'] / 2**20:.0f} MiB.", "", "![policy](policy.png)"]
    return lines


def _goal(met: bool) -> str:
    return "met" if met else "**missed**"


def traffic_section(d: dict) -> list[str]:
    """Interleaved plans and chats through the daemon: TTFT ratios and what each kind of request took from the cache."""
    names = {"task_alone": "task alone (chat, no home)", "warm_plan": "warm plan (constrained, the default)",
             "warm_plan_unconstrained": "warm plan (`constrained: false`)",
             "chat_other": f"chat, another system prompt ({d['chat_tokens']} tokens)",
             "cold": "cold (the home computed in the request)"}
    r, g = d["ratios"], d["goals"]
    lines = ["", f"## Interleaved traffic through the daemon (home of {d['prefix_tokens']} tokens)", "",
             f"{d['rounds']} rounds of alternating blocks; medians of the client's wall time for the answer (1 token "
             "unless said) and the daemon's own `ttft_ms`; tokens as the daemon reported them.", "",
             "| request | n | client ms | daemon ttft ms | prompt tokens | cached | computed |",
             "|---|---|---|---|---|---|---|"]
    for k, name in names.items():
        s = d["kinds"][k]
        lo, hi = s["cached_prompt_tokens_min"], s["cached_prompt_tokens_max"]
        cached = f"{lo}" if lo == hi else f"{lo}–{hi}"
        lines.append(f"| {name} | {s['requests']} | {s['client_ms_median']:.1f} | {s['ttft_ms_median']:.1f} | "
                     f"{s['prompt_tokens_median']:.0f} | {cached} | {s['computed_prompt_tokens_median']:.0f} |")
    warm, cold = r["warm_over_task_alone"], r["cold_over_warm"]
    lines += ["", f"Warm plan / task alone: **{warm:.2f}** (goal ≤ {g['warm_over_task_alone_max']}: "
                  f"{_goal(warm <= g['warm_over_task_alone_max'])}; unconstrained "
                  f"{r['warm_unconstrained_over_task_alone']:.2f}). Cold / warm: **{cold:.1f}×** (goal ≥ "
                  f"{g['cold_over_warm_min']:.0f}×: {_goal(cold >= g['cold_over_warm_min'])}). Warm plans "
                  f"that computed the home again: {d['home_recomputed']}; KV blocks evicted: "
                  f"{d['metrics'].get('orin_llm_kv_pool_evictions', 'n/a'):.0f}.", "", "![traffic](traffic.png)"]
    return lines


def agents_section(d: dict) -> list[str]:
    """The agent loop with and without `conversation`: prompt, cached and computed tokens per turn."""
    pt, s = d["per_turn"], d["summary"]
    lines = ["", f"## A {d['turns']}-turn agent loop through the daemon ({d['home']}, home of "
                 f"{d['prefix_tokens']} tokens)", "",
             f"Medians of {d['repeats']} loops per client; tokens as the daemon reported them; TTFT: the daemon's "
             "`ttft_ms`.", "",
             "| turn | conversation: prompt | cached | computed | TTFT ms "
             "| re-sent: prompt | cached | computed | TTFT ms |", "|---|---|---|---|---|---|---|---|---|"]
    for i, (a, b) in enumerate(zip(pt["conversation"], pt["resent"], strict=True), 1):
        cells = [f"{t[k]:.0f}" for t in (a, b)
                 for k in ("prompt_tokens", "cached_prompt_tokens", "computed_prompt_tokens", "ttft_ms")]
        lines.append(f"| {i} | " + " | ".join(cells) + " |")
    c, r = s["conversation"], s["resent"]
    lines += ["", f"Computed per turn after the first: at most {c['computed_after_turn1_max']} with `conversation`, "
                  f"{r['computed_after_turn1_max']} re-sent, while the prompt grew {c['prompt_tokens_turn1']} → "
                  f"{c['prompt_tokens_last']} ({r['prompt_tokens_turn1']} → {r['prompt_tokens_last']}). Over the "
                  f"loop: {c['computed_total']} / {r['computed_total']} tokens computed; a runtime that caches only "
                  f"the pinned home would compute {c['after_home_total']} / {r['after_home_total']}.", "",
              "![agents](agents.png)"]
    return lines


def throughput_section(d: dict) -> list[str]:
    """Requests/s and latency by concurrent clients, for each daemon configuration and request shape."""
    lines = ["", "## Throughput by concurrent clients (through the daemon)", "",
             "Requests: " + "; ".join(f"`{k}` {v['max_tokens']} tokens at most ({d['requests_per_level'][k]} "
                                      "requests a level)" for k, v in d["shapes"].items())
             + f"; each level measured in {d['passes']} passes (1→8, then 8→1), pooled. Daemons: "
             + "; ".join(f"`{k}` {' '.join(c['daemon_args'])} (batch ≤ {c['scheduler'].get('max_running', '?')})"
                         for k, c in d["configs"].items()) + ".", "",
             "| daemon | request | clients | req/s | p50 ms | p99 ms | errors |", "|---|---|---|---|---|---|---|"]
    for name, shapes in d["results"].items():
        for shape, rows in shapes.items():
            lines += [f"| {name} | {shape} | {r['clients']} | {r['requests_per_s']:.2f} | {r['latency_ms_p50']:.0f} | "
                      f"{r['latency_ms_p99']:.0f} | {r['errors']} |" for r in rows]
    goal, n = d["goal_4_over_1"], d["speedup_clients"]
    verdict = lambda v: f" ({_goal(v >= goal)})" if n == 4 else ""  # noqa: E731  the goal is at 4 clients
    lines += ["", f"Requests/s at {n} clients over 1 (goal at 4 clients: ≥ {goal:.0f}×): " + "; ".join(
        f"{name} " + ", ".join(f"{shape} {v:.2f}×{verdict(v)}" for shape, v in sp.items())
        for name, sp in d["speedup_over_one_client"].items()) + ".", "", "![throughput](throughput.png)"]
    return lines


def restart_section(d: dict) -> list[str]:
    """Lookup acceptance after a restart, with and without the persisted history."""
    saved = "; ".join(f"`{h['key']}`: {h['outputs']} plans, {h['tokens']} tokens" for h in d["history_saved"]) or "none"
    lines = ["", f"## Lookup acceptance on the first {d['measured_requests']} requests after a restart", "",
             f"Home {d['home']} (held-out tasks); {d['warmup_requests']} warm-up plans before the restart; history "
             f"saved: {saved}.", "",
             "| daemon | acceptance | drafted | accepted | tokens per target step (median) | decode tok/s (median) |",
             "|---|---|---|---|---|---|"]
    for name, label in (("restarted", "restarted on its state directory"), ("fresh", "fresh state directory")):
        s = d["summary"][name]
        lines.append(f"| {label} | {s['acceptance_rate']:.3f} | {s['drafted']} | {s['accepted']} | "
                     f"{s['mean_accepted_length_median']:.2f} | {s['decode_tokens_per_s_median']:.1f} |")
    lines += ["", f"Greedy plans identical in both: {d['identical_plans']}.", "", "![restart](restart.png)"]
    return lines


def kernels_section(d: dict) -> list[str]:
    """Each kernel family against the float reference on the calibration answers, llama.cpp beside them."""
    lines = ["", f"## Kernel families against the float reference ({d['positions']} positions, {d['items']} calib "
                 "answers)", "",
             f"Reference (float32 weights and KV): perplexity {d['reference']['perplexity']:.4f}, answer "
             f"{d['reference']['answer']!r}.", "",
             "| kernels | q8 / attention | KV | top-1 agreement | mean \\|Δlogprob\\| | max \\|Δlogit\\| | "
             "perplexity | France answer |", "|---|---|---|---|---|---|---|---|"]
    for label, f in d["families"].items():
        if "skipped" in f or "error" in f:
            lines.append(f"| {label} | {f.get('skipped') or f['error'][-120:]} | | | | | | |")
            continue
        kernels = f"{f['kernels'].get('q8', '?')} / {f['kernels'].get('attention', '?')}"
        for cache in ("fp32_kv", "int8_kv"):
            if (t := f.get(cache)):
                lines.append(f"| {label} | {kernels} | {cache.split('_')[0]} | {t['argmax_agreement']:.4f} | "
                             f"{t['mean_abs_dlogprob']:.4f} | {t['max_abs_dlogit']:.2f} | {t['perplexity']:.4f} | "
                             f"{f['question'][cache]['answer']!r} |")
    llama = d["llama_cpp"]
    if "skipped" in llama:
        lines += ["", f"llama.cpp: skipped ({llama['skipped']})."]
    else:
        t = llama["teacher_forced"]
        lines.append(f"| llama.cpp {llama['llama_cpp']} (its own f16 KV) | | f16 | {t['argmax_agreement']:.4f} | "
                     f"{t['mean_abs_dlogprob']:.4f} | | {t['perplexity']:.4f} | {llama['question']['answer']!r} |")
    return lines
