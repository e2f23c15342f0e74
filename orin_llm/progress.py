"""Progress lines for long work, on stderr so stdout stays machine-readable."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def announced(what: str, quiet: bool = False) -> Iterator[None]:
    """`what ...` before long work that says nothing itself (loading an engine: seconds), and
    `what: done in 7.9s` once it is done; nothing more when it fails (its error says why)."""
    t0 = time.perf_counter()
    if not quiet:
        print(f"{what} ...", file=sys.stderr, flush=True)
    yield
    if not quiet:
        print(f"{what}: done in {time.perf_counter() - t0:.1f}s", file=sys.stderr, flush=True)


class Steps:
    def __init__(self, total: int, quiet: bool = False):
        self.total, self.n, self.quiet = total, 0, quiet

    @contextmanager
    def step(self, what: str) -> Iterator[None]:
        self.n += 1
        with announced(f"[{self.n}/{self.total}] {what}", self.quiet):
            yield


class Counter:
    """Progress through the items of one long step, with an estimate of the time left from the rate
    measured so far (items done / seconds spent). On a terminal one line is rewritten after every
    item; in a log a line is written at most every `every_s` seconds, and at the end."""

    def __init__(self, what: str, total: int, unit: str = "items", quiet: bool = False, every_s: float = 5.0):
        self.what, self.total, self.unit, self.quiet, self.every_s = what, total, unit, quiet, every_s
        self.done = 0
        self.t0 = time.perf_counter()
        self._last = -float("inf")
        self._tty = sys.stderr.isatty()

    def line(self) -> str:
        spent = time.perf_counter() - self.t0
        text = f"      {self.what}: {self.done}/{self.total} {self.unit}, {spent:.1f}s"
        if 0 < self.done < self.total:
            text += f", about {spent / self.done * (self.total - self.done):.0f}s left"
        return text

    def advance(self, n: int = 1) -> None:
        self.done += n
        if self.quiet:
            return
        now = time.perf_counter()
        end = self.done >= self.total
        if self._tty:
            print("\r\033[K" + self.line(), end="\n" if end else "", file=sys.stderr, flush=True)
        elif end or now - self._last >= self.every_s:
            print(self.line(), file=sys.stderr, flush=True)
            self._last = now
