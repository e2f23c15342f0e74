"""`orin-llm doctor`: is this machine ready to build and serve the planner, and does an engine fit it?

It checks, and says how to fix what is wrong:

* **device** — JetPack / L4T (`/etc/nv_tegra_release`; `dpkg-query` for the `nvidia-jetpack`
  meta-package), the module (`/proc/device-tree/model` + MemTotal → e.g. `jetson-agx-orin-64gb`).
  TensorRT-LLM v0.12.0-jetson is made for JetPack 6.1 = L4T R36.4.0.
* **software** — Python, TensorRT-LLM (found and versioned with importlib's find_spec / metadata:
  nothing heavy is imported), TensorRT, torch.
* **power** — `nvpmodel -q` (MAXN wanted) and `jetson_clocks --show` (clocks pinned).
* **memory** — MemTotal / MemAvailable, disk swap and zram (`/proc/meminfo`, `/proc/swaps`), then
  the build preflight's own warnings (`orin_llm.build.trtllm.preflight`: swap, free memory, MAXN).
* **engine** (with `--engine DIR`) — its manifest loads, and a `trtllm` engine was built for this
  device (the profile's device name), with the TensorRT-LLM version installed here, on a Jetson.
* **policy** (with `--policy FILE`, the JSON the policy runner writes with `--measurement-out`) —
  what the policy process measured next to what the engine's memory plan reserved for it; a
  measured policy plus the planned planner that does not fit the device is an error.

On a machine that is not a Jetson it says so first ("not a Jetson") and checks what it can.

Exit codes (`orin-llm doctor`, `run_doctor`):

* **0** — everything checked is fine.
* **1** — warnings: it works, but not as it should on the Orin (not a Jetson at all; not MAXN;
  clocks not pinned; too little disk swap or free memory; a JetPack newer than 6.1; an engine
  whose memory plan was made for another device, ...).
* **2** — errors: it cannot work (a JetPack older than 6.1; TensorRT-LLM missing or not 0.12 on a
  Jetson; a broken engine directory; a TensorRT-LLM engine built for another device or another
  TensorRT-LLM version, or on a machine that is not a Jetson).

Everything the checks read comes in through `Probe` (file paths, a command runner, package
lookups), so tests run them on fixture files.
"""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import math
import platform
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

from .build.trtllm import _default_run_cmd, _meminfo_kib, _read, preflight, swap_kib
from .errors import OrinError

OK, INFO, WARN, ERROR = "ok", "info", "warn", "error"
EXIT = {OK: 0, INFO: 0, WARN: 1, ERROR: 2}
TRTLLM_SERIES = "0.12"  # the only TensorRT-LLM with Orin support: v0.12.0-jetson
JETPACK = {(36, 4, 0): "6.1", (36, 4, 3): "6.2", (36, 4, 4): "6.2.1", (36, 3, 0): "6.0", (36, 2, 0): "6.0 DP"}
GIB_KIB = 1024 * 1024
SETUP = "run jetson/setup.sh (it builds TensorRT-LLM v0.12.0-jetson from source)"


def _dist_version(name: str) -> Optional[str]:
    for dist in (name, name.replace("_", "-")):
        try:
            return md.version(dist)
        except md.PackageNotFoundError:
            continue
    return None


