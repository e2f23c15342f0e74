"""Plans that seed the model-free drafter's history (runtime/speculative.py, LookupDrafter).

A robot's plans repeat their shape from call to call (`go_to(…)`, `pick(…)`, `place(…, …)`), which
is what the lookup drafter's history of earlier outputs exploits (SuffixDecoding-style). A fresh
daemon has no history yet; the build gives it one: the reference plans of a calibration split,
tokenized with the engine's tokenizer, in `lookup_seed.json`. The held-out split is never used
(its homes are the benchmark's). Greedy output does not depend on it (verification is exact).
"""

from __future__ import annotations

import json
from pathlib import Path

from ..manifest import FileEntry, file_entry
from ..planning.calibration_data import load_split

SEED_FILE = "lookup_seed.json"


def write_lookup_seed(engine_dir: Path, split: str) -> FileEntry:
    from ..runtime.engine_files import load_tokenizer

    tokenizer = load_tokenizer(engine_dir / "tokenizer")
    items = load_split(split)
    outputs = [tokenizer.encode("\n".join(it.reference_plan), add_special_tokens=False) for it in items]
    path = engine_dir / SEED_FILE
    path.write_text(json.dumps({"source": f"reference plans of the {split!r} calibration split "
                                          f"({len(items)} tasks)", "outputs": outputs}))
    return file_entry(path, engine_dir)
