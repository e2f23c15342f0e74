"""The results page's GPU rows (results_page.py): gpu.json from bench/gpu_check.sh (issue 36), against
the roofline and transformers, and a partial run's section beside the full one."""

from __future__ import annotations

from pathlib import Path

from .results_format import Row, Run, ms, prose, section


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
