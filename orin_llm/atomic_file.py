"""Files a daemon killed at any moment (SIGKILL, power loss) finds whole: the old content or the new.

`atomic_write` writes a temporary file in the same directory (`.NAME.` + random), flushes and
fsyncs it, renames it over NAME (atomic on POSIX within one file system) and fsyncs the directory
so the rename itself is durable. A kill before the rename leaves NAME as it was, plus the
temporary file; `clear_stale` removes those at the next start. What the daemon keeps this way: the
lookup histories (runtime/history_store.py) and the homes (server/home_store.py).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def atomic_write(path: Path, text: str) -> None:
    """Write `text` to `path` so that a reader finds either the old file or the new one, whole."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)  # the rename itself survives a power loss


def fsync_dir(directory: Path) -> None:
    """Make the directory's entries durable: a rename or a removal in it survives a power loss."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def clear_stale(directory: Path, name_glob: str = "*") -> int:
    """Remove the temporary files that writes killed before their rename left in `directory` (those
    of files matching `name_glob`); returns how many."""
    stale = list(directory.glob(f".{name_glob}.*"))
    for path in stale:
        path.unlink(missing_ok=True)
    return len(stale)
