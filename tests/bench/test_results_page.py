"""docs/BENCHMARKS.md is generated from the committed run JSON (orin_llm/bench/results_page.py): the
committed page must be what the script writes today, and each table must read the right numbers into
the right cells. The made-up runs below have values chosen so that a swapped column, a wrong key or a
wrong comparison gives another cell or another verdict."""

from __future__ import annotations

import json
import re
import shutil

from orin_llm.bench import results_page as rp

from ..conftest import ROOT


def test_the_committed_page_is_what_the_script_writes():
    committed = (ROOT / rp.PAGE).read_text()
    assert committed == rp.page(ROOT), (
        f"{rp.PAGE} is out of date with docs/bench/: run `python -m orin_llm.bench.results_page` and commit it")
    assert rp.main(["--check"]) == 0


def test_every_file_the_page_names_exists():
    text = (ROOT / rp.PAGE).read_text()
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    paths = re.findall(r"`(docs/[\w./-]+)`", text)
    assert images and paths
    missing = [p for p in images if not (ROOT / "docs" / p).is_file()]
    missing += [p for p in paths if not (ROOT / p).exists()]
    assert not missing, missing


def test_a_changed_figure_changes_the_page_and_fails_the_check(tmp_path):
    (tmp_path / "docs").mkdir()
    shutil.copytree(ROOT / rp.BENCH, tmp_path / rp.BENCH)
    (tmp_path / rp.PAGE).write_text(rp.page(tmp_path))
    assert rp.main(["--root", str(tmp_path), "--check"]) == 0
    peer = tmp_path / rp.BENCH / "q4_1/peer_llamacpp_final.json"
    d = json.loads(peer.read_text())
    d["rows"]["orin-llm q4_1, none"]["decode_tok_s"] = d["rows"]["llama.cpp Q4_1"]["decode_tok_s"] / 2
    peer.write_text(json.dumps(d))
    assert rp.main(["--root", str(tmp_path), "--check"]) == 1
    row = next(line for line in rp.page(tmp_path).splitlines() if line.startswith("| plain decode, tokens/s"))
    assert "(0.50×)" in row and row.endswith("| **no** |")


def peer(plain: float = 200.0, llama: float = 100.0) -> dict:
    def server(decode, ttft, plan):
        return {"decode_tok_s": decode, "ttft_ms": ttft, "plan_at_max_tokens_s": plan, "completion_tokens": 40}

    return {"rows": {"orin-llm q4_1, none": server(plain, 20.0, 0.5),
                     "orin-llm q4_1, lookup": server(2 * plain, 15.0, 0.3),
                     "orin-llm fp32, lookup": server(80.0, 40.0, 0.9),
                     "llama.cpp Q4_1": server(llama, 60.0, 0.6)},
            "memory_mb": {"orin-llm q4_1": 700.0, "orin-llm fp32": 300.0, "llama.cpp Q4_1": 400.0},
            "long_home": {"prefix_tokens": 4000, "orin-llm warm ttft ms": 40.0, "llama.cpp warm ttft ms": 100.0,
                          "orin-llm cold prefill s": 5.6, "llama.cpp cold prefill s": 20.0}}


def test_peer_rows_set_ours_against_llama_cpp():
    decode, plan, memory, ttft, cold = rp.peer_rows(peer())
    assert (decode.ours, decode.anchor, decode.met) == ("200.0 (2.00×)", "100.0", True)
    # the best plan is the fastest of ours, whichever drafter: lookup's 0.3 s, not plain's 0.5 s
    assert "lookup" in plan.what and (plan.ours, plan.anchor, plan.met) == ("0.30 s (0.50×)", "0.60 s", True)
    # the q4_1 daemon's memory, not the fp32 one's: 700 / 400 misses the 1.5× goal
    assert (memory.ours, memory.anchor, memory.met) == ("700 MB (1.75×)", "400 MB", False)
    assert (ttft.ours, ttft.anchor, ttft.met) == ("40.0 ms (0.40×)", "100 ms", True)
    assert (cold.ours, cold.anchor, cold.met) == ("5.6 s", "20 s", None)
    assert rp.peer_rows(peer(plain=90.0))[0].met is False


def traffic(warm=120.0, alone=100.0, cold=1500.0, recomputed=0) -> dict:
    def kind(ms, n=20):
        return {"client_ms_median": ms, "requests": n}

    return {"kinds": {"warm_plan": kind(warm), "warm_plan_unconstrained": kind(warm, 10), "task_alone": kind(alone),
                      "cold": kind(cold, 5)},
            "ratios": {"warm_over_task_alone": warm / alone, "cold_over_warm": cold / warm},
            "goals": {"warm_over_task_alone_max": 1.3, "cold_over_warm_min": 20.0}, "home_recomputed": recomputed}


