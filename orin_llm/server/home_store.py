"""The homes a daemon was sent, kept in its state directory and pinned again when it starts.

What is kept, one JSON file each in `<state dir>/homes/`:

- a named home (PUT /v1/environments/NAME): its environment, its version (so an ETag taken before
  a restart still names the same content) and the state the robot reported (`named-NAME.json`);
- the default home's reported state (`default.json`), for the environment it was reported in. The
  default home itself is the operator's `--environment` file, read again at every start: after a
  PUT of the default home, or with another file, the saved state is for another home, and is
  dropped (reported) rather than applied.

Files are written atomically (orin_llm/atomic_file.py), so a daemon killed at any moment leaves each
one old or new, never cut. The worker calls `save` after a PUT or DELETE of a home (its answer then
means the file is on disk), once it has been idle for `--save-idle-s`, every few seconds while busy,
and when it stops (SIGTERM). At start, `restore` pins every file's home; one that cannot come back
(unreadable, another format, a home that no longer validates, a pin that no longer fits) is logged
and listed in /health's `persistence.homes_skipped` with why, and never stops the others or the daemon.
An unreadable file is renamed to `*.unreadable` (kept for a look, reported once).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Optional

from ..atomic_file import atomic_write, clear_stale, fsync_dir
from ..errors import OrinError
from ..planning.home import environment_from_dict, state_from_dict, version_key

log = logging.getLogger("orin_llm.server")

FORMAT = 1
DEFAULT_FILE = "default.json"
NAMED_PREFIX = "named-"


class Unreadable(ValueError):
    """A home file that is not one this daemon wrote (cut, edited, another format)."""


def file_name(name: Optional[str]) -> str:
    """The file of home `name` (None: the default one). Names are letters, digits and . _ : - (the
    route refuses others), so they are file names as they are."""
    return DEFAULT_FILE if name is None else f"{NAMED_PREFIX}{name}.json"


def record(name: Optional[str], home) -> Optional[dict]:
    """What is kept of a planner's Home; None: nothing to keep (a default home with no reported state)."""
    env = home.prefix.environment
    state = home.state.model_dump(mode="json") if home.state is not None else None
    if name is None:
        return None if state is None else {"format": FORMAT, "name": None, "environment_key": version_key(env),
                                           "state": state}
    return {"format": FORMAT, "name": name, "version": home.prefix.version,
            "environment": env.model_dump(mode="json", exclude_none=True), "state": state}


def dumps(data: dict) -> str:
    return json.dumps(data, ensure_ascii=False, sort_keys=True, indent=1) + "\n"


