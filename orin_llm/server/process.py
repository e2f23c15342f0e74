"""A planning daemon in a child process, for as long as a `with` block lasts: what `orin-llm demo`
and the daemon benchmark use (the tests have their own, with more knobs). Its state directory is
its own, removed with it, unless `extra` names one: a benchmark must not draft from the histories,
nor plan in the homes, that an earlier run left in the user's."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ..client import PlannerClient, PlannerError
from ..errors import OrinError


class DaemonProcess:
    """`python -m orin_llm.server.daemon` on a private socket, for as long as the `with` lasts."""

    def __init__(self, engine_dir: Path, env: dict | None = None, extra: tuple[str, ...] = (), ready_s: float = 180):
        self.ready_s = ready_s  # load + the home's prefill: seconds for the embedded model, minutes for a 3B
        self.dir = Path(tempfile.mkdtemp(prefix="orin-llm-", dir="/tmp"))  # short: sockets have a 108-byte path
        self.socket = self.dir / "planner.sock"
        self.log = open(self.dir / "daemon.log", "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "orin_llm.server.daemon", "--engine", str(engine_dir),
                                      "--socket", str(self.socket), "--log-level", "warning",
                                      *(() if "--state-dir" in extra else ("--state-dir", str(self.dir / "state"))),
                                      *extra],
                                     stdout=self.log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})

    def __enter__(self) -> DaemonProcess:
        try:
            self._wait_ready()
        except BaseException:
            self.__exit__()  # a failed start must not leave a daemon behind
            raise
        return self

    def _wait_ready(self) -> None:
        try:
            with PlannerClient(self.socket, timeout_s=30) as c:
                c.wait_ready(self.ready_s, alive=lambda: self.proc.poll() is None)
        except PlannerError as e:
            if self.proc.poll() is not None:
                raise OrinError(f"the daemon exited ({self.proc.returncode}); see {self.dir / 'daemon.log'}") from None
            raise OrinError(f"the daemon did not become ready within {self.ready_s:g} s: {e}") from None

    def __exit__(self, exc_type=None, *exc) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()
        if exc_type is None:  # its log and state go with it; after a failure they stay for the error to name
            shutil.rmtree(self.dir, ignore_errors=True)


