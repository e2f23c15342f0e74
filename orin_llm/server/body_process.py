"""A home's body (PUT /v1/environment, YAML or JSON) is read and checked in a process of its own, so
that no body can hold the event loop.

What is slow about a hostile home is Python holding the GIL: PyYAML's constructor (Python even with
libyaml), and pydantic building its errors (a 50 KB JSON home of 9,990 rooms that are not mappings
held the loop 156 ms for 9,990 errors and a 778 KB message; Rust, so it never lets another thread
in). In a thread either would still stall the loop: measured on the 2-core development machine, one
256 KB YAML body parsed in a thread stalled an idle loop 41 ms with libyaml and 54 ms without, more
once the engine runs, and a thread cannot be stopped at a time limit. A process holds no GIL of
ours and can be killed.

The process (`python -m orin_llm.server.body_process`) starts on the first home sent (most robots
never send one: ~35 MB not spent), imports what it needs, says it is ready, then answers one body at
a time: parsed under bodies.py's limits, then checked as a home (environment_from_dict). It sends
back the parsed document, pickled, or the error; the daemon reads the reply with an unpickler that
admits builtins and datetime only, and validates the document again, which for a valid one takes
milliseconds (a home that fails does so in the process, with its message). Callers wait their turn
on a lock, in a thread, so a body whose client goes away is still read to its end and the pipe never
gets out of step. A body not answered within `PARSE_S` gets 413 and the process is killed; the next
body starts a new one. multiprocessing does not fit: a pool cannot kill one task, and a forked child
of a daemon running torch's threads is unsafe.
"""

from __future__ import annotations

import asyncio
import datetime
import io
import json
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, BinaryIO, Optional

from .bodies import PARSE_S, BodyError, load_json, load_yaml

COMMAND = (sys.executable, "-m", "orin_llm.server.body_process")
FRAME = struct.Struct(">I")  # frames both ways: a 4-byte length, then that many bytes
YAML, JSON = b"y", b"j"  # a body's first byte on the pipe: how to parse the rest
READY = b"ready"  # the process's first frame, once it has imported what it needs
START_S = 60.0  # for those imports (a robot's CPU under load starts a Python slowly), not counted in PARSE_S
NICE = 10  # over the daemon's (whose CPUs it shares; the kernel caps it at 19): the engine's steps come first


def died() -> BodyError:  # the process ended on a body: out of memory, or a crash in libyaml
    return BodyError(422, "the body process ended on this body; check it, or send it as JSON")


def not_started() -> BodyError:
    return BodyError(503, f"the body process did not start within {START_S:g} s (the daemon's log says why); "
                          "retry")


class BodyProcess:
    def __init__(self, parse_s: float = PARSE_S, command: tuple[str, ...] = COMMAND):
        self.parse_s, self.command = parse_s, command
        self._proc: Optional[subprocess.Popen] = None
        self._lock = threading.Lock()

    async def environment(self, body: bytes, yaml: bool) -> Any:
        """The body, parsed (YAML or JSON) under bodies.py's limits and valid as a home; else BodyError."""
        return await asyncio.to_thread(self.environment_blocking, body, yaml)

    def environment_blocking(self, body: bytes, yaml: bool) -> Any:
        frame = (YAML if yaml else JSON) + body
        with self._lock:
            for attempt in (1, 2):
                proc = self._running()
                try:
                    assert proc.stdin is not None
                    proc.stdin.write(FRAME.pack(len(frame)) + frame)
                    proc.stdin.flush()
                    break
                except BrokenPipeError:  # it had died since the last body (killed from outside): again, once
                    self._stop()
                    if attempt == 2:
                        raise BodyError(503, "the body process could not be started; retry") from None
            try:
                reply = self._read_frame(proc, time.monotonic() + self.parse_s, self._too_slow, died)
            except BaseException:
                self._stop()  # out of step with its pipe now: a new process for the next body
                raise
        return read_reply(reply)

    def _too_slow(self) -> BodyError:
        return BodyError(413, f"the body took more than {self.parse_s:g} s to read (the limit); send a smaller "
                              "home, or a YAML one as JSON (which parses in milliseconds)")

    def _running(self) -> subprocess.Popen:
        if self._proc is None or self._proc.poll() is not None:
            # stdin and stdout are pipes, stderr the daemon's (a traceback there is ours to see)
            self._proc = subprocess.Popen(self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0,
                                          close_fds=True)
            try:
                ready = self._read_frame(self._proc, time.monotonic() + START_S, not_started, not_started)
            except BaseException:
                self._stop()
                raise
            if ready != READY:
                self._stop()
                raise BodyError(503, f"the body process did not start: it said {ready[:80]!r}")
        return self._proc

    def _read_frame(self, proc: subprocess.Popen, deadline: float, late: Callable[[], BodyError],
                    ended: Callable[[], BodyError]) -> bytes:
        """A frame from the process by `deadline` (else `late()` is raised), unless it ends (`ended()`)."""
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        head = self._read(fd, FRAME.size, deadline, late, ended)
        return self._read(fd, FRAME.unpack(head)[0], deadline, late, ended)

    @staticmethod
    def _read(fd: int, n: int, deadline: float, late: Callable[[], BodyError], ended: Callable[[], BodyError]
              ) -> bytes:
        out = bytearray()
        while len(out) < n:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise late()
            chunk = os.read(fd, n - len(out))
            if not chunk:
                raise ended()
            out += chunk
        return bytes(out)

    def _stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        proc.kill()
        proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()

    def close(self) -> None:
        """Stop the process (the daemon is stopping); a body being read gets its 413 or 422."""
        self._stop()


