"""A policy runner in a child process, for as long as a `with` block lasts: what the co-run
benchmark uses, so that the policy and the planner are separate processes as on a robot."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

from ..errors import OrinError


class PolicyProcess:
    """`python -m orin_llm.policy.runner` ticking until stop(); its ticks and memory come back as a dict."""

    def __init__(self, onnx: Path, rate_hz: float, workdir: Path, args: tuple[str, ...] = (),
                 ready_timeout_s: float = 900):  # a first TensorRT build of a large policy takes minutes
        workdir.mkdir(parents=True, exist_ok=True)
        self.ticks_path = workdir / "ticks.json"
        self.measurement_path = workdir / "policy-measurement.json"
        self.log_path = workdir / "runner.log"
        self.ready_timeout_s = ready_timeout_s
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "orin_llm.policy.runner", "--onnx", str(onnx), "--rate-hz", str(rate_hz),
             "--ticks-out", str(self.ticks_path), "--measurement-out", str(self.measurement_path), *args],
            stdout=subprocess.PIPE, stderr=self._log, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.info: dict = {}
        self.result: Optional[dict] = None

    def __enter__(self) -> PolicyProcess:
        try:
            self.info = self._wait_ready()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _wait_ready(self) -> dict:
        assert self.proc.stdout is not None
        end = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < end:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.5)
            if ready:
                line = self.proc.stdout.readline()
                if line:
                    return json.loads(line)
            if self.proc.poll() is not None:
                raise OrinError(f"the policy runner exited ({self.proc.returncode}): "
                                f"{self.log_path.read_text(errors='replace').strip()[-600:]}")
        raise OrinError(f"the policy runner was not ready within {self.ready_timeout_s:.0f} s; see {self.log_path}")

    def stop(self) -> dict:
        """SIGTERM (the tick in flight finishes), then the ticks and memory it wrote."""
        if self.result is None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            if self.proc.returncode != 0 or not self.ticks_path.is_file():
                raise OrinError(f"the policy runner failed ({self.proc.returncode}): "
                                f"{self.log_path.read_text(errors='replace').strip()[-600:]}")
            self.result = json.loads(self.ticks_path.read_text())
        return self.result

    def __exit__(self, *exc) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._log.close()