def test_traffic_rows_judge_each_ratio_against_its_own_goal():
    warm, cold, home = rp.traffic_rows(traffic(), {"warm_over_task_alone": 4.65, "cold_over_warm": 2.4})
    assert (warm.ours, warm.anchor, warm.met) == ("1.20 (120 ms / 100 ms)", "4.65", True)
    assert (cold.ours, cold.anchor, cold.met) == ("12× (1.5 s cold)", "2.4×", False)
    assert (home.ours, home.anchor, home.met) == ("0 of 30", "—", True)
    warm, cold, home = rp.traffic_rows(traffic(warm=140.0, cold=14000.0, recomputed=3), {})
    assert (warm.met, cold.ours, cold.met, home.met) == (False, "100× (14 s cold)", True, False)


def test_agents_rows_call_a_growing_loop_not_flat():
    def loop(computed):
        turns = [{"computed_prompt_tokens": c} for c in computed]
        return turns, {"prompt_tokens_turn1": 600, "prompt_tokens_last": 900, "computed_total": sum(computed),
                       "after_home_total": 1000}

    flat, growing = loop([40, 50, 55, 60, 55]), loop([40, 120, 200, 280, 350])
    d = {"per_turn": {"conversation": flat[0], "resent": growing[0]},
         "summary": {"conversation": flat[1], "resent": growing[1]}}
    conversation, resent = rp.agents_rows(d)
    assert (conversation.ours, conversation.anchor, conversation.met) == (
        "40, 50, 55, 60, 55 (260 in all)", "1000 in all", True)
    assert resent.met is False and "history re-sent" in resent.what


def test_fleet_rows_count_plans_and_their_engine_requests_apart():
    def policy(rate, remote, requests, per_replica):
        return {"engine_hit_rate": rate, "engine_hit_tokens": 100 * rate, "engine_query_tokens": 100.0,
                "ttft_ms_p50": 900.0, "ttft_ms_p99": 2000.0, "client_ms_p50": 1000.0, "client_ms_p99": 2500.0,
                "plans": 8, "served_remote": remote, "engine_requests": requests,
                "requests_per_plan": requests / remote, "requests_per_replica": per_replica, "router_metrics": []}

    local = {"client_ms": 500.0, "served_by": "local"}
    d = {"policies": {"round_robin": policy(0.5, 8, 24, [12.0, 12.0]), "cache_aware": policy(0.75, 7, 28, [28.0, 0.0]),
                      "kv_aware": {"error": "did not start"}},
         "failures": {"local_alone_ms_median": 400.0, "replicas_stalled": [local], "replica_killed": [local],
                      "router_stopped": [{"client_ms": 4500.0, "served_by": "local"}]},
         "failure_deadline_ms": 4000}
    rows = {r.what: r for r in rp.fleet_rows(d)}
    hit = rows["`cache_aware`: engines' prefix-cache hit rate (cached / prompt tokens, both replicas)"]
    assert (hit.ours, hit.anchor, hit.met) == ("75% (75 / 100)", "50%", True)
    served = rows["`cache_aware`: plans served remotely, engine requests (per plan)"]
    assert (served.ours, served.anchor, served.met) == ("7 / 8, 28 (4.0)", "8 / 8, 24 (3.0)", False)
    assert rows["`cache_aware`: engine requests per replica (the engines' own count)"].ours == "28 / 0"
    assert rows["`cache_aware`: the plan's latency at the robot's client, p50 / p99"].ours == "1,000 ms / 2,500 ms"
    assert rows["`kv_aware`: engines' prefix-cache hit rate"].ours == "did not run"
    assert rows["the router stopped: the robot's answer (served by local)"].met is False


def test_throughput_rows_take_the_plans_of_the_default_daemon_against_no_batching():
    def level(clients, rps, p50):
        return {"clients": clients, "requests_per_s": rps, "latency_ms_p50": p50, "latency_ms_p99": 2 * p50}

    d = {"results": {"default": {"plan": [level(1, 2.0, 100), level(4, 4.4, 300)], "short": [level(1, 9.0, 10)]},
                     "serial": {"plan": [level(1, 2.0, 100), level(4, 2.2, 900)]}},
         "speedup_over_one_client": {"default": {"plan": 2.2, "short": 1.1}, "serial": {"plan": 1.1, "short": 1.0}},
         "speedup_clients": 4, "goal_4_over_1": 2.0}
    ratio, rates, latency = rp.throughput_rows(d)
    assert (ratio.ours, ratio.anchor, ratio.met) == ("2.20×", "1.10×", True)
    assert (rates.ours, rates.anchor) == ("2.00 · 4.40", "2.00 · 2.20")
    assert (latency.ours, latency.anchor) == ("300 / 600 ms", "900 / 1,800 ms")
    d["speedup_over_one_client"]["default"]["plan"] = 1.9
    assert rp.throughput_rows(d)[0].met is False


