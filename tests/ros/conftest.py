"""Real ROS 2 for the tests: the project's planner node and a client (tests/ros/harness.py), each a
process of the ROS venv (`make ros`: rclpy from the PyPI wheels, the interfaces built by rosidl),
against a real daemon of the main venv. ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST and a random
ROS_DOMAIN_ID keep each test session's graph to itself.

Without the ROS venv these tests fail (never skip), saying why and what to run.
"""

from __future__ import annotations

import json
import os
import queue
import random
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Optional

import pytest

ROOT = Path(__file__).resolve().parents[2]
ROS_VENV = Path(os.environ.get("ORIN_LLM_ROS_VENV", ROOT / ".venv-ros"))
NODE_SOURCE = ROOT / "jetson" / "ros2" / "orin_llm_ros"
INTERFACES = ROOT / "jetson" / "ros2" / "orin_llm_interfaces"
HARNESS = Path(__file__).with_name("harness.py")
SETUP_LOG = ROOT / "build" / "ros-setup.log"  # written by `make ros`


def ros_python() -> Path:
    """The ROS venv's python, or a failure that says why it is not usable."""
    stamp = ROS_VENV / ".ros-installed"
    if not stamp.is_file():
        log = SETUP_LOG.read_text(errors="replace")[-4000:] if SETUP_LOG.is_file() else "(no log)"
        pytest.fail(f"no ROS 2 venv at {ROS_VENV}: run `make ros` (jetson/ros2/pypi_venv.sh installs the "
                    f"ROS 2 wheels and builds the interfaces). Its last output, {SETUP_LOG}:\n{log}")
    stale = [p for p in INTERFACES.rglob("*") if p.is_file() and p.stat().st_mtime > stamp.stat().st_mtime]
    if stale:
        pytest.fail(f"the ROS venv's interfaces are older than {stale[0].relative_to(ROOT)}: run `make ros`")
    return ROS_VENV / "bin" / "python"


def ros_env(domain: int) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYTHONPATH", "_ROS_WHEELS_BOOTSTRAP_COMPLETE", "LD_LIBRARY_PATH",
                        "ORIN_LLM_SOCKET")}
    # the node from this checkout's source, over the copy `make ros` installed
    env.update(ROS_DOMAIN_ID=str(domain), ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST", PYTHONUNBUFFERED="1",
               PYTHONPATH=str(NODE_SOURCE), RCUTILS_LOGGING_BUFFERED_STREAM="0")
    return env


class Proc:
    """A ROS venv process with its output in a log file; stop() ends it and its group."""

    def __init__(self, args: list[str], env: dict, log: Path, stdin: bool = False):
        self.log_path = log
        self._log = open(log, "wb")
        self.proc = subprocess.Popen(args, env=env, cwd=ROOT, stdout=subprocess.PIPE if stdin else self._log,
                                     stderr=self._log, stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                                     start_new_session=True)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._log.close()


class Client(Proc):
    """tests/ros/harness.py: ask(op, ...) -> its JSON answer (AssertionError with the log on failure)."""

    def __init__(self, python: Path, env: dict, log: Path, action: str, feedback_depth: int = 100):
        super().__init__([str(python), str(HARNESS), action, str(feedback_depth)], env, log, stdin=True)
        self._lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        first = self._next(60)
        assert first == {"ready": True}, first

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def _next(self, timeout: float) -> dict:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"the ROS client did not answer in {timeout} s:\n{self.log()[-3000:]}") from None
        if line is None:
            raise AssertionError(f"the ROS client exited {self.proc.poll()}:\n{self.log()[-3000:]}")
        return json.loads(line)

    def ask(self, op: str, check: bool = True, **args) -> dict:
        self.proc.stdin.write((json.dumps({"op": op, **args}) + "\n").encode())
        self.proc.stdin.flush()
        answer = self._next(args.get("timeout", 60) + 30)
        if check and not answer.get("ok"):
            raise AssertionError(f"{op}: {answer.get('error')}")
        return answer


class Ros:
    """One test graph: its own domain, a namespace per node."""

    def __init__(self, tmp: Path):
        self.python = ros_python()
        self.domain = random.randint(1, 101)
        self.env = ros_env(self.domain)
        self.tmp = tmp
        self.procs: list[Proc] = []

    def node(self, namespace: str, socket: Path, **params) -> Proc:
        args = [str(self.python), "-m", "orin_llm_ros.planner_node", "--ros-args", "-r", f"__ns:=/{namespace}",
                "-p", f"socket_path:={socket}"]
        for name, value in params.items():
            args += ["-p", f"{name}:={json.dumps(value)}"]
        proc = Proc(args, self.env, self.tmp / f"node-{namespace}.log")
        self.procs.append(proc)
        return proc

    def client(self, namespace: str, feedback_depth: int = 100) -> Client:
        c = Client(self.python, self.env, self.tmp / f"client-{namespace}-{len(self.procs)}.log",
                   f"/{namespace}/plan", feedback_depth)
        self.procs.append(c)
        return c

    def stop(self) -> None:
        for p in reversed(self.procs):
            p.stop()


@pytest.fixture(scope="module")
def ros(tmp_path_factory):
    graph = Ros(tmp_path_factory.mktemp("ros"))
    yield graph
    graph.stop()


def metric(text: str, name: str, labels: Optional[str] = None) -> float:
    """A value of the daemon's /metrics text (0 when absent)."""
    import re

    key = re.escape(name + (f"{{{labels}}}" if labels else ""))
    m = re.search(rf"^{key} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def wait_until(predicate, timeout_s: float = 20) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return False
