"""Progress lines for long work, on stderr so stdout stays machine-readable."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager


class Steps:
    def __init__(self, total: int, quiet: bool = False):
        self.total, self.n, self.quiet = total, 0, quiet

    @contextmanager
    def step(self, what: str) -> Iterator[None]:
        self.n += 1
        t0 = time.perf_counter()
        if not self.quiet:
            print(f"[{self.n}/{self.total}] {what} ...", file=sys.stderr, flush=True)
        yield
        if not self.quiet:
            print(f"[{self.n}/{self.total}] {what}: done in {time.perf_counter() - t0:.1f}s",
                  file=sys.stderr, flush=True)
