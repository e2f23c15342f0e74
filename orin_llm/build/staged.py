"""A build's engine directory, written beside where it goes and renamed there at the end."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def staged(out: Path) -> Iterator[Path]:
    """A temp dir beside `out` to write an engine into, renamed to `out` (replacing it) when the block
    ends without an error and removed otherwise: a failed build never leaves a half-engine where a
    good one is expected."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    tmp.chmod(0o755)  # mkdtemp makes it 0700; an engine is read by the daemon's user too
    try:
        yield tmp
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
