"""YAML bodies are parsed in a process of their own, so that no body can hold the event loop.

Why a process and not a thread: PyYAML's constructor is Python (and without libyaml all of it is),
so in a thread it holds the GIL in 5 ms slices, and the event loop waits for a slice at each turn.
Measured on the 2-core development machine with one 256 KB body of small scalars in a thread:
/health's loop stalled up to 41 ms with libyaml and 54 ms without, on an idle machine; with the
engine's threads and a second body beside it, over the 100 ms the daemon promises. A process holds
no GIL of ours, and a body that takes too long is ended by killing it (a thread cannot be stopped).

One process, started on the first YAML body (most robots send JSON or never PUT a home: ~12 MB
not spent), answers one body at a time (bodies.serve); callers wait their turn on a lock, in a thread,
so a body whose client goes away is still read to its end and the pipe never gets out of step. A
body not answered within `PARSE_S` gets 413 and the process is killed; the next body starts a new one.
"""

from __future__ import annotations

import asyncio
import logging
import os
import select
import subprocess
import sys
import threading
import time
from typing import Any, Optional

from .bodies import FRAME, PARSE_S, BodyError, read_reply

log = logging.getLogger("orin_llm.server")
COMMAND = (sys.executable, "-m", "orin_llm.server.bodies")


class YamlProcess:
    def __init__(self, parse_s: float = PARSE_S, command: tuple[str, ...] = COMMAND):
        self.parse_s, self.command = parse_s, command
        self._proc: Optional[subprocess.Popen] = None
        self._lock = threading.Lock()

    async def parse(self, body: bytes) -> Any:
        """The body as yaml.safe_load reads it, under bodies.py's limits; BodyError says why not."""
        return await asyncio.to_thread(self.parse_blocking, body)

    def parse_blocking(self, body: bytes) -> Any:
        with self._lock:
            for attempt in (1, 2):
                proc = self._running()
                try:
                    assert proc.stdin is not None
                    proc.stdin.write(FRAME.pack(len(body)) + body)
                    proc.stdin.flush()
                    break
                except BrokenPipeError:  # it had died since the last body (killed from outside): again, once
                    self._stop()
                    if attempt == 2:
                        raise BodyError(503, "the YAML parser process could not be started; send the home as "
                                             "JSON, or retry") from None
            try:
                reply = self._read_reply(proc, time.monotonic() + self.parse_s)
            except BaseException:
                self._stop()  # out of step with its pipe now: a new process for the next body
                raise
        return read_reply(reply)

    def _running(self) -> subprocess.Popen:
        if self._proc is None or self._proc.poll() is not None:
            # stdin and stdout are pipes, stderr the daemon's (a traceback there is ours to see)
            self._proc = subprocess.Popen(self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0,
                                          close_fds=True)
        return self._proc

    def _read_reply(self, proc: subprocess.Popen, deadline: float) -> bytes:
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        head = self._read(fd, FRAME.size, deadline)
        return self._read(fd, FRAME.unpack(head)[0], deadline)

    def _read(self, fd: int, n: int, deadline: float) -> bytes:
        out = bytearray()
        while len(out) < n:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise BodyError(413, f"the YAML body took more than {self.parse_s:g} s to parse (the limit); "
                                     "send a smaller home, or the same home as JSON (which parses in "
                                     "milliseconds)")
            chunk = os.read(fd, n - len(out))
            if not chunk:  # it died on this body (out of memory, a crash in libyaml)
                raise BodyError(422, "the YAML parser process ended on this body; send the home as JSON")
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
        """Stop the process (the daemon is stopping); a body being parsed gets its 413 or 422."""
        self._stop()