def test_a_run_prefers_what_its_json_recorded_over_runs_json():
    recorded = rp.Run("x.json", {"utc": "2026-12-01T10:00:00Z", "machine": {"cpu": "Cortex-A78AE", "cpu_count": 12,
                                                                           "commit": "abc1234", "python": "3.10.12"}},
                      {"commit": "0000000"}, {})
    assert recorded.commit == "abc1234" and recorded.machine == "Cortex-A78AE, 12 cores"
    line = recorded.line().replace("\n", " ")
    assert line.startswith("Ran 2026-12-01 10:00 UTC at `abc1234`") and "`docs/bench/x.json`" in line
    older = rp.Run("y.json", {"machine": {}}, {"commit": "1234567", "machine": "vm-a"}, {"vm-a": "a VM"})
    assert (older.commit, older.machine) == ("1234567", "`vm-a`")


def test_first_run_rows_say_what_is_not_measured_yet():
    d = {"rows": [{"what": "make test", "goal_max_s": 480, "seconds": 184, "utc": "2026-11-26", "commit": "abc1234",
                   "machine": "vm-a"},
                  {"what": "make demo", "goal_max_s": None, "seconds": None},
                  {"what": "ready", "goal_max_s": 30, "seconds": 45.0}]}
    timed, untimed, slow = rp.first_run_rows(d)
    assert (timed.goal, timed.ours, timed.met) == ("≤ 8 min", "3 min 04 s", True)
    assert timed.anchor == "2026-11-26, at abc1234, vm-a"
    assert (untimed.ours, untimed.met) == ("not measured yet", None)
    assert (slow.ours, slow.met) == ("45 s", False)


def test_a_new_run_records_the_commit_and_the_cpu_the_page_names(monkeypatch):
    import subprocess

    from orin_llm.bench import common

    m = common.machine()
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert m["cpu"] and head.startswith(m["commit"].removesuffix("-dirty")) and len(m["commit"]) >= 7
    assert rp.Run("x.json", {"machine": m}, {}, {}).commit == m["commit"]

    def no_git(*args, **kwargs):
        raise FileNotFoundError("git")

    monkeypatch.setattr(common.subprocess, "run", no_git)  # an installed wheel on a machine without git
    assert common.checkout_commit() is None


def test_gpu_rows_read_a_grouped_run_and_the_side_by_side_decodes():
    """gpu.json as the GPU check writes it now (the int4 kernels forced beside the per-shape choice, batch
    4 and 8 in their own stage, the tests in capped groups), built from the committed run's own figures."""
    import json

    from orin_llm.bench.results_page import gpu_rows

    d = json.loads((ROOT / "docs" / "bench" / "gpu.json").read_text())
    st = d["stages"]
    b1 = st["decode_int4"]["batch_1"]
    roof = st["roofline"]["roofline_tok_per_s"]
    st.pop("decode_int4pack", None)
    st["decode_gemv"] = {"batch_1": {**b1, "tok_per_s_per_request": 2 * b1["tok_per_s_per_request"]}}
    st["roofline"]["decode_gemv_fraction"] = 2 * b1["tok_per_s_per_request"] / roof
    st["decode_unfused"] = {"ok": False, "error": "RuntimeError: a test's"}
    st["tests"] = {"new_kernels": {"passed": 20, "failed": 1, "errors": 0}, "engine": {"passed": 9, "failed": 0}}
    st["tests_rest"] = {"other_kernels": {"passed": 30, "failed": 0, "errors": 1}}
    rows = {r.what: r for r in gpu_rows(d)}
    gemv = rows["decode, batch 1, the Triton int4 GEMV at every layer"]
    assert gemv.ours == f"{2 * b1['tok_per_s_per_request']:.0f} tok/s ({2 * b1['tok_per_s_per_request'] / roof:.0%})"
    assert rows["decode, batch 1, the step's small ops unfused"].ours.startswith("not measured: RuntimeError")
    assert "decode, batch 1, torch's int4 kernel at every layer" not in rows  # not run: no row
    batch_8 = st["decode_batches"]["batch_8"]["tok_per_s_total"]
    assert rows["decode, batch 8 (all requests)"].ours == f"{batch_8:.0f} tok/s"
    assert rows["CUDA tests (pytest)"].ours == "59 passed, 2 failed" and rows["CUDA tests (pytest)"].met is False
    fused = st["decode_fused_untested"]["batch_1"]["tok_per_s_per_request"]  # (its test failed: speed only)
    assert rows["decode, batch 1, the step's small ops fused, though their CUDA test failed (speed only)"].ours \
        .startswith(f"{fused:.0f} tok/s")