# -- the daemon's side of a reply --------------------------------------------------------------

SAFE_CLASSES = {("datetime", name) for name in ("date", "datetime", "time", "timedelta", "timezone")}


class ReplyUnpickler(pickle.Unpickler):
    """The process's answers hold what a parsed body can: builtins (which pickle writes with opcodes
    of their own) and YAML's timestamps. Anything else is refused, so that even a process gone wrong
    cannot make the daemon import or call anything."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in SAFE_CLASSES:
            return getattr(datetime, name)
        raise pickle.UnpicklingError(f"the body process sent {module}.{name}, which a body cannot hold")


def read_reply(data: bytes) -> Any:
    """A reply of the process: the document, or BodyError raised."""
    kind, *rest = ReplyUnpickler(io.BytesIO(data)).load()
    if kind == "ok":
        return rest[0]
    raise BodyError(*rest)


# -- the process's side: frames in on stdin, pickled answers out on stdout ------------------------

def read_environment(frame: bytes) -> Any:
    """A home's body as the daemon would take it, or BodyError with the message it would send."""
    from ..errors import OrinError
    from ..planning.home import environment_from_dict

    kind, text = frame[:1], frame[1:].decode("utf-8")  # the daemon sends only UTF-8
    if kind == YAML:
        data = load_yaml(text)
    else:
        try:
            data = load_json(text)
        except json.JSONDecodeError as e:
            raise BodyError(422, f"the body is not valid JSON ({e.msg} at line {e.lineno}, column {e.colno}); "
                                 "a YAML home needs Content-Type: application/yaml") from None
    try:
        environment_from_dict(data, source="environment")
    except OrinError as e:
        raise BodyError(422, str(e)) from None
    return data


def answer(frame: bytes) -> bytes:
    try:
        reply: tuple = ("ok", read_environment(frame))
    except BodyError as e:
        reply = ("error", e.status, e.message)
    except Exception as e:  # what a parser raised that it should not have: still an answer
        reply = ("error", 422, f"the body cannot be read ({type(e).__name__}: {e})")
    return pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL)


def read_frame(stream: BinaryIO) -> bytes:
    head = stream.read(FRAME.size)
    if len(head) < FRAME.size:
        raise EOFError
    (n,) = FRAME.unpack(head)
    data = stream.read(n)
    if len(data) < n:
        raise EOFError
    return data


def write_frame(stream: BinaryIO, data: bytes) -> None:
    stream.write(FRAME.pack(len(data)) + data)
    stream.flush()


def serve(stdin: BinaryIO, stdout: BinaryIO) -> None:
    """READY, then one body at a time until stdin closes (the daemon stopped, or gave up on a body and
    killed us)."""
    write_frame(stdout, READY)
    while True:
        try:
            frame = read_frame(stdin)
        except EOFError:
            return
        write_frame(stdout, answer(frame))


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C on a daemon in a terminal: the daemon stops us
    from ..planning import home  # noqa: F401  imported before READY, so that no body's time pays for it

    os.nice(NICE)  # after the imports (made at the daemon's priority, once), before any body
    serve(sys.stdin.buffer, sys.stdout.buffer)


if __name__ == "__main__":
    main()