def _module_found(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None  # a top-level name: nothing is imported
    except (ImportError, ValueError):
        return False


@dataclass
class Probe:
    """Where the checks look. The defaults read this machine."""

    tegra_release: Union[str, Path] = "/etc/nv_tegra_release"
    device_model: Union[str, Path] = "/proc/device-tree/model"
    proc_meminfo: Union[str, Path] = "/proc/meminfo"
    proc_swaps: Union[str, Path] = "/proc/swaps"
    run_cmd: Callable[[list[str]], Optional[str]] = _default_run_cmd  # stdout, or None if it cannot run
    dist_version: Callable[[str], Optional[str]] = _dist_version  # an installed distribution's version
    module_found: Callable[[str], bool] = _module_found
    python_version: str = field(default_factory=platform.python_version)


@dataclass
class Check:
    section: str
    status: str  # ok | info | warn | error
    message: str


@dataclass
class Report:
    jetson: bool
    checks: list[Check] = field(default_factory=list)

    def add(self, section: str, status: str, message: str) -> None:
        self.checks.append(Check(section, status, message))

    @property
    def exit_code(self) -> int:
        return max((EXIT[c.status] for c in self.checks), default=0)

    def count(self, status: str) -> int:
        return sum(c.status == status for c in self.checks)

    def lines(self) -> list[str]:
        head = ("Jetson: checking JetPack, TensorRT-LLM, power, memory" if self.jetson else
                "not a Jetson: the trtllm backend and its engines run only on the Orin; checking what can be "
                "checked here")
        out = [f"orin-llm doctor — {head}"]
        out += [f"  {c.status.upper():<5} {c.section}: {c.message}" for c in self.checks]
        w, e = self.count(WARN), self.count(ERROR)
        verdict = {0: "ready", 1: "usable, with warnings", 2: "not ready"}[self.exit_code]
        out.append(f"{verdict}: {w} warning{'s' * (w != 1)}, {e} error{'s' * (e != 1)} (exit {self.exit_code})")
        return out

    def as_dict(self) -> dict[str, Any]:
        return {"exit_code": self.exit_code, "jetson": self.jetson,
                "checks": [{"section": c.section, "status": c.status, "message": c.message} for c in self.checks]}


def run_doctor(engine_dir: Union[str, Path, None] = None, probe: Optional[Probe] = None,
               policy: Union[str, Path, None] = None) -> tuple[int, list[str]]:
    """(exit code, report lines): 0 ok, 1 warnings, 2 errors (see the module docstring)."""
    report = diagnose(engine_dir, probe, policy)
    return report.exit_code, report.lines()


def diagnose(engine_dir: Union[str, Path, None] = None, probe: Optional[Probe] = None,
             policy: Union[str, Path, None] = None) -> Report:
    p = probe or Probe()
    release = _read(p.tegra_release)
    report = Report(jetson=release is not None)
    meminfo = _read(p.proc_meminfo)
    mem_total = _meminfo_kib(meminfo, "MemTotal")
    name = _check_device(report, p, release, mem_total)
    installed_trtllm = _check_software(report, p)
    if report.jetson:
        _check_power(report, p)
    _check_memory(report, p, meminfo, mem_total)
    if engine_dir is not None:
        _check_engine(report, p, Path(engine_dir), name, installed_trtllm, mem_total)
    if policy is not None:
        _check_policy(report, Path(policy), Path(engine_dir) if engine_dir is not None else None)
    return report


# ---------------------------------------------------------------------------
# Sections


def parse_l4t(release: str) -> Optional[tuple[int, int, int]]:
    """`# R36 (release), REVISION: 4.0, ...` → (36, 4, 0)."""
    m = re.search(r"#\s*R(\d+)\s*\(release\),\s*REVISION:\s*(\d+)(?:\.(\d+))?", release)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)) if m else None


def device_name(model: Optional[str], mem_total_kib: Optional[int]) -> Optional[str]:
    """The profile-style name of a Jetson Orin (`jetson-agx-orin-64gb`), or None if unknown."""
    if not model or not mem_total_kib:
        return None
    m = model.lower()
    kind = next((k for k, words in (("agx-orin", "agx orin"), ("orin-nx", "orin nx"), ("orin-nano", "orin nano"))
                 if words in m), None)
    if kind is None:
        return None
    gb = mem_total_kib * 1024 / 1e9  # carve-outs make MemTotal a few GB short of the module's size
    size = min((4, 8, 16, 32, 64), key=lambda s: abs(math.log(gb / s)))
    return f"jetson-{kind}-{size}gb"


