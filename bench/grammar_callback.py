"""The TensorRT-LLM grammar post-processor's per-token cost, in its parts (backends/trtllm/grammar.py):
the matcher's mask (llguidance writes a bitmask), its unpacking to one bool per token, the forbidden-token
mask built on the host, its copy to the logits' device (pageable memory, as _mask does it, and pinned), the
masked fill; then the whole callback, alone and while another Python thread runs (the daemon's worker and
HTTP threads: the callback holds the GIL while it runs, and each time it lets go it may wait the
interpreter's switch interval to get it back), with that thread's longest stall.

The positions are a random walk through the example home's plan grammar (each step a token the grammar
allows, not the end), so no model is needed: the engine directory gives the tokenizer and the vocabulary.
On a CPU-only machine the device copy is not measured (null in the JSON); jetson/first-contact.sh runs it
on the Orin with --device cuda.

    python bench/grammar_callback.py --engine engines/agx-orin-64gb --device cuda --out grammar_callback.json
"""
from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import sys
import threading
import time
from pathlib import Path

import torch

from orin_llm.backends.trtllm.grammar import GrammarProcessor
from orin_llm.manifest import load_manifest
from orin_llm.planning.home.grammar import plan_grammar
from orin_llm.planning.home.parse import load_environment
from orin_llm.runtime.constraint import Grammar, Vocabulary
from orin_llm.runtime.engine_files import eos_ids, load_tokenizer

HOME = Path(__file__).resolve().parents[1] / "orin_llm" / "data" / "homes" / "example_home.yaml"


def walk(grammar: Grammar, eos: set[int], n: int, seed: int = 0):
    """n (constraint, tokens so far) positions of random plans the grammar allows; a new plan when one ends."""
    rng = random.Random(seed)
    c, produced = grammar.constraint(), []
    for _ in range(n):
        allowed = [t for t in c.allowed().nonzero().flatten().tolist() if t not in eos]
        if not allowed or c.finished:
            c, produced = grammar.constraint(), []
            allowed = [t for t in c.allowed().nonzero().flatten().tolist() if t not in eos]
        yield c, produced
        tok = rng.choice(allowed)
        c.accept(tok)
        produced.append(tok)


def ms(values: list[float]) -> dict:
    v = sorted(values)
    return {"median_ms": round(statistics.median(v) * 1e3, 4), "p90_ms": round(v[int(0.9 * (len(v) - 1))] * 1e3, 4),
            "max_ms": round(v[-1] * 1e3, 4), "n": len(v)}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def parts(grammar: Grammar, eos: set[int], width: int, device: torch.device, n: int) -> dict:
    """Each step of one row's masking, timed alone at each position of the walk."""
    t: dict[str, list[float]] = {k: [] for k in ("matcher", "unpack", "forbid", "copy_pageable", "copy_pinned", "fill")}
    logits = torch.zeros(1, width, device=device)
    for c, _ in walk(grammar, eos, n):
        t0 = time.perf_counter()
        c.m.unsafe_compute_mask_ptr(c._bits.data_ptr(), c._bits.numel() * c._bits.element_size())
        t1 = time.perf_counter()
        allowed = c.allowed()  # the matcher again, then the unpacking: unpack = this minus the matcher
        t2 = time.perf_counter()
        forbid = torch.ones(1, width, dtype=torch.bool)
        k = min(width, allowed.shape[-1])
        forbid[:, :k] = ~allowed[None, :k]
        t3 = time.perf_counter()
        t["matcher"].append(t1 - t0)
        t["unpack"].append(max(0.0, (t2 - t1) - (t1 - t0)))
        t["forbid"].append(t3 - t2)
        if device.type == "cuda":
            sync(device)
            t4 = time.perf_counter()
            on_device = forbid.to(device, non_blocking=True)
            sync(device)
            t5 = time.perf_counter()
            pinned = forbid.pin_memory()
            t6 = time.perf_counter()
            pinned.to(device, non_blocking=True)
            sync(device)
            t7 = time.perf_counter()
            t["copy_pageable"].append(t5 - t4)
            t["copy_pinned"].append(t7 - t6)
        else:
            on_device = forbid
        t8 = time.perf_counter()
        logits.masked_fill_(on_device, float("-inf"))
        sync(device)
        t["fill"].append(time.perf_counter() - t8)
        logits.zero_()
    return {k: (ms(v) if v else None) for k, v in t.items()}


