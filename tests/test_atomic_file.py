"""A write killed at any point leaves the old file or the new one, whole (orin_llm/atomic_file.py).

Each case forks a child that writes and SIGKILLs itself at one point of the write: before it
starts, with the temporary file just made, half written, written but not fsynced, fsynced but not
renamed, renamed but the directory not fsynced, and not at all. The parent then does what the next
start does (clear_stale) and reads the file. (A SIGKILL loses nothing the kernel already holds, so
what happens after the rename is seen; what a power loss would lose, the two fsyncs keep.)
"""

from __future__ import annotations

import os
import signal
import types
from collections.abc import Callable
from pathlib import Path

import pytest

from orin_llm import atomic_file
from orin_llm.atomic_file import atomic_write, clear_stale

POINTS = ("before the temporary file", "temporary file made", "half written", "written, not fsynced",
          "fsynced, not renamed", "renamed, directory not fsynced", "not killed")
RENAMED = POINTS.index("renamed, directory not fsynced")  # from here on the new content is the file


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class _HalfFile:
    """A file that writes half of what it is given, hands it to the kernel, and dies."""

    def __init__(self, f):
        self.f = f

    def write(self, text: str) -> None:
        self.f.write(text[:len(text) // 2])
        self.f.flush()
        die()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.f.close()


def _kill_at(point: str) -> None:
    """In the child: make atomic_file's next write die at `point`."""
    real_os, real_mkstemp = os, atomic_file.tempfile.mkstemp
    fsyncs = []

    def mkstemp(*args, **kw):
        if point == POINTS[0]:
            die()
        out = real_mkstemp(*args, **kw)
        if point == POINTS[1]:
            die()
        return out

    def fdopen(fd, *args, **kw):
        f = real_os.fdopen(fd, *args, **kw)
        return _HalfFile(f) if point == POINTS[2] else f

    def fsync(fd):
        fsyncs.append(fd)
        if (point == POINTS[3] and len(fsyncs) == 1) or (point == POINTS[5] and len(fsyncs) == 2):
            die()
        real_os.fsync(fd)

    def replace(src, dst):
        if point == POINTS[4]:
            die()
        real_os.replace(src, dst)

    proxy = types.SimpleNamespace(**{n: getattr(real_os, n) for n in dir(real_os) if not n.startswith("__")})
    proxy.fdopen, proxy.fsync, proxy.replace = fdopen, fsync, replace
    atomic_file.os = proxy  # the child's copy of the module only
    atomic_file.tempfile = types.SimpleNamespace(mkstemp=mkstemp)


def killed_at(point: str, write: Callable[[], None]) -> bool:
    """Run `write` in a forked child that dies at `point` of its (first) atomic write; True if it was
    killed (False: it finished)."""
    pid = os.fork()
    if pid == 0:  # the child: nothing of pytest's may run here, whatever happens
        code = 0
        try:
            _kill_at(point)
            write()
        except BaseException:
            code = 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.WIFEXITED(status):
        assert os.WEXITSTATUS(status) == 0, f"the writer failed at {point!r}"
        return False
    assert os.WTERMSIG(status) == signal.SIGKILL
    return True


@pytest.mark.parametrize("point", POINTS)
def test_a_write_killed_at_any_point_leaves_the_old_or_the_new_file_whole(tmp_path, point):
    path = tmp_path / "home.json"
    old, new = '{"v": "old"}' + " " * 5000, '{"v": "new"}' + "x" * 9000  # several pages, of other sizes
    atomic_write(path, old)
    assert killed_at(point, lambda: atomic_write(path, new)) == (point != "not killed")
    clear_stale(tmp_path)  # what the next start does
    assert path.read_text() == (new if POINTS.index(point) >= RENAMED else old)
    assert [p.name for p in tmp_path.iterdir()] == ["home.json"]  # no temporary file left


def test_a_first_write_killed_before_its_rename_leaves_no_file(tmp_path):
    path = tmp_path / "new.json"
    assert killed_at("fsynced, not renamed", lambda: atomic_write(path, "{}"))
    assert [p.name for p in tmp_path.iterdir()] != []  # the temporary file is there ...
    assert clear_stale(tmp_path) == 1 and list(tmp_path.iterdir()) == []  # ... until the next start


def test_clear_stale_removes_only_temporary_files_of_the_names_given(tmp_path: Path):
    for name in ("lookup-a.json", ".lookup-a.json.x1", ".named-b.json.x2", "named-b.json"):
        (tmp_path / name).write_text("{}")
    assert clear_stale(tmp_path, "lookup-*") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == [".named-b.json.x2", "lookup-a.json", "named-b.json"]
