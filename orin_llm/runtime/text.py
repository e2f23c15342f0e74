"""Token ids → text deltas, with stop strings.

Decoding token by token breaks multi-byte characters and merges, so the whole completion is
decoded and the new part emitted. Text that could still become a stop string is held back
until it can't; a half-decoded character (U+FFFD at the end) is held back too.
"""

from __future__ import annotations


class TextStream:
    def __init__(self, tokenizer, stop: list[str]):
        self.tokenizer = tokenizer
        self.stop = [s for s in stop if s]
        self.ids: list[int] = []
        self.text = ""  # final text so far (after a stop: up to the stop string)
        self.emitted = 0

    def _holdback(self, text: str) -> int:
        hold = 0
        for s in self.stop:
            for n in range(min(len(s) - 1, len(text)), 0, -1):
                if text.endswith(s[:n]):
                    hold = max(hold, n)
                    break
        if text.endswith("\ufffd"):
            hold = max(hold, 1)
        return hold

    def push(self, token_id: int) -> tuple[str, bool]:
        """Add a token; returns (new text to emit, whether a stop string was hit)."""
        self.ids.append(token_id)
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        hits = [i for i in (text.find(s, max(0, self.emitted - len(s))) for s in self.stop) if i >= 0]
        if hits:
            self.text = text[: min(hits)]
            return self._emit(len(self.text)), True
        self.text = text
        return self._emit(len(text) - self._holdback(text)), False

    def flush(self) -> str:
        return self._emit(len(self.text))

    def _emit(self, upto: int) -> str:
        upto = max(upto, self.emitted)
        delta = self.text[self.emitted:upto]
        self.emitted = upto
        return delta
