"""The runner as a robot runs it: its own process, a ready line, ticks until SIGTERM, and the files it
leaves (every tick on CLOCK_MONOTONIC, and the memory measurement the plan and the doctor read)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from orin_llm.policy.loop import Tick, summarize
from orin_llm.policy.measure import read_measurement
from orin_llm.policy.process import PolicyProcess

from ..conftest import ROOT


def test_runner_process_ticks_until_sigterm_and_measures_itself(stand_in, tmp_path):
    t_before = time.monotonic()
    with PolicyProcess(stand_in, 50.0, tmp_path, ("--cpus", "0")) as p:
        assert p.info["ready"] and p.info["backend"] == "onnxruntime" and p.info["stand_in"] is True
        assert p.info["placement"]["cpus"] == "0"
        time.sleep(1.5)
        result = p.stop()
    ticks = [Tick(*t) for t in result["ticks"]]
    # ~75 on a quiet machine; pinned to one core of a 2-core machine at load 10 it made 4 a second: slow,
    # never silent (the tick rate is the policy benchmark's to measure, not this test's)
    assert len(ticks) >= 3
    assert all(t_before < t.release <= t.start < t.end < time.monotonic() for t in ticks)  # one clock for all
    again = summarize(ticks, 50.0)  # from the stored ticks (µs resolution) the same summary
    assert {k: again[k] for k in ("ticks", "missed_deadlines", "late_ticks", "skipped_releases")} == \
        {k: result["summary"][k] for k in ("ticks", "missed_deadlines", "late_ticks", "skipped_releases")}
    assert again["tick_p99_ms"] == pytest.approx(result["summary"]["tick_p99_ms"], abs=0.01)
    m = read_measurement(p.measurement_path)
    assert m.stand_in and m.backend == "onnxruntime" and m.device == "cpu" and m.device_bytes == 0
    assert 20 * 2**20 < m.rss_peak_bytes == m.total_bytes < 2 * 2**30  # the interpreter, onnxruntime, the weights
    assert m.ticks == len(ticks) and "STAND-IN policy measured with onnxruntime" in m.describe()


def test_runner_cli_for_a_fixed_time_and_its_errors(stand_in, tmp_path):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "orin_llm.policy.runner", "--onnx", str(stand_in), "--rate-hz", "20",
           "--seconds", "0.5", "--measurement-out", str(tmp_path / "m.json")]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[0])["ready"] is True
    assert "STAND-IN policy on onnxruntime (cpu) at 20 Hz" in proc.stderr
    assert read_measurement(tmp_path / "m.json").rate_hz == 20
    bad = subprocess.run(cmd[:4] + [str(tmp_path / "none.onnx")], capture_output=True, text=True, cwd=ROOT,
                         env=env, timeout=60)
    assert bad.returncode == 2 and "none.onnx not found; make a stand-in with" in bad.stderr
    bad = subprocess.run(cmd + ["--backend", "tensorrt"], capture_output=True, text=True, cwd=ROOT, env=env,
                         timeout=60)
    assert bad.returncode == 2 and "error: TensorRT is not importable" in bad.stderr
    bad = subprocess.run(cmd + ["--cpus", "9999"], capture_output=True, text=True, cwd=ROOT, env=env, timeout=60)
    assert bad.returncode == 2 and "--cpus 9999: CPUs 9999 are not available" in bad.stderr


def test_runner_in_process_on_the_tensorrt_fakes(trt_fakes, stand_in, tmp_path):
    from orin_llm.policy.runner import run

    seen = []
    result = run(stand_in, 100.0, 0.3, backend="tensorrt", measurement_out=tmp_path / "m.json", ready=seen.append)
    assert seen[0]["backend"] == "tensorrt" and seen[0]["device"] == "NVIDIA Fake GPU"
    assert result["stream_priority"] == "high" and result["summary"]["ticks"] >= 1
    m = read_measurement(tmp_path / "m.json")
    assert m.backend == "tensorrt" and m.device_bytes > 0 and m.total_bytes == m.rss_peak_bytes + m.device_bytes
    assert m.device_parts["context"] == 64 * 2**20 and sum(m.device_parts.values()) == m.device_bytes
    assert "device (engine " in m.describe()


def test_runner_cli_feeds_a_dynamic_policy_the_stated_shape(tmp_path):
    from tests.policy.test_tensorrt import dynamic_policy

    onnx_file = dynamic_policy(tmp_path / "dyn.onnx", second="features")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "orin_llm.policy.runner", "--onnx", str(onnx_file), "--backend", "onnxruntime",
           "--seconds", "0.3", "--rate-hz", "20"]
    refused = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert refused.returncode == 2 and "--input-shape obs=1xN" in refused.stderr
    ok = subprocess.run(cmd + ["--input-range", "obs=1x8:2x8:4x8"], capture_output=True, text=True, cwd=ROOT,
                        env=env, timeout=120)
    assert ok.returncode == 0, ok.stderr
