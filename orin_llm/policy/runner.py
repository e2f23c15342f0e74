"""The policy runner: one process that runs a policy ONNX at a fixed control rate, as a robot does,
and records every tick and its own memory.

    python -m orin_llm.policy.runner --onnx policy.onnx --rate-hz 30 --seconds 20 \\
        --ticks-out ticks.json --measurement-out policy-measurement.json

Order: placement (CPU affinity, niceness, real-time priority) first, so every thread the backend
starts inherits it; then the backend loads (a TensorRT engine is built once and cached); a warm-up;
then one JSON line on stdout, `{"ready": true, ...}`, that a parent process waits for; then the loop,
until --seconds pass or SIGTERM/SIGINT arrives (checked between ticks: the tick in flight finishes).
At exit it writes the ticks (CLOCK_MONOTONIC seconds, comparable with any other process's
time.monotonic()) and the measurement the memory plan and `orin-llm doctor` read.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Optional

from .. import placement
from ..errors import OrinError
from .backends import BACKENDS, open_backend
from .inputs import parse_range_option, parse_shape_option
from .loop import run_loop, summarize
from .measure import PolicyMeasurement, machine, proc_status_kib, write_measurement
from .standin import is_stand_in

WARMUP_STEPS = 10


def run(onnx: Path, rate_hz: float, seconds: Optional[float], backend: str = "auto", threads: int = 1,
        where: placement.Placement = placement.Placement(), stream_priority: str = "high",
        ticks_out: Optional[Path] = None, measurement_out: Optional[Path] = None, ready=None,
        shapes: Optional[dict] = None, ranges: Optional[dict] = None) -> dict:
    if not rate_hz > 0:
        raise OrinError(f"--rate-hz {rate_hz}: give a control rate above 0")
    in_force = placement.apply(where)
    stand_in = is_stand_in(onnx) if Path(onnx).is_file() else False
    policy = open_backend(backend, onnx, threads=threads, stream_priority=stream_priority, shapes=shapes,
                          ranges=ranges)
    stop = {"now": False}

    def on_signal(signum, frame):
        stop["now"] = True

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        for _ in range(WARMUP_STEPS):
            policy.step()
        info = {"ready": True, "pid": os.getpid(), "backend": policy.name, "device": policy.device,
                "stand_in": stand_in, "placement": in_force}
        (ready or _print_ready)(info)
        deadline = None if seconds is None else time.monotonic() + seconds
        ticks = run_loop(lambda k: policy.step(), rate_hz,
                         lambda: stop["now"] or (deadline is not None and time.monotonic() >= deadline))
        status = proc_status_kib()
        device_bytes = policy.device_bytes()
        device_parts = dict(getattr(policy, "memory", {}))
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        policy.close()
    summary = summarize(ticks, rate_hz)
    rss_peak = status.get("VmHWM", 0) * 1024
    measurement = PolicyMeasurement(
        onnx=str(onnx), stand_in=stand_in, backend=policy.name, device=policy.device, machine=machine(),
        rss_peak_bytes=rss_peak, device_bytes=device_bytes, device_parts=device_parts,
        total_bytes=rss_peak + device_bytes, rate_hz=rate_hz,
        ticks=summary["ticks"], tick_p99_ms=summary.get("tick_p99_ms"), missed_deadlines=summary["missed_deadlines"])
    result = {"onnx": str(onnx), "stand_in": stand_in, "backend": policy.name, "device": policy.device,
              "rate_hz": rate_hz, "threads": threads, "placement": in_force,
              "stream_priority": stream_priority if policy.name == "tensorrt" else None,
              "summary": summary, "memory": measurement.model_dump(mode="json"),
              "ticks": [t.as_list() for t in ticks]}
    if ticks_out is not None:
        Path(ticks_out).parent.mkdir(parents=True, exist_ok=True)
        Path(ticks_out).write_text(json.dumps(result) + "\n")
    if measurement_out is not None:
        write_measurement(measurement, measurement_out)
    return result


def _print_ready(info: dict) -> None:
    print(json.dumps(info), flush=True)


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m orin_llm.policy.runner", description=__doc__.split("\n")[0])
    p.add_argument("--onnx", required=True, type=Path, help="the policy's ONNX file")
    p.add_argument("--rate-hz", type=float, default=30.0, help="control rate (ticks per second)")
    p.add_argument("--seconds", type=float, help="run this long (default: until SIGTERM/SIGINT)")
    p.add_argument("--backend", default="auto", choices=BACKENDS,
                   help="auto: TensorRT where a CUDA device and tensorrt+pycuda are there, else onnxruntime")
    p.add_argument("--threads", type=int, default=1, help="onnxruntime intra-op threads")
    p.add_argument("--cpus", help="CPU list to run on, e.g. 0 or 0-1 (default: inherited)")
    p.add_argument("--nice", type=int, help="add this niceness (negative needs privileges)")
    p.add_argument("--rt-priority", type=int, help="SCHED_FIFO priority 1-99 (needs privileges)")
    p.add_argument("--stream-priority", default="high", choices=["high", "default"],
                   help="TensorRT only: the CUDA stream priority of the policy's kernels")
    p.add_argument("--input-shape", action="append", default=[], metavar="NAME=DxD...",
                   help="the shape to feed a dynamic input (repeatable); a dynamic leading axis is 1 by default")
    p.add_argument("--input-range", action="append", default=[], metavar="NAME=MIN:OPT:MAX",
                   help="TensorRT's optimization profile for a dynamic input (repeatable); the runner feeds OPT")
    p.add_argument("--ticks-out", type=Path, help="write every tick and the summary here (JSON)")
    p.add_argument("--measurement-out", type=Path, help="write the memory measurement here (JSON): name it in a "
                   "profile's [policy] measured = ..., or give it to orin-llm doctor --policy")
    a = p.parse_args(argv)
    try:
        shapes = dict(parse_shape_option(t) for t in a.input_shape)
        ranges = dict(parse_range_option(t) for t in a.input_range)
        result = run(a.onnx, a.rate_hz, a.seconds, a.backend, a.threads,
                     placement.Placement(a.cpus, a.nice, a.rt_priority), a.stream_priority, a.ticks_out,
                     a.measurement_out, shapes=shapes, ranges=ranges)
    except OrinError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    s = result["summary"]
    label = "STAND-IN policy" if result["stand_in"] else "policy"
    if s["ticks"]:
        print(f"{label} on {result['backend']} ({result['device']}) at {a.rate_hz:g} Hz: {s['ticks']} ticks, "
              f"p50 {s['tick_p50_ms']:.2f} ms, p99 {s['tick_p99_ms']:.2f} ms, max {s['tick_max_ms']:.2f} ms, "
              f"{s['missed_deadlines']} missed deadlines; {result['memory']['total_bytes'] / 2**20:.0f} MiB",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