def test_a_partial_gpu_run_shows_what_it_ran_and_a_ratio_across_runs_as_such():
    from orin_llm.bench.results_page import gpu_partial_section, load

    runs = json.loads((ROOT / "docs" / "bench" / "runs.json").read_text())
    full, part = load(ROOT, "gpu.json", runs), load(ROOT, "gpu_fused.json", runs)
    text = "\n".join(gpu_partial_section(ROOT, full, part))
    assert "stage missing" not in text and "transformers generate (static" not in text  # (hf did not run)
    ours = part.data["stages"]["decode_int4"]["batch_1"]["tok_per_s_per_request"]
    hf = full.data["stages"]["hf"]["compiled_static_tok_per_s_batch_1"]
    assert f"{ours / hf:.2f}×, a ratio across two runs, not side by side" in " ".join(text.split())
    part.data["stages"]["hf"] = {"compiled_static_tok_per_s_batch_1": hf}  # a partial run with its own figure
    assert "across two runs" not in "\n".join(gpu_partial_section(ROOT, full, part))


def test_kernel_rows_set_each_family_against_llama_cpp_and_the_quality_tests_bounds():
    from orin_llm.bench.results_kernels import kernels_rows

    family = {"kernels": {"q8": "avx2", "attention": "generic"},  # the mean |Δ logprob| is past 0.018
              "fp32_kv": {"argmax_agreement": 0.995, "mean_abs_dlogprob": 0.02, "perplexity": 2.65},
              "int8_kv": {"perplexity": 2.75}, "question": {"int8_kv": {"answer": "The capital of France is Paris."}}}
    llama = {"teacher_forced": {"perplexity": 2.7, "argmax_agreement": 0.991, "mean_abs_dlogprob": 0.038},
             "question": {"answer": "L'Étoile, la Marseillaise, la femme, la femme au martyre, la"}}
    d = {"llama_cpp": llama, "families": {"x86-avx2": family, "x86-avx2-vnni": {"skipped": "this CPU lacks avx_vnni"}}}
    answer, ppl, bounds, skipped = kernels_rows(d)
    assert answer.what.startswith("`x86-avx2` (avx2 / generic)") and answer.met is True
    assert answer.ours == "“The capital of France is Paris.”"
    assert answer.anchor == "“L'Étoile, la Marseillaise, la femme, la…”"  # cut at 40 characters
    assert (ppl.ours, ppl.anchor, ppl.met) == ("2.650 (2.750)", "2.700", True) and "float32 KV (INT8 KV)" in ppl.what
    assert (bounds.ours, bounds.anchor, bounds.met) == ("0.995, 0.0200", "0.991, 0.0380", False)
    assert skipped.ours == "not run here: this CPU lacks avx_vnni" and skipped.met is None
    family["question"]["int8_kv"]["answer"] = "L'Étoile"
    d["llama_cpp"] = {"skipped": "no llama-cpp-python"}
    answer, ppl, bounds, _ = kernels_rows(d)
    assert answer.met is False and ppl.met is None and ppl.anchor == bounds.anchor == "—"


def test_gpu_rows_of_issue_47_judge_their_own_goals():
    """A run with the head counted (both bandwidths), the same-quantization baseline, the 4k and the
    constrained decode: each row against its goal; a run before them has none of these rows."""
    from orin_llm.bench.results_gpu import gpu_rows

    def b1(v):
        return {"batch_1": {"tok_per_s_per_request": v}}

    data = {"stages": {"decode_int4": b1(600.0), "decode_family": b1(650.0),
                       "roofline": {"roofline_tok_per_s": 1800.0, "fraction_of_roofline": 0.333,
                                    "roofline_tok_per_s_read": 2000.0, "fraction_of_read_roofline": 0.3,
                                    "decode_family_fraction": 0.361},
                       "hf": {"compiled_static_tok_per_s_batch_1": 250.0,
                              "int4_compiled_static_tok_per_s_batch_1": 500.0},
                       "decode_4k": {"over_short_context": 0.85}, "decode_constrained": {"step_over_plain": 1.2}}}
    rows = {r.what: r for r in gpu_rows(data)}
    read = rows["decode, batch 1 / the step's bytes (the head's included) at read-only bandwidth"]
    assert read.ours == "600 tok/s (30%)" and read.met is False
    assert rows["decode, batch 1, the Triton decode GEMV family at every layer"].ours == "650 tok/s (36%)"
    int4 = next(r for w, r in rows.items() if "torch's int4 kernel in every linear" in w)
    assert int4.ours == "1.20×" and int4.met is False  # 600 / 500 under the 1.3× goal
    assert rows["decode, batch 1, after a 4k-token prompt / after a short one"].met is True
    assert rows["a constrained decode step (the example home's grammar) / a plain one"].met is False
    old = {r.what for r in gpu_rows({"stages": {"decode_int4": b1(438.0)}})}
    assert not any("read-only" in w or "4k-token" in w or "constrained" in w for w in old)
