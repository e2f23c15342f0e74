"""The results page's GPU rows (results_page.py): gpu.json from bench/gpu_check.sh (issue 36), against
the roofline and transformers, and a partial run's section beside the full one."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

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
    read_frac, read_roof = get("roofline", "fraction_of_read_roofline"), get("roofline", "roofline_tok_per_s_read")
    if read_frac is not None:  # (issue 47's runs: the head counted, a read-only bandwidth beside the copy's)
        rows.append(Row("decode, batch 1 / the step's bytes (the head's included) at read-only bandwidth", "≥ 50 %",
                        f"{ours:.0f} tok/s ({read_frac:.0%})", f"{read_roof:.0f} tok/s", read_frac >= 0.5))
    # each int4 kernel forced, and the step's small ops unfused, beside the per-shape choice (runs after 2026-11-26)
    for stage, words in (("decode_int4pack", "torch's int4 kernel at every layer"),
                         ("decode_gemv", "the Triton int4 GEMV at every layer"),
                         ("decode_family", "the Triton decode GEMV family at every layer"),
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
    int4 = get("hf", "int4_compiled_static_tok_per_s_batch_1")
    if int4 or "int4_compiled_static_error" in st.get("hf", {}):  # (issue 47: the same quantization, same run)
        rows.append(Row("decode, batch 1 / transformers generate with torch's int4 kernel in every linear "
                        "(static cache, torch.compile)", "≥ 1.3×",
                        f"{ours / int4:.2f}×" if ours and int4 else why("hf"),
                        f"{int4:.0f} tok/s" if int4 else "failed: " + str(st["hf"]["int4_compiled_static_error"])[:80],
                        None if not (ours and int4) else ours / int4 >= 1.3))
    for stage, words, goal, key, ok in (
            ("decode_4k", "decode, batch 1, after a 4k-token prompt / after a short one", "≥ 0.8×",
             "over_short_context", lambda v: v >= 0.8),
            ("decode_constrained", "a constrained decode step (the example home's grammar) / a plain one", "≤ 1.1×",
             "step_over_plain", lambda v: v <= 1.1)):
        if stage in st:
            v = get(stage, key)
            rows.append(Row(words, goal, f"{v:.2f}×" if v is not None else why(stage), "—",
                            None if v is None else ok(v)))
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


def recounted_roofline(full: dict, fused: dict) -> Optional[float]:
    """The fused run's batch-1 rate against the copy roofline with the head counted (issue 47): the runs of
    issue 36 left out the embedding's codes and scales, which the tied head reads every step; both JSONs
    recorded what they left out (`embedding_bytes_not_counted`), so the share is recomputed from them."""
    roof = full.get("stages", {}).get("roofline", {})
    ours = fused.get("stages", {}).get("decode_int4", {}).get("batch_1", {}).get("tok_per_s_per_request")
    fused_roof = fused.get("stages", {}).get("roofline", {})
    total = fused_roof.get("total_bytes") or roof.get("total_bytes")
    left_out = fused_roof.get("embedding_bytes_not_counted") or roof.get("embedding_bytes_not_counted")
    bw = fused_roof.get("bandwidth_gb_per_s") or roof.get("bandwidth_gb_per_s")
    if not (ours and total and left_out and bw) or "head_bytes" in fused_roof:
        return None
    return ours / (bw * 1e9 / (total + left_out))


def next_run_section(full: Optional[dict], fused: Optional[dict]) -> list[str]:
    """What the first GPU run of issue 47 needs: not run yet (no GPU was lent while it was written)."""
    share = recounted_roofline(full, fused) if full and fused else None
    lines = ["", "## On a GPU: the next run (issue 47), not yet run", ""]
    if share is not None:
        lines += prose(f"The runs above counted a step's bytes without the head's: the tied head reads the "
                       f"embedding's codes and scales every step. With them (both JSONs recorded the bytes left "
                       f"out), the fused run's batch-1 decode is {share:.0%} of the copy roofline, not the "
                       f"{fused['stages']['roofline'].get('fraction_of_roofline', 0):.0%} its table says. "
                       "`orin_llm/bench/gpu_roofline.py` counts the head now.") + [""]
    lines += prose("No GPU was lent while issue 47's measurement (S0) and the decode GEMV family (S2) were "
                   "written: none of their figures exists yet. The first run needs, here (with network), the "
                   "wheels of `bench/gpu_wheels.txt` for Python 3.12 on x86-64 and the embedded default's "
                   "tokenizer in `.whl/` (`bash bench/gpu_prepare.sh`; a wheel it cannot download, it names: "
                   "add that one by hand), then one device call of at most 7 minutes, carrying `.whl`, with "
                   "the commit written into the command here (the device's copy of the tree has no "
                   "trustworthy .git):") + [""]
    lines += ["<!-- docs-test: skip: the device call needs a GPU machine, and gpu_prepare.sh the network -->",
              "```bash", "bash bench/gpu_prepare.sh   # here: .whl/ (wheels + tokenizer), git-ignored",
              "# the device call: carry [\".whl\"], timeout_s 420, this command with the commit filled in here",
              "ORIN_LLM_COMMIT=<git rev-parse HEAD> bash bench/gpu_check.sh $OUT/gpu_check.json --budget-s 300",
              "# one stage again, if one failed (the engine's stages first): about a minute",
              "ORIN_LLM_COMMIT=<git rev-parse HEAD> bash bench/gpu_check.sh $OUT/gpu_stage.json --budget-s 90 \\",
              "  --stages env,bandwidth,engine_write,load_int4,decode_int4,roofline", "```", ""]
    lines += prose("The JSON then goes to `docs/bench/` and this page is written again (`python -m "
                   "orin_llm.bench.results_page`). What it settles: batch-1 decode against the roofline with "
                   "the head counted (copy and read-only bandwidth), transformers' compiled `generate` in bf16 "
                   "and with torch's int4 kernel in every linear in the same run, decode at a 4k context and "
                   "constrained decode against plain (three repeats each, medians), int4 kernels timed with "
                   "their weights cold in L2, and the decode family against torch's int4 kernel "
                   "(`decode_family`, and the per-shape race at load).")
    return lines
