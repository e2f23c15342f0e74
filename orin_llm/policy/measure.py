"""What the policy process really takes: its resident memory, its device memory, and the file that
carries both to the memory plan (`[policy] measured = "..."` in a profile) and to `orin-llm doctor`.

Resident memory is the kernel's count for the whole process (VmHWM, the peak of VmRSS, from
/proc/<pid>/status): the interpreter, the runtime's libraries, the weights and every activation
buffer, not an estimate from the ONNX file. Device memory is what the backend itself allocated
(TensorRT: the engine, the execution context's scratch, the I/O buffers: `device_parts`), not a
free-memory difference, which on unified memory moves with the page cache and every other process;
it is 0 for onnxruntime on a CPU. On a Jetson both come out of the same unified memory, and CUDA
allocations (nvmap) are not part of RSS, so the total is their sum.
"""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import OrinError

KIND = "orin-llm policy measurement"


def proc_status_kib(pid: int | str = "self") -> dict[str, int]:
    """VmRSS, VmHWM & co. of a process, in KiB (empty if it is gone)."""
    out: dict[str, int] = {}
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return out
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key.startswith("Vm") and rest.strip().endswith("kB"):
            out[key] = int(rest.split()[0])
    return out


class PolicyMeasurement(BaseModel):
    """One runner's account of itself: written by `python -m orin_llm.policy.runner --measurement-out`."""

    model_config = ConfigDict(extra="forbid")

    kind: str = KIND
    onnx: str
    stand_in: bool  # a stand-in policy: honest for time and memory, not for behaviour
    backend: str  # onnxruntime | tensorrt
    device: str  # cpu, or the CUDA device's name
    machine: str  # platform.platform() of where it was measured
    rss_peak_bytes: int = Field(ge=0)
    device_bytes: int = Field(ge=0)
    # what device_bytes is made of, as the backend allocated it (TensorRT: engine, context, io); not a
    # free-memory difference, which on unified memory moves with the page cache and other processes
    device_parts: dict[str, int] = Field(default_factory=dict)
    total_bytes: int = Field(ge=0)
    rate_hz: float = Field(gt=0)
    ticks: int = Field(ge=0)
    tick_p99_ms: Optional[float] = None
    missed_deadlines: int = Field(ge=0)
    utc: str = Field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))

    def describe(self) -> str:
        label = "STAND-IN policy" if self.stand_in else "policy"
        parts = ", ".join(f"{k} {v / 2**30:.2f}" for k, v in self.device_parts.items())
        dev = (f" + {self.device_bytes / 2**30:.2f} GiB device" + (f" ({parts})" if parts else "")
               if self.device_bytes else "")
        return (f"{label} measured with {self.backend} on {self.device}: {self.total_bytes / 2**30:.2f} GiB "
                f"(peak RSS {self.rss_peak_bytes / 2**30:.2f} GiB{dev}), {self.utc}")


def write_measurement(m: PolicyMeasurement, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(m.model_dump_json(indent=2) + "\n")
    return path


def read_measurement(path: str | Path) -> PolicyMeasurement:
    path = Path(path)
    if not path.is_file():
        raise OrinError(f"policy measurement {path} not found; write one with python -m orin_llm.policy.runner "
                        f"--onnx POLICY.onnx --seconds 30 --measurement-out {path}")
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise OrinError(f"policy measurement {path}: not JSON ({e})") from None
    if not isinstance(data, dict) or data.get("kind") != KIND:
        raise OrinError(f"policy measurement {path}: not a policy runner's measurement (kind must be {KIND!r})")
    try:
        return PolicyMeasurement.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        raise OrinError(f"policy measurement {path}: {'.'.join(map(str, err['loc']))}: {err['msg']}; "
                        "measure again with the runner") from None


def machine() -> str:
    return platform.platform()