def callbacks(grammar: Grammar, eos: set[int], end_id: int, width: int, device: torch.device, n: int,
              busy: bool) -> dict:
    """GrammarProcessor calls on a thread of their own (the executor's), one row each, with or without a
    Python thread busy next to it; that thread's longest gap between two of its loop's turns."""
    proc = GrammarProcessor(end_id)
    logits = torch.zeros(1, width, device=device)
    stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0
    positions = [(c.fork(), list(p)) for c, p in walk(grammar, eos, n, seed=1)]  # each state kept as it was
    durations: list[float] = []
    gaps: list[float] = []
    stop = threading.Event()

    def spin() -> None:  # the daemon's own Python: a loop that needs the GIL all the time
        last = time.perf_counter()
        while not stop.is_set():
            sum(range(200))
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    def executor() -> None:
        for i, (c, produced) in enumerate(positions):
            # the state already holds what was produced: the call only masks (a real call also accepts
            # the one token decided since the last, microseconds next to the mask)
            client = proc.register(c, len(produced))
            proc.bind(client, i)
            t0 = time.perf_counter()
            proc(i, logits, [produced], stream, client)
            sync(device)
            durations.append(time.perf_counter() - t0)
            if proc.error(i) is not None:
                raise SystemExit(f"the post-processor could not mask position {i}: {proc.error(i)}")
            proc.release(client, [])
            logits.zero_()

    other = threading.Thread(target=spin, daemon=True) if busy else None
    if other is not None:
        other.start()
        time.sleep(0.05)
    worker = threading.Thread(target=executor)
    worker.start()
    worker.join()
    stop.set()
    if other is not None:
        other.join()
    out = {"callback": ms(durations)}
    if gaps:
        out["other_thread_longest_stall_ms"] = round(max(gaps) * 1e3, 3)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", required=True, help="an engine directory (its tokenizer and vocabulary)")
    ap.add_argument("--width", type=int, default=0, help="logits width (default: the target's vocab_size)")
    ap.add_argument("--device", default="cpu", help="cpu or cuda: where the logits live")
    ap.add_argument("--positions", type=int, default=200)
    ap.add_argument("--out", type=Path, help="write the JSON here too")
    a = ap.parse_args(argv)
    engine = Path(a.engine)
    manifest = load_manifest(engine)
    tok = load_tokenizer(engine / "tokenizer")
    eos = eos_ids(tok, engine / "tokenizer")
    vocab_size = manifest.target.arch.vocab_size
    width = a.width or vocab_size
    device = torch.device(a.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no CUDA device here")
    grammar = Grammar.lark(Vocabulary(tok, vocab_size, eos), plan_grammar(load_environment(HOME)), "plan grammar")
    end_id = tok.eos_token_id if tok.eos_token_id in eos else min(eos)
    result = {
        "what": "TensorRT-LLM grammar post-processor, per row (bench/grammar_callback.py)",
        "engine": engine.name, "vocab_size": vocab_size, "logits_width": width, "device": str(device),
        "machine": {"python": platform.python_version(), "torch": torch.__version__, "cpus": torch.get_num_threads(),
                    "switch_interval_ms": sys.getswitchinterval() * 1e3,
                    "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None},
        "parts": parts(grammar, eos, width, device, a.positions),
        "alone": callbacks(grammar, eos, end_id, width, device, a.positions, busy=False),
        "next_to_a_busy_python_thread": callbacks(grammar, eos, end_id, width, device, a.positions, busy=True),
    }
    text = json.dumps(result, indent=2)
    print(text)
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
