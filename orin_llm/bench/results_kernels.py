"""The results page's rows for the `kernels` scenario (bench/kernels.py): per kernel family, the question's
answer, the calibration text's perplexity beside llama.cpp's on the same GGUF and token ids, and the
agreement with the float model against the quality test's bounds (kernel_quality.py)."""

from __future__ import annotations

from .kernel_quality import MAX_MEAN_DLOGPROB, MIN_AGREEMENT
from .results_format import Row


def _answer(text: str) -> str:
    text = " ".join(text.split()).replace("|", "\\|")
    return f"“{text[:40].rstrip()}{'…' if len(text) > 40 else ''}”"


def kernels_rows(d: dict) -> list[Row]:
    llama = d["llama_cpp"] if "skipped" not in d["llama_cpp"] else None
    rows = []
    for label, f in d["families"].items():
        if "skipped" in f or "error" in f:
            rows.append(Row(f"`{label}`", "—", f"not run here: {f.get('skipped') or 'failed'}", "—"))
            continue
        own = next(k for k in f if k.endswith("_kv") and k != "fp32_kv")  # the engine's cache: int8_kv
        answer = f["question"][own]["answer"]
        rows.append(Row(f"`{label}` ({f['kernels']['q8']} / {f['kernels']['attention']}): the question's answer",
                        "Paris", _answer(answer), _answer(llama["question"]["answer"]) if llama else "—",
                        "Paris" in answer))
        # llama.cpp keeps K/V in f16: against it, ours over a float32 cache (the kernels'), the INT8's beside
        fp, ppl = f["fp32_kv"], f["fp32_kv"]["perplexity"]
        rows.append(Row(f"`{label}`: calibration answers' perplexity, float32 KV ({own.split('_')[0].upper()} KV)",
                        "≤ llama.cpp's (f16 KV)", f"{ppl:.3f} ({f[own]['perplexity']:.3f})",
                        f"{llama['teacher_forced']['perplexity']:.3f}" if llama else "—",
                        ppl <= llama["teacher_forced"]["perplexity"] if llama else None))
        ll = llama["teacher_forced"] if llama else None
        rows.append(Row(f"`{label}`: top-1 agreement, mean \\|Δ logprob\\| with the float model (float32 KV)",
                        f"≥ {MIN_AGREEMENT}, ≤ {MAX_MEAN_DLOGPROB}",
                        f"{fp['argmax_agreement']:.3f}, {fp['mean_abs_dlogprob']:.4f}",
                        f"{ll['argmax_agreement']:.3f}, {ll['mean_abs_dlogprob']:.4f}" if ll else "—",
                        fp["argmax_agreement"] >= MIN_AGREEMENT and fp["mean_abs_dlogprob"] <= MAX_MEAN_DLOGPROB))
    return rows
