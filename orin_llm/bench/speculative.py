"""Plain decoding vs each drafter on held-out planning tasks, measured side by side in one run:
decode speed, acceptance, mean accepted length, and whether the output equals plain greedy.

On torch every mode runs twice, with the exact (batch-invariant) and the fast decode steps; a
TensorRT-LLM engine has its own kernels, so it runs once, labelled "trtllm", and the JSON says that
the exact mode is torch only. The draft's per-token cost is timed on either backend."""

from __future__ import annotations

import time
from pathlib import Path

from ..errors import OrinError
from ..manifest import load_manifest
from ..planning.calibration_data import load_home, load_split
from ..planning.planner import Planner
from ..runtime.history_store import HistoryStore
from ..runtime.sampling import SamplingParams
from ..runtime.speculative import LookupDrafter
from .common import loaded, progress, pyplot, write_json

EXACT_MODE_TRTLLM = ("torch only: the exact/fast choice is between two torch decode-step kernels; TensorRT-LLM "
                     "runs its own, once (label \"trtllm\")")


EMPTY_HISTORY = "lookup_empty_history"  # lookup without the engine's seed plans: what the seed buys


def _run_mode(engine, items, mode: str, max_tokens: int) -> dict:
    # each mode starts from the engine's seed history only: nothing leaks across modes
    seed = [] if mode == EMPTY_HISTORY else engine.lookup_seed
    if engine.manifest.backend == "trtllm":
        engine.lookup = LookupDrafter(seed=seed)
    else:
        engine.histories = HistoryStore(None, engine.histories.identity, seed)
    mode = "lookup" if mode == EMPTY_HISTORY else mode
    decode_s = 0.0
    tokens = drafted = accepted = steps = 0
    outputs = {}
    for it in items:
        # free-text plans, as before the grammar: the constrained scenario measures drafters under it
        res = Planner(engine, load_home(it.home)).plan(it.task, SamplingParams(max_tokens=max_tokens),
                                                       speculation=mode, constrained=False).result
        decode_s += res.timings.total_s - res.timings.ttft_s
        tokens += max(0, res.timings.completion_tokens - 1)
        drafted += res.speculation.drafted
        accepted += res.speculation.accepted
        steps += res.speculation.steps
        outputs[it.id] = res.token_ids
    return {"decode_tokens_per_s": tokens / decode_s if decode_s else 0.0, "decode_tokens": tokens,
            "drafted": drafted, "accepted": accepted, "acceptance_rate": accepted / drafted if drafted else 0.0,
            "mean_accepted_length": (accepted + steps) / steps if steps else 0.0, "outputs": outputs}


def _torch_ms_per_token(engine, ids: list[int], tokens: int) -> dict:
    """Plain forward passes of each lane, one token at a time after the same context."""
    import torch

    per_token = {}
    for name, model in (("target", engine.model), ("draft", engine.load_draft())):
        cache = engine.contiguous_cache(len(ids) + tokens + 1, draft=name == "draft")
        model(torch.tensor(ids), cache)
        tok = torch.tensor([ids[-1]])
        t0 = time.perf_counter()
        for _ in range(tokens):
            tok = model(tok, cache).argmax(-1)
        per_token[name] = (time.perf_counter() - t0) / tokens * 1e3
    return per_token


def _trtllm_ms_per_token(engine, role: str, ids: list[int], tokens: int) -> float:
    """A plain greedy request streamed from the role's executor: the time from the first response to the
    last over the tokens after the first response (which carries the prefill)."""
    first_at = last_at = 0.0
    first = seen = 0
    for new in engine.stream(getattr(engine, f"{role}_executor"), ids, tokens + 1):
        if new:
            last_at = time.perf_counter()
            if not seen:
                first_at, first = last_at, len(new)
            seen += len(new)
    if seen <= first:
        raise OrinError(f"timing the {role} engine needs more than one streamed response; it returned {seen} tokens")
    return (last_at - first_at) / (seen - first) * 1e3