def _check_device(report: Report, p: Probe, release: Optional[str], mem_total: Optional[int]) -> Optional[str]:
    if release is None:
        report.add("device", WARN, f"not a Jetson ({p.tegra_release} not found): the trtllm backend and "
                                   "TensorRT-LLM engines run only on the Orin; the torch backend runs here")
        return None
    l4t = parse_l4t(release)
    if l4t is None:
        report.add("device", WARN, f"cannot read the L4T version from {p.tegra_release}; JetPack 6.1 "
                                   "(L4T R36.4.0) is the one TensorRT-LLM v0.12.0-jetson is made for")
    else:
        text = "R{}.{}.{}".format(*l4t)
        jetpack = JETPACK.get(l4t)
        named = f"L4T {text} (JetPack {jetpack})" if jetpack else f"L4T {text}"
        if l4t == (36, 4, 0):
            report.add("device", OK, named)
        elif l4t[:2] == (36, 4):
            report.add("device", WARN, f"{named}: newer than the JetPack 6.1 (L4T R36.4.0) that TensorRT-LLM "
                                       "v0.12.0-jetson is made for; same CUDA 12.6 / TensorRT 10.3 line, but "
                                       "unverified with it")
        else:
            report.add("device", ERROR, f"{named}: TensorRT-LLM v0.12.0-jetson needs JetPack 6.1 (L4T R36.4.0; "
                                        "CUDA 12.6, TensorRT 10.3); flash JetPack 6.1 with SDK Manager")
    jetpack_pkg = (p.run_cmd(["dpkg-query", "-W", "--showformat=${Version}", "nvidia-jetpack"]) or "").strip()
    if jetpack_pkg:
        report.add("device", INFO, f"nvidia-jetpack {jetpack_pkg}")
    else:
        report.add("device", WARN, "the nvidia-jetpack packages are not installed (CUDA, cuDNN and TensorRT come "
                                   "with them): sudo apt update && sudo apt install nvidia-jetpack")
    model = (_read(p.device_model) or "").replace("\x00", "").strip() or None
    name = device_name(model, mem_total)
    if name:
        report.add("device", INFO, f"{model} → {name}")
    else:
        report.add("device", WARN, f"unknown Jetson module ({model or f'{p.device_model} unreadable'}): the "
                                   "profiles and this doctor know the Orin family only")
    return name


def _check_software(report: Report, p: Probe) -> Optional[str]:
    py = p.python_version
    if report.jetson and not py.startswith("3.10."):
        report.add("software", WARN, f"Python {py}: TensorRT-LLM v0.12.0-jetson is built for JetPack's "
                                     "Python 3.10 (cp310); use /usr/bin/python3")
    else:
        report.add("software", INFO, f"Python {py}")
    version = p.dist_version("tensorrt_llm")
    found = version is not None or p.module_found("tensorrt_llm")
    if not found:
        if report.jetson:
            report.add("software", ERROR, f"TensorRT-LLM is not installed: {SETUP}")
        else:
            report.add("software", INFO, "TensorRT-LLM is not installed (it is needed on the Orin only)")
    elif version is None:
        report.add("software", WARN, "tensorrt_llm is importable but has no package metadata, so its version "
                                     f"is unknown; reinstall the wheel: {SETUP}")
    elif not version.startswith(TRTLLM_SERIES + "."):
        status = ERROR if report.jetson else WARN
        report.add("software", status, f"TensorRT-LLM {version}: orin-llm's trtllm backend targets "
                                       f"v0.12.0-jetson (the only release with Orin support); {SETUP}")
    else:
        report.add("software", OK if report.jetson else INFO, f"TensorRT-LLM {version}")
    trt = p.dist_version("tensorrt")
    if trt is not None:
        odd = report.jetson and not trt.startswith("10.3.")
        report.add("software", WARN if odd else INFO,
                   f"TensorRT {trt}" + ("; JetPack 6.1 ships TensorRT 10.3, which 0.12.0-jetson is built against"
                                        if odd else ""))
    elif p.module_found("tensorrt"):
        report.add("software", INFO, "TensorRT (Python bindings found, version unknown)")
    elif report.jetson:
        report.add("software", WARN, "TensorRT's Python bindings are missing: sudo apt install nvidia-jetpack "
                                     "(python3-libnvinfer)")
    torch = p.dist_version("torch")
    if torch is None:
        report.add("software", WARN, "torch is not installed: pip install -e '.[device]' (on the Orin, after the "
                                     "TensorRT-LLM wheel, which brings JetPack's CUDA torch)")
    else:
        hint = ("; not an NVIDIA JetPack build (their versions carry 'nv'): check it is CUDA-enabled, "
                "TensorRT-LLM's quantize.py needs CUDA torch" if report.jetson and "nv" not in torch else "")
        report.add("software", INFO, f"torch {torch}{hint}")
    return version


