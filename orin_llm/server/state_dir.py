"""The daemon's state directory: what it keeps across restarts, and who may use it.

`--state-dir` (default: systemd's $STATE_DIRECTORY, else $XDG_STATE_HOME/orin-llm, else
~/.local/state/orin-llm; `none`: nothing is kept; server/config.py) holds

    lookup/ENGINE/lookup-*.json   the lookup drafter's histories (runtime/history_store.py)
    homes/named-NAME.json         the named homes and their state (home_store.py)
    homes/default.json            the default home's reported state
    lock                          held (flock) by the daemon using the directory, with its pid

One daemon per directory: two would overwrite each other's files. A second daemon on a directory
it was given (`--state-dir DIR`) is refused before it serves, as one that cannot create or write
it; on the default one it serves without keeping anything and says so (log, /health), since
nobody asked it to keep state there.
"""

from __future__ import annotations

import fcntl
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..errors import OrinError
from .config import DaemonConfig, flag
from .home_store import HomeStore

log = logging.getLogger("orin_llm.server")

NOTHING_KEPT = ("nothing is kept: after a restart the lookup histories start from the engine's seed plans, and "
                "the named homes and the homes' reported state are gone: PUT and PATCH them again")


@dataclass
class StateDir:
    path: Optional[Path]  # None: nothing is kept (why_off says why)
    why_off: str = ""
    homes: HomeStore = field(default_factory=lambda: HomeStore(None))
    histories: Optional[Path] = None  # where the lookup histories persist (set once the engine loaded)
    lock_fd: Optional[int] = None  # held for the life of the process: the kernel releases it at exit

    def report(self) -> dict:
        """/health's `persistence`: where it is kept, what came back at start, and what did not."""
        if self.path is None:
            return {"dir": None, "kept": False, "why": self.why_off}
        return {"dir": str(self.path), "kept": True,
                "histories": str(self.histories) if self.histories is not None else None, **self.homes.report()}


def open_state_dir(config: DaemonConfig) -> StateDir:
    """The config's state directory, created and locked; OrinError for one given with --state-dir that
    cannot be used (before the daemon serves: exit 2)."""
    path = config.state_path
    if path is None:
        return StateDir(None, f"{flag('state_dir')} none: {NOTHING_KEPT}")
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = lock(path / "lock")
        homes = HomeStore(path / "homes")
    except (OSError, InUse) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        if config.state_dir_given:
            raise OrinError(f"{flag('state_dir')} {path}: {why}; give another directory, or "
                            f"{flag('state_dir')} none to keep nothing") from None
        log.warning("the state directory %s cannot be used (%s): %s", path, why, NOTHING_KEPT)
        return StateDir(None, f"the default state directory {path} cannot be used ({why}): {NOTHING_KEPT}")
    log.info("state kept in %s", path)
    return StateDir(path, homes=homes, lock_fd=fd)


class InUse(Exception):
    pass


def lock(path: Path) -> int:
    """An open, exclusively flock-ed `path` holding our pid; InUse naming the holder's pid."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 32).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise InUse(f"another daemon (pid {holder}) keeps its state there") from None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd
