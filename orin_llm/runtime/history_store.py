"""The lookup drafter's memory across restarts: one history of accepted outputs per environment,
kept as a JSON file in the daemon's state directory.

A restarted daemon drafts from what it learned before (SuffixDecoding's point: plans repeat their
shape), not only from the build's seed plans. Files are bounded (LookupHistory.max_tokens) and
written atomically (orin_llm/atomic_file.py), so a daemon killed mid-write (SIGKILL, power loss)
finds the last good file. A file written for another engine or tokenizer holds token ids that
mean other words: it is refused with a message naming the file and the mismatch, and the history
starts from the seed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Optional

from ..atomic_file import atomic_write, clear_stale
from .speculative import LookupHistory

log = logging.getLogger(__name__)

FORMAT = 1


def engine_identity(manifest) -> dict:
    """What a history's token ids depend on: the engine and its tokenizer files."""
    digest = hashlib.sha256()
    for f in sorted(manifest.tokenizer, key=lambda f: f.path):
        digest.update(f"{f.path}:{f.sha256}\n".encode())
    return {"engine": manifest.name, "tokenizer_sha256": digest.hexdigest(),
            "vocab_size": manifest.target.arch.vocab_size}


def _file_name(key: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", key)[:80]
    return f"lookup-{safe}-{hashlib.sha256(key.encode()).hexdigest()[:8]}.json"


class HistoryStore:
    """Histories by key (the environment's name); `directory` None keeps them in memory only."""

    def __init__(self, directory: Optional[Path], identity: dict, seed: Sequence[list[int]] = (),
                 max_tokens: int = 50_000):
        self.directory = Path(directory) if directory is not None else None
        self.identity, self.seed, self.max_tokens = identity, list(seed), max_tokens
        self.histories: dict[str, LookupHistory] = {}
        self._saved: dict[str, int] = {}  # key -> len(tokens) when last saved
        if self.directory is not None:
            self.directory.mkdir(parents=True, exist_ok=True)
            clear_stale(self.directory, "lookup-*")  # writes a killed daemon never finished

    def path(self, key: str) -> Optional[Path]:
        return self.directory / _file_name(key) if self.directory is not None else None

    def get(self, key: str) -> LookupHistory:
        if key not in self.histories:
            self.histories[key] = self._load(key)
            self._saved[key] = len(self.histories[key].tokens)
        return self.histories[key]

    def _fresh(self) -> LookupHistory:
        return LookupHistory(seed=self.seed, max_tokens=self.max_tokens)

    def _load(self, key: str) -> LookupHistory:
        path = self.path(key)
        if path is None or not path.is_file():
            return self._fresh()
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            log.warning("lookup history %s is unreadable (%s): starting from the seed plans", path, e)
            return self._fresh()
        why = self._mismatch(data, key)
        if why:
            log.warning("lookup history %s refused: %s; starting from the seed plans (the file is replaced at "
                        "the next save)", path, why)
            return self._fresh()
        history = LookupHistory(max_tokens=self.max_tokens)
        for output in data["outputs"]:
            history.add(output)
        log.info("lookup history %s: %d outputs, %d tokens", path, len(data["outputs"]), len(history.tokens))
        return history

    def _mismatch(self, data, key: str) -> str:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            return f"not a format-{FORMAT} lookup history"
        for name, want in self.identity.items():
            got = data.get("identity", {}).get(name)
            if got != want:
                return f"written for {name} {got!r}, this engine has {want!r}"
        if data.get("key") != key:
            return f"it belongs to {data.get('key')!r}, not {key!r}"
        outputs = data.get("outputs")
        ok = isinstance(outputs, list) and all(
            isinstance(o, list) and all(isinstance(t, int) and 0 <= t < self.identity["vocab_size"] for t in o)
            for o in outputs)
        return "" if ok else "its outputs are not lists of this vocabulary's token ids"

    # ------------------------------------------------------------------ saving

    @property
    def dirty(self) -> list[str]:
        return [k for k, h in self.histories.items() if len(h.tokens) != self._saved.get(k)]

    def save(self, key: str) -> None:
        path = self.path(key)
        if path is None:
            return
        history = self.histories[key]
        data = {"format": FORMAT, "identity": self.identity, "key": key, "outputs": history.outputs()}
        atomic_write(path, json.dumps(data, separators=(",", ":")))
        self._saved[key] = len(history.tokens)

    def save_dirty(self) -> int:
        keys = self.dirty
        for key in keys:
            self.save(key)
        return len(keys)

