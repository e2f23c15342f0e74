"""A site server on loopback for the fleet benchmark: real vLLM CPU replicas (`make vllm`'s .venv-vllm)
serving the engine's Hugging Face export, and vLLM's router in front of them. The same commands as
jetson/GUIDE.md's "Site server" section; tests/backends/remote/vllm_replica.py starts them the same way."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Optional

from ..errors import OrinError

ROOT = Path(__file__).resolve().parents[2]
# the engine's target/ holds what vLLM must not load (our Q4_1 blocks and INT8 KV scales)
MODEL_FILES = ("config.json", "generation_config.json", "model.safetensors")
# a replica's flags but its dtype (dtype()) and --enable-scale-out (without it the router's token requests get
# 403 and all goes to the first replica)
SERVE_FLAGS = ("--max-model-len", "2048", "--enforce-eager", "--enable-prefix-caching",
               "--enable-prompt-tokens-details")
ROUTING_METRICS = ("vllm_router_policy_decisions", "vllm_router_prefix_routing", "vllm_router_kv_",
                   "vllm_router_cache_", "vllm_router_processed")  # the router's samples about where it sent what
BLOCK_SIZE = 128  # vLLM's CPU backend's default KV block (vllm/platforms/cpu.py): what its prefix cache reuses


def dtype(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The replicas' --dtype: bfloat16 where the CPU has bf16 instructions (x86 AVX-512 BF16 or AMX, ARM's
    BF16 extension), else float32: elsewhere vLLM's CPU build emulates bf16, and a plan's prompt then takes
    several times longer than the daemons' hedging budgets, so the robots' engines answer everything."""
    try:
        words = set(cpuinfo.read_text(errors="replace").split())
    except OSError:
        return "float32"
    return "bfloat16" if words & {"avx512_bf16", "amx_bf16", "bf16"} else "float32"


def flags(scale_out: bool = True) -> tuple[str, ...]:
    """A replica's serving flags (the GUIDE's "Site server" command, with this CPU's dtype)."""
    return ("--dtype", dtype(), *SERVE_FLAGS, *(("--enable-scale-out",) if scale_out else ()))


def vllm_venv() -> Path:
    return Path(os.environ.get("ORIN_LLM_VLLM_VENV", ROOT / ".venv-vllm"))


def missing() -> Optional[str]:
    """Why no site server can start here (None: it can)."""
    venv = vllm_venv()
    for path in (venv / "bin" / "python", venv / "bin" / "vllm-router"):
        if not path.exists():
            return (f"no {path} (install vLLM's CPU build and its router with `make vllm`, or point "
                    "ORIN_LLM_VLLM_VENV at a venv that has them)")
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def model_dir(engine_dir: Path, out: Path) -> Path:
    """The engine's Hugging Face export and tokenizer, as vLLM loads them (links, no copies)."""
    out.mkdir(parents=True, exist_ok=True)
    engine_dir = engine_dir.resolve()  # the links must hold from anywhere (`--engine engines/...` is relative)
    for name in MODEL_FILES:
        (out / name).symlink_to(engine_dir / "target" / name)
    for f in (engine_dir / "tokenizer").iterdir():
        if not (out / f.name).exists():
            (out / f.name).symlink_to(f)
    return out


def _get(url: str, timeout_s: float = 10) -> str:
    with urllib.request.urlopen(url, timeout=timeout_s) as r:
        return r.read().decode()


class _Process:
    """A child in its own process group (vLLM forks its engine core: signals go to the group)."""

    name = "process"

    def __init__(self, argv: list[str], log: Path, env: Optional[dict] = None):
        self.log_path, self._log = log, open(log, "wb")
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True,
                                     env={**os.environ, **(env or {})})

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]

    def wait_ready(self, path: str, timeout_s: float) -> None:
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise OrinError(f"{self.name} exited {self.proc.returncode}; its log ({self.log_path}):\n"
                                f"{self.log_tail()}")
            try:
                _get(self.url + path, timeout_s=2)
                return
            except OSError:
                time.sleep(0.5)
        self.stop()
        raise OrinError(f"{self.name} not ready after {timeout_s:g} s; its log ({self.log_path}):\n{self.log_tail()}")

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.signal(signal.SIGKILL)
                self.proc.wait()
        try:  # what a killed engine core left in the group
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self._log.close()


