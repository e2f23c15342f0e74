"""The GPU check's decode stages (orin_llm/bench/gpu.py): steady decode at batch B, at a 4k-token context,
and constrained to a home's plan grammar beside plain decoding, each repeated (REPEATS) and reported as
the median with every repeat's figure beside it.

A repeat times a request from its first token to its last (the prompt's prefill left out), so its
tok/s is decode alone. Random weights (shaped.py) make a constrained plan end wherever the model first
picks the end of the turn: a constrained repeat runs requests until it has `tokens` tokens, and its
figure per model step (step_ms) is what is put against plain decoding.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Optional

import torch

from .gpu_run import _gen, _ids, _sync

REPEATS = 3


def median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each numeric figure's median over the repeats, and each repeat's tok/s per request."""
    out: dict[str, Any] = {}
    for key, first in runs[0].items():
        if isinstance(first, (int, float)) and not isinstance(first, bool):
            value = statistics.median(r[key] for r in runs)
            out[key] = round(value, 3) if isinstance(value, float) else value
    out["repeats"] = [r["tok_per_s_per_request"] for r in runs]
    return out


def _drain(eng, gens: list) -> None:
    for g in gens:
        eng.submit(g)
    while eng.busy:
        eng.step()


def timed_decode(eng, gens: list) -> dict[str, Any]:
    """`gens` submitted together, timed from every one's first token until the engine is idle."""
    for g in gens:
        eng.submit(g)
    while any(not g.out for g in gens) and eng.busy:
        eng.step()
    _sync()
    start, before, steps = time.perf_counter(), sum(len(g.out) for g in gens), eng.steps
    while eng.busy:
        eng.step()
    _sync()
    dt = time.perf_counter() - start
    made, n = sum(len(g.out) for g in gens) - before, eng.steps - steps
    return {"tok_per_s_per_request": round(made / len(gens) / dt, 1) if dt else 0.0,
            "tok_per_s_total": round(made / dt, 1) if dt else 0.0, "steps": n,
            "step_ms": round(1000 * dt / max(1, n), 3), "tokens": made, "seconds": round(dt, 4)}


def decode_stage(eng, batches: tuple[int, ...], prompt: int, tokens: int, device: str,
                 repeats: int = REPEATS) -> dict[str, Any]:
    """Steady decode: per batch B, a first pass of the same shape untimed (graphs are captured as the
    context crosses buckets), then `repeats` passes of B fresh requests each."""
    from .gpu_kernels import replay_ms

    out: dict[str, Any] = {}
    for b in batches:
        eng.tune(max_running=b)
        _drain(eng, [_gen(eng, _ids(prompt, 50 + i), tokens) for i in range(b)])
        out[f"batch_{b}"] = median_of([timed_decode(eng, [_gen(eng, _ids(prompt, 100 + 10 * r + i), tokens)
                                                           for i in range(b)]) for r in range(repeats)])
    eng.tune(max_running=eng.capabilities.max_batch)
    if device == "cuda":
        out["peak_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    if eng.runner.graphs is not None:
        out["graphs"] = eng.runner.graphs.report()
        out["replay_ms"] = replay_ms(eng)
    return out


def context_stage(eng, context: int, tokens: int, short: Optional[dict], repeats: int = REPEATS) -> dict[str, Any]:
    """Batch-1 decode after a `context`-token prompt (the same prompt each repeat: its blocks come from the
    prefix cache after the first), against the short-context decode `short` (decode_stage's batch_1)."""
    eng.tune(max_running=1)
    ids = _ids(context, 400)
    _drain(eng, [_gen(eng, ids, tokens)])  # the prompt's K/V, and the graphs of its block buckets
    runs = [timed_decode(eng, [_gen(eng, ids, tokens)]) for _ in range(repeats)]
    eng.tune(max_running=eng.capabilities.max_batch)
    out: dict[str, Any] = {"context": context, "batch_1": median_of(runs)}
    base = (short or {}).get("tok_per_s_per_request")
    if base:
        out["over_short_context"] = round(out["batch_1"]["tok_per_s_per_request"] / base, 3)
    return out


def plan_lark(max_steps: int = 1000) -> str:
    """The example home's plan grammar (planning/home/grammar.py), long enough never to end a repeat."""
    from ..planning.home.grammar import plan_grammar
    from ..planning.home.parse import EXAMPLE_HOME_PATH, load_environment

    return plan_grammar(load_environment(EXAMPLE_HOME_PATH), max_steps=max_steps)


def constrained_stage(eng, prompt: int, tokens: int, plain: Optional[dict], repeats: int = REPEATS) -> dict[str, Any]:
    """Batch-1 decode constrained to the example home's plan grammar (masks made on the host, applied on
    the device: the product's path), against plain decoding `plain` (decode_stage's batch_1) per model
    step. Each repeat runs requests until `tokens` tokens were timed (module doc)."""
    from ..runtime.constraint import Grammar

    grammar = Grammar.lark(eng.vocabulary(), plan_lark(), "the example home's plans")
    eng.tune(max_running=1)

    def request(seed: int):
        g = _gen(eng, _ids(prompt, seed), tokens, constraint=grammar.constraint())
        return g

    _drain(eng, [request(500)])
    runs = []
    for r in range(repeats):
        parts, seed, mask_s, forced = [], 600 + 100 * r, 0.0, 0
        while sum(p["tokens"] for p in parts) < tokens and len(parts) < 4 * tokens:
            g = request(seed)
            parts.append(timed_decode(eng, [g]))
            mask_s, forced, seed = mask_s + g.timings.mask_s, forced + g.timings.forced_tokens, seed + 1
        made, dt, steps = (sum(p[k] for p in parts) for k in ("tokens", "seconds", "steps"))
        runs.append({"tok_per_s_per_request": round(made / dt, 1) if dt else 0.0, "tokens": made, "steps": steps,
                     "step_ms": round(1000 * dt / max(1, steps), 3), "requests": len(parts),
                     "mask_ms_per_step": round(1000 * mask_s / max(1, steps), 3), "forced_tokens": forced})
    eng.tune(max_running=eng.capabilities.max_batch)
    out: dict[str, Any] = {"grammar": "the example home's plans (planning/home/grammar.py)",
                           "batch_1": median_of(runs)}
    base = (plain or {}).get("step_ms")
    if base:
        out["step_over_plain"] = round(out["batch_1"]["step_ms"] / base, 3)
    return out
