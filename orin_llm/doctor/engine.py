"""The deployment's sections of the doctor: an engine directory against this machine (its device, its
TensorRT-LLM version, a Jetson at all), and a measured policy against that engine's memory plan."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from ..errors import OrinError
from .host import Probe
from .jetpack7 import check_engine_jetpack
from .machine import GIB_KIB, SETUP
from .report import ERROR, INFO, OK, WARN, Report


def check_engine(report: Report, p: Probe, engine_dir: Path, name: Optional[str],
                  installed: Optional[str], mem_total: Optional[int]) -> None:
    from ..manifest import load_manifest  # pydantic: only when an engine is checked

    try:
        m = load_manifest(engine_dir)
    except OrinError as e:
        report.add("engine", ERROR, str(e))
        return
    device = m.profile.get("device", {}) if isinstance(m.profile, dict) else {}
    built_for = str(device.get("name", "?"))
    built_with = m.tools.get("tensorrt_llm")
    report.add("engine", INFO, f"{engine_dir}: {m.name!r}, backend {m.backend}, profile device {built_for}, "
                               f"built {m.created_utc} with orin-llm {m.tools.get('orin-llm', '?')}"
                               + (f" and TensorRT-LLM {built_with}" if built_with else ""))
    check_engine_jetpack(report, m.backend, report.jetpack)
    if m.backend == "edgellm":
        if not report.jetson:
            report.add("engine", INFO, "an Edge-LLM engine directory (its ONNX export): the engine is built and served "
                                       "on the Orin (manifest edgellm.device_steps)")
        else:
            report.add("engine", OK if report.jetpack == 7 else INFO,
                       f"Edge-LLM engine directory, exported with {m.tools.get('edgellm_env:tensorrt-edgellm', '?')}")
    elif m.backend == "trtllm":
        problems = []
        if not report.jetson:
            problems.append("a TensorRT-LLM engine runs only on the Jetson it was built on, and this is not a "
                            "Jetson; serve it on the Orin (or build the torch backend here)")
        if built_with is None:
            problems.append("its manifest records no TensorRT-LLM version, so it was not built by TensorRT-LLM "
                            "on the Orin; rebuild there: orin-llm build --profile jetson/profiles/agx-orin-64gb.toml")
        elif installed is not None and installed != built_with:
            problems.append(f"built with TensorRT-LLM {built_with} but {installed} is installed: TensorRT engines "
                            "load only with the TensorRT-LLM (and TensorRT) that built them; rebuild the engine")
        elif installed is None and report.jetson:
            problems.append(f"built with TensorRT-LLM {built_with}, which is not installed here: {SETUP}")
        if report.jetson and name is not None and built_for != name:
            problems.append(f"built for {built_for} but this is a {name}: TensorRT engines and the memory plan "
                            "are per device; rebuild with this device's profile")
        elif report.jetson and name is None:
            report.add("engine", WARN, f"built for {built_for}; cannot tell which device this is, so not checked")
        built_py, here_py = m.tools.get("python", ""), p.python_version
        if built_py and built_py.split(".")[:2] != here_py.split(".")[:2]:
            report.add("engine", WARN, f"built under Python {built_py}, this is {here_py}: serve it with the Python "
                                       "TensorRT-LLM is installed in")
        for msg in problems:
            report.add("engine", ERROR, msg)
        if not problems:
            report.add("engine", OK, f"built for this device ({built_for}) with the installed TensorRT-LLM "
                                     f"{built_with}")
    else:
        here = name or ("cpu" if not report.jetson else "?")
        if built_for not in ("cpu", "?", here):
            report.add("engine", WARN, f"its memory plan was made for {built_for}, this is {here}: the KV "
                                       "budget may not fit; rebuild with this device's profile")
        else:
            report.add("engine", OK, f"{m.backend} engine: runs here (CPU, or CUDA where torch has it)")
    planned = device.get("memory_gib")
    if isinstance(planned, (int, float)) and mem_total and planned > mem_total / GIB_KIB + 0.5:
        report.add("engine", WARN, f"its memory plan assumes {planned:g} GiB but this machine has "
                                   f"{mem_total / GIB_KIB:.1f} GiB; rebuild with a profile for this device")


def check_policy(report: Report, path: Path, engine_dir: Optional[Path]) -> None:
    from ..manifest import load_manifest
    from ..policy.measure import read_measurement

    try:
        m = read_measurement(path)
    except OrinError as e:
        report.add("policy", ERROR, str(e))
        return
    report.add("policy", INFO, m.describe())
    if m.stand_in:
        report.add("policy", INFO, "a STAND-IN policy (random weights): its size stands for a policy of that shape, "
                                   "not for yours; measure your robot's own ONNX with the runner")
    if engine_dir is None:
        report.add("policy", INFO, "give --engine DIR too to set the measurement against that engine's memory plan")
        return
    try:
        plan = load_manifest(engine_dir).memory_plan
    except OrinError:
        return  # the engine section said why already
    if not plan:
        report.add("policy", WARN, f"{engine_dir} has no memory plan in its manifest; rebuild it")
        return
    reserved, device = int(plan["policy_bytes"]), int(plan["device_bytes"])
    total = int(plan["total_bytes"]) - reserved + m.total_bytes  # the planner as planned, the policy as measured
    gib = lambda n: f"{n / 2**30:.2f} GiB"  # noqa: E731
    fix = (f"rebuild the engine with [policy] measured = \"{path}\" in its profile, so the plan sizes the KV cache "
           "around what the policy really takes")
    if m.backend == "onnxruntime" and plan.get("backend") == "trtllm":
        report.add("policy", WARN, "measured with onnxruntime on a CPU, but the engine runs on the Orin's GPU: "
                                   "measure the policy there (TensorRT) for a figure the plan can use")
    if total > device:
        report.add("policy", ERROR, f"measured policy {gib(m.total_bytes)} + planner as planned "
                                    f"{gib(total - m.total_bytes)} = {gib(total)}, over the device's {gib(device)} by "
                                    f"{gib(total - device)}: this deployment does not fit; {fix}, or shrink the policy")
    elif m.total_bytes > reserved:
        report.add("policy", WARN, f"measured {gib(m.total_bytes)}, but the plan reserved {gib(reserved)} "
                                   f"({plan.get('policy_source')}): headroom shrinks to {gib(device - total)}; {fix}")
    else:
        report.add("policy", OK, f"measured {gib(m.total_bytes)} within the {gib(reserved)} the plan reserved "
                                 f"({plan.get('policy_source')}); headroom {gib(device - total)}")