def _power_mode(query: Optional[str]) -> Optional[str]:
    return next((ln.split(":", 1)[1].strip() for ln in (query or "").splitlines()
                 if ln.strip().startswith("NV Power Mode")), None)


def _check_power(report: Report, p: Probe) -> None:
    mode = _power_mode(p.run_cmd(["nvpmodel", "-q"]))
    if mode is not None and "MAXN" in mode.upper():
        report.add("power", OK, f"power mode {mode} (nvpmodel -q)")
    elif mode is not None:
        report.add("power", INFO, f"power mode {mode} (nvpmodel -q)")  # preflight's warning says what to do
    shown = p.run_cmd(["jetson_clocks", "--show"])
    m = re.search(r"^\s*GPU\s+MinFreq=(\d+)\s+MaxFreq=(\d+)", shown or "", re.M)
    if m is None:
        report.add("power", INFO, "cannot read the clocks (jetson_clocks --show needs root: sudo orin-llm "
                                  "doctor); after each boot run sudo jetson_clocks")
    elif m.group(1) == m.group(2):
        report.add("power", OK, f"GPU clock pinned at {int(m.group(2)) / 1e6:.0f} MHz (jetson_clocks)")
    else:
        report.add("power", WARN, f"GPU clock not pinned ({int(m.group(1)) / 1e6:.0f}-{int(m.group(2)) / 1e6:.0f} "
                                  "MHz): latency varies while it ramps; sudo jetson_clocks (again after each boot)")


def _check_memory(report: Report, p: Probe, meminfo: Optional[str], mem_total: Optional[int]) -> None:
    available = _meminfo_kib(meminfo, "MemAvailable")
    if mem_total is not None:
        avail = f", {available / GIB_KIB:.1f} GiB available" if available is not None else ""
        report.add("memory", INFO, f"{mem_total / GIB_KIB:.1f} GiB total{avail}")
    else:
        report.add("memory", WARN, f"cannot read {p.proc_meminfo}")
    disk, zram = swap_kib(_read(p.proc_swaps))
    report.add("memory", INFO, f"swap: {disk / GIB_KIB:.1f} GiB on disk, {zram / GIB_KIB:.1f} GiB zram")
    if zram and report.jetson:
        report.add("memory", INFO, "zram (JetPack's default swap) is compressed RAM: it does not add memory for "
                                   "the build; a disk swap file does (jetson/setup.sh --swap 16). To give its RAM "
                                   "back: sudo systemctl disable nvzramconfig and reboot")
    for w in preflight(proc_swaps=p.proc_swaps, proc_meminfo=p.proc_meminfo, tegra_release=p.tegra_release,
                       run_cmd=p.run_cmd):
        if w.startswith("not a Jetson"):
            continue  # said already, first
        section = "power" if "power mode" in w else "memory"
        report.add(section, WARN, w)


def _check_engine(report: Report, p: Probe, engine_dir: Path, name: Optional[str],
                  installed: Optional[str], mem_total: Optional[int]) -> None:
    from .manifest import load_manifest  # pydantic: only when an engine is checked

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
    if m.backend == "trtllm":
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


def _check_policy(report: Report, path: Path, engine_dir: Optional[Path]) -> None:
    from .manifest import load_manifest
    from .policy.measure import read_measurement

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


def main(argv: Optional[list[str]] = None) -> int:
    """`python -m orin_llm.doctor [--engine DIR] [--json]`: the same as `orin-llm doctor`."""
    import argparse
    import json

    ap = argparse.ArgumentParser(prog="python -m orin_llm.doctor", description=__doc__.split("\n")[0])
    ap.add_argument("--engine", help="an engine directory to check against this machine")
    ap.add_argument("--policy", help="a policy runner's measurement JSON to set against the engine's plan")
    ap.add_argument("--json", action="store_true", help="print the checks as one JSON object")
    a = ap.parse_args(argv)
    report = diagnose(a.engine, policy=a.policy)
    print(json.dumps(report.as_dict(), indent=2) if a.json else "\n".join(report.lines()))
    return report.exit_code


if __name__ == "__main__":
    raise SystemExit(main())