def draft_cost(engine, tokens: int = 32) -> dict:
    """Size on disk and per-token decode time of the quantized draft vs the target (plain greedy
    decoding, same context), on either backend."""
    ids = engine.chat_ids([{"role": "user", "content": "List the rooms of a house."}])
    if engine.manifest.backend == "trtllm":
        per_token = {role: _trtllm_ms_per_token(engine, role, ids, tokens) for role in ("target", "draft")}
        weights = ".engine"  # trtllm-build's rank0.engine
    else:
        per_token = _torch_ms_per_token(engine, ids, tokens)
        weights = "model.safetensors"
    size = {m.dir: sum(f.bytes for f in m.files if f.path.endswith(weights))
            for m in (engine.manifest.target, engine.manifest.draft)}
    return {"target_ms_per_token": per_token["target"], "draft_ms_per_token": per_token["draft"],
            "draft_over_target_time": per_token["draft"] / per_token["target"],
            "target_weights_bytes": size["target"], "draft_weights_bytes": size["draft"],
            "draft_weights": engine.manifest.draft.weights}


def run(engine_dir: Path, out: Path, quick: bool = False) -> dict:
    items = load_split("heldout")[::2][: 8 if quick else 24]
    max_tokens = 48
    results = {}
    results_draft: dict = {}
    trtllm = load_manifest(engine_dir).backend == "trtllm"
    passes = {"trtllm": {}} if trtllm else {"exact": {"device": "cpu", "exact": True},
                                            "fast": {"device": "cpu", "exact": False}}
    for label, options in passes.items():
        with loaded(engine_dir, **options) as engine:
            warm = items[0]
            Planner(engine, load_home(warm.home)).plan(warm.task, SamplingParams(max_tokens=8),
                                                       constrained=False)  # warm-up
            modes = [m for m in engine.speculation_modes if m not in ("auto",)]
            if engine.lookup_seed and "lookup" in modes:
                modes.insert(modes.index("lookup") + 1, EMPTY_HISTORY)
            plain_outputs: dict = {}
            plain_tps = 0.0
            for mode in modes:
                r = _run_mode(engine, items, mode, max_tokens)
                outputs = r.pop("outputs")
                if mode == "none":
                    plain_outputs, plain_tps = outputs, r["decode_tokens_per_s"]
                same = sum(outputs[k] == plain_outputs[k] for k in plain_outputs)
                r["identical_to_plain"] = f"{same}/{len(items)}"
                r["speedup_vs_plain"] = r["decode_tokens_per_s"] / plain_tps
                results[f"{label}/{mode}"] = r
                progress(f"{label} {mode:12s} {r['decode_tokens_per_s']:6.1f} tok/s  ×{r['speedup_vs_plain']:.2f}  "
                         f"accept {r['acceptance_rate']:.2f}  mean len {r['mean_accepted_length']:.2f}  "
                         f"same as plain {r['identical_to_plain']}")
            has_draft = engine.draft_executor is not None if trtllm else engine.draft_available
            if label != "exact" and has_draft:
                results_draft = draft_cost(engine)
                progress(f"draft {results_draft['draft_ms_per_token']:.1f} ms/token vs target "
                         f"{results_draft['target_ms_per_token']:.1f} ms/token")
        del engine
    # the fastest plain decoding of this engine, whichever kind of decode step gave it
    fast_plain = max(r["decode_tokens_per_s"] for k, r in results.items() if k.endswith("/none"))
    for r in results.values():
        r["speedup_vs_fast_plain"] = r["decode_tokens_per_s"] / fast_plain
    data = {"backend": "trtllm" if trtllm else "torch", "items": len(items), "max_tokens": max_tokens,
            "results": results, "draft": results_draft,
            "note": "exact: batch-invariant decode steps (greedy output identical by construction); "
                    "fast: unpadded decode steps (identical up to floating-point near-ties)"}
    if trtllm:
        data["exact_mode"] = EXACT_MODE_TRTLLM
        data["note"] = ("trtllm: TensorRT-LLM's kernels, our draft/target loop (backends/trtllm/generation.py); "
                        "speedup_vs_fast_plain is against trtllm/none, its only plain decoding")
    write_json(out, "speculative", data)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    names = list(results)
    ax.bar(range(len(names)), [results[n]["speedup_vs_fast_plain"] for n in names],
           color=["tab:blue" if n.startswith("exact") else "tab:orange" for n in names])
    ax.axhline(1.0, color="gray", ls="--")
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right")
    ax.set_ylabel("decode speed vs fastest plain decoding")
    ax.set_title("speculative decoding on held-out planning tasks")
    fig.tight_layout()
    fig.savefig(out / "speculative.png", dpi=120)
    return data