class HomeStore:
    """The homes' files in `directory` (None: nothing is kept)."""

    def __init__(self, directory: Optional[Path]):
        self.directory = directory
        self.restored: list[dict] = []  # {"environment": name or "default", "version", "state": bool}
        self.skipped: list[dict] = []  # {"file", "why"}
        self._written: dict[str, str] = {}  # file name -> the text on disk (what save compares against)
        if directory is not None:
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            clear_stale(directory)  # writes a killed daemon never finished

    def report(self) -> dict:
        return {"homes_restored": list(self.restored), "homes_skipped": list(self.skipped)}

    # ------------------------------------------------------------------ at start

    def restore(self, planner) -> None:
        """Pin the kept named homes with their state, and the default home's state (planner: its
        default home already pinned from --environment). Never raises for a file."""
        if self.directory is None:
            return
        for path in sorted(self.directory.glob(f"{NAMED_PREFIX}*.json")):
            self._restore(planner, path, named=True)
        if (self.directory / DEFAULT_FILE).is_file():
            self._restore(planner, self.directory / DEFAULT_FILE, named=False)
        if self.restored or self.skipped:
            log.info("homes restored from %s: %s; skipped: %s", self.directory,
                     ", ".join(h["environment"] for h in self.restored) or "none",
                     "; ".join(f"{s['file']} ({s['why']})" for s in self.skipped) or "none")

    def _restore(self, planner, path: Path, named: bool) -> None:
        try:
            data = self._read(path, named)
        except OSError as e:  # the disk's, perhaps passing: the file stays for the next start
            return self._skip(path, f"cannot read it: {e.strerror or e}")
        except (Unreadable, OrinError) as e:
            return self._skip(path, str(e), aside=True)
        name = data["name"]
        try:
            if named:
                env = data["environment"]
                planner.set_environment(env, name, version=data["version"])
            else:  # the default home is --environment's: the state only, if it was reported in this home
                env = planner.home(None).prefix.environment
                if data["environment_key"] != version_key(env):
                    path.unlink(missing_ok=True)
                    return self._skip(path, "its state was reported in another default home (one PUT since, or "
                                            "another --environment): plans start from the home's own state")
        except OrinError as e:  # a pin that no longer fits, a grammar this engine cannot compile
            return self._skip(path, f"cannot pin it: {e}")
        except Exception as e:  # a bug: say so; the daemon serves the others
            log.exception("restoring %s failed", path)
            return self._skip(path, f"internal error: {type(e).__name__}: {e}")
        restored: dict[str, Any] = {"environment": name or "default", "version": planner.home(name).prefix.version,
                                    "state": False}
        if data["state"] is not None:
            try:
                planner.set_state(data["state"], name, run=True)
                restored["state"] = True
            except Exception as e:  # the home is back; its state is not
                restored["state_skipped"] = f"{type(e).__name__}: {e}" if not isinstance(e, OrinError) else str(e)
                log.warning("%s: the home is back, its state is not: %s", path, restored["state_skipped"])
        self.restored.append(restored)
        kept = record(name, planner.home(name))
        self._written[path.name] = dumps(kept) if kept is not None else ""

    def _read(self, path: Path, named: bool) -> dict:
        """The file's record, checked and with its environment and state validated; Unreadable (or
        OrinError from the validation) saying what is wrong."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise Unreadable(f"not JSON ({e})") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise Unreadable(f"not a format-{FORMAT} home file")
        name = data.get("name")
        if named and (not isinstance(name, str) or file_name(name) != path.name):
            raise Unreadable(f"it holds the home {name!r}, not the one its name says")
        if not named and name is not None:
            raise Unreadable("it is not the default home's")
        if named:
            version = data.get("version")
            if not isinstance(version, int) or isinstance(version, bool) or version < 1:
                raise Unreadable(f"version {version!r} is not a positive whole number")
            data["environment"] = environment_from_dict(data.get("environment"), source="its environment")
        elif not isinstance(data.get("environment_key"), str):
            raise Unreadable("it does not say which home its state is for")
        if data.get("state") is not None:
            env = data["environment"] if named else None
            data["state"] = state_from_dict(data["state"], env, source="its state")
        else:
            data["state"] = None
        return data

    def _skip(self, path: Path, why: str, aside: bool = False) -> None:
        if aside:  # kept for a look, not read (nor reported) again
            try:
                path.replace(path.with_name(path.name + ".unreadable"))
                why += f" (kept as {path.name}.unreadable)"
            except OSError:
                pass
        log.warning("home file %s skipped: %s", path, why)
        self.skipped.append({"file": str(path), "why": why})

    # ------------------------------------------------------------------ while serving

    def save(self, planner) -> int:
        """Write the homes whose kept record changed, remove those of homes that are gone; returns
        how many files changed. OSError (a full disk): the caller logs it, the planner goes on."""
        if self.directory is None:
            return 0
        want = {}
        for name, home in planner.homes.items():
            kept = record(name, home)
            if kept is not None:
                want[file_name(name)] = dumps(kept)
        changed = 0
        for name, text in want.items():
            if self._written.get(name) != text:
                atomic_write(self.directory / name, text)
                self._written[name] = text
                changed += 1
        gone = [name for name in self._written if name not in want]
        for name in gone:
            (self.directory / name).unlink(missing_ok=True)
            del self._written[name]
        if gone:
            fsync_dir(self.directory)  # the removal survives a power loss too
        return changed + len(gone)

