"""The calibration prompts ModelOpt's quantize.py reads (the opt-in AWQ and INT8-KV profiles): our planning
prompts as ``<out>/calib_dataset/train.jsonl``, the local directory get_calib_dataloader takes
(docs/trtllm-0.12-jetson.md §2.1)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from ..errors import OrinError


def _interleave_homes(items: list) -> list:
    by_home: dict[str, list] = {}
    for it in items:
        by_home.setdefault(it.home, []).append(it)
    queues = list(by_home.values())
    ordered = []
    for i in range(max((len(q) for q in queues), default=0)):
        ordered += [q[i] for q in queues if i < len(q)]
    return ordered


def write_calib_dataset(out: Path, max_items: int | None = None, root: Path | str | None = None) -> Path:
    """Write ``<out>/calib_dataset/train.jsonl``: one ``{"text": prompt}`` per calibration item.

    quantize.py reads a local directory's train split, "text" column (doc §2.1); the directory holds
    just this one file (the doc leaves mixed file types in one directory unverified). Rows are
    interleaved by home so the first rows, which are the ones calibration uses, cover every home.
    """
    from ..planning.calibration_data import load_home, load_split
    from ..planning.home import prefix_messages, task_message

    items = _interleave_homes(load_split("calib", root))
    if max_items is not None:
        items = items[:max_items]
    if not items:
        raise OrinError("the calib split is empty; run python calibration/generate.py to regenerate it")
    directory = Path(out) / "calib_dataset"
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    path = directory / "train.jsonl"
    homes: dict[str, Any] = {}
    with open(path, "w", encoding="utf-8") as f:
        for it in items:
            if it.home not in homes:
                homes[it.home] = load_home(it.home, root)
            # The prompt the planner sends, as plain text: the chat messages' contents joined with
            # blank lines. The tokenizer's chat template (and its special tokens) is not available
            # without the model, and quantize.py applies no template itself (doc §2.1), so the
            # calibration sees the same words and structure, without the header tokens.
            messages = prefix_messages(homes[it.home]) + [task_message(it.task)]
            text = "\n\n".join(m["content"] for m in messages)
            f.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
    return path