class Replica(_Process):
    """`python -m vllm.entrypoints.openai.api_server` on loopback (the `vllm` command fails on the CPU
    package's name). `kv_events_port` makes it publish its KV cache events (ZMQ) for kv_aware routing;
    dev mode opens POST /reset_prefix_cache, which the benchmark calls between policies."""

    name = "vLLM"

    def __init__(self, model: Path, log: Path, kv_events_port: Optional[int] = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.kv_events = f"tcp://127.0.0.1:{kv_events_port}" if kv_events_port else None
        extra = ["--kv-events-config", json.dumps({"enable_kv_cache_events": True, "publisher": "zmq",
                                                   "endpoint": f"tcp://*:{kv_events_port}"})] if kv_events_port else []
        super().__init__([str(vllm_venv() / "bin" / "python"), "-m", "vllm.entrypoints.openai.api_server",
                          "--model", str(model), "--served-model-name", "embedded", "--host", "127.0.0.1",
                          "--port", str(self.port), *flags(), *extra], log,
                         env={"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_SERVER_DEV_MODE": "1"})

    def ready(self, timeout_s: float = 600) -> Replica:
        self.wait_ready("/health", timeout_s)
        return self

    def metrics(self, names: tuple[str, ...]) -> dict[str, float]:
        """Prometheus counters summed over their labels (e.g. vllm:prefix_cache_hits_total)."""
        text = _get(self.url + "/metrics")
        out = dict.fromkeys(names, 0.0)
        for line in text.splitlines():
            name = line.split("{", 1)[0].split(" ", 1)[0]
            if name in out:
                out[name] += float(line.rsplit(" ", 1)[1])
        return out

    def reset_prefix_cache(self) -> None:
        req = urllib.request.Request(self.url + "/reset_prefix_cache", method="POST", data=b"")
        with urllib.request.urlopen(req, timeout=30) as r:
            if not json.loads(r.read() or b"{}").get("success", True):
                raise OrinError(f"{self.url}: the prefix cache did not reset (requests still running?)")


class Router(_Process):
    """vLLM's router (`vllm-router`) in front of the replicas, with one of its policies."""

    name = "vllm-router"

    def __init__(self, replicas: list[Replica], policy: str, log: Path, port: Optional[int] = None):
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        extra: list[str] = []
        if policy == "kv_aware":  # the replicas' ZMQ KV events tell it which blocks each one holds
            extra = ["--kv-event-block-size", str(BLOCK_SIZE), "--kv-event-model", "embedded"]
            for r in replicas:
                extra += ["--kv-event-source", f"{r.url}={r.kv_events}"]
        self.metrics_url = f"http://127.0.0.1:{free_port()}"  # its Prometheus metrics: where it routed, and why
        super().__init__([str(vllm_venv() / "bin" / "vllm-router"), "--host", "127.0.0.1", "--port", str(self.port),
                          "--worker-urls", *[r.url for r in replicas], "--policy", policy,
                          "--prometheus-host", "127.0.0.1", "--prometheus-port", self.metrics_url.rsplit(":", 1)[1],
                          *extra], log, env={"NO_COLOR": "1"})

    def ready(self, timeout_s: float = 120) -> Router:
        self.wait_ready("/v1/models", timeout_s)
        return self

    def routing_metrics(self) -> list[str]:
        """Its samples about routing decisions: per policy and worker, prefix-cache hits, KV-event lookups."""
        try:
            text = _get(self.metrics_url + "/metrics")
        except OSError as e:
            return [f"no metrics: {e}"]
        return [ln for ln in text.splitlines() if ln.startswith(ROUTING_METRICS)]
