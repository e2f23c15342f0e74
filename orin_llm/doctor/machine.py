"""The machine's sections of the doctor: device (JetPack / L4T, the module), software (Python,
TensorRT-LLM, TensorRT, torch), power (MAXN, pinned clocks) and memory (RAM, swap, the preflight)."""

from __future__ import annotations

import math
import re
from typing import Optional

from .host import Probe, import_hint, meminfo_kib, power_mode, read_file, swap_kib
from .jetpack7 import check_edgellm, jetpack_major, report_backend
from .preflight import preflight
from .report import ERROR, INFO, OK, WARN, Report

TRTLLM_SERIES = "0.12"  # the only TensorRT-LLM with Orin support: v0.12.0-jetson
JETPACK = {(36, 4, 0): "6.1", (36, 4, 3): "6.2", (36, 4, 4): "6.2.1", (36, 3, 0): "6.0", (36, 2, 0): "6.0 DP"}
GIB_KIB = 1024 * 1024
SETUP = "run jetson/setup.sh (it builds TensorRT-LLM v0.12.0-jetson from source)"


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


def check_device(report: Report, p: Probe, release: Optional[str], mem_total: Optional[int]) -> Optional[str]:
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
        report.jetpack = jetpack_major(l4t)
        if report.jetpack == 7:
            report.add("device", OK, f"L4T {text} (JetPack 7)")
        elif l4t == (36, 4, 0):
            report.add("device", OK, named)
        elif l4t[:2] == (36, 4):
            report.add("device", WARN, f"{named}: newer than the JetPack 6.1 (L4T R36.4.0) that TensorRT-LLM "
                                       "v0.12.0-jetson is made for; same CUDA 12.6 / TensorRT 10.3 line, but "
                                       "unverified with it")
        else:
            report.add("device", ERROR, f"{named}: TensorRT-LLM v0.12.0-jetson needs JetPack 6.1 (L4T R36.4.0; "
                                        "CUDA 12.6, TensorRT 10.3); flash JetPack 6.1 with SDK Manager")
    report_backend(report, report.jetpack)
    jetpack_pkg = (p.run_cmd(["dpkg-query", "-W", "--showformat=${Version}", "nvidia-jetpack"]) or "").strip()
    if jetpack_pkg:
        report.add("device", INFO, f"nvidia-jetpack {jetpack_pkg}")
    else:
        report.add("device", WARN, "the nvidia-jetpack packages are not installed (CUDA, cuDNN and TensorRT come "
                                   "with them): sudo apt update && sudo apt install nvidia-jetpack")
    model = (read_file(p.device_model) or "").replace("\x00", "").strip() or None
    name = device_name(model, mem_total)
    if name:
        report.add("device", INFO, f"{model} → {name}")
    else:
        report.add("device", WARN, f"unknown Jetson module ({model or f'{p.device_model} unreadable'}): the "
                                   "profiles and this doctor know the Orin family only")
    return name


def check_software(report: Report, p: Probe) -> Optional[str]:
    if report.jetpack == 7:  # Edge-LLM, not TensorRT-LLM (doctor/jetpack7.py)
        report.add("software", INFO, f"Python {p.python_version}")
        check_edgellm(report, p)
        report.add("software", INFO, "TensorRT-LLM not checked: v0.12.0-jetson runs on JetPack 6 only")
        check_torch(report, p)
        return None
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
    else:
        # The metadata can say 0.12.0 of a wheel that does not import (PyPI's 0.12.0 is a stub; a missing
        # CUDA library): only the import says it works, and its __version__ is the one that runs.
        imported, error = p.import_version("tensorrt_llm")
        if error is not None:
            report.add("software", ERROR if report.jetson else WARN,
                       f"TensorRT-LLM {version or '(version unknown)'} is installed but `import tensorrt_llm` "
                       f"fails: {error}; {import_hint(error)}")
            version = None
        else:
            version = imported if imported != "?" else version
            if version is None:
                report.add("software", WARN, "tensorrt_llm imports but says no version; reinstall the wheel: "
                                             f"{SETUP}")
            elif not version.startswith(TRTLLM_SERIES + "."):
                status = ERROR if report.jetson else WARN
                report.add("software", status, f"TensorRT-LLM {version}: orin-llm's trtllm backend targets "
                                               f"v0.12.0-jetson (the only release with Orin support); {SETUP}")
            else:
                report.add("software", OK if report.jetson else INFO, f"TensorRT-LLM {version} (imports)")
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
    check_torch(report, p)
    if report.jetson:
        check_pins(report, p)
    return version


def check_torch(report: Report, p: Probe) -> None:
    torch = p.dist_version("torch")
    if torch is None:
        report.add("software", WARN, "torch is not installed: pip install -e '.[device]' (on the Orin, after the "
                                     "TensorRT-LLM wheel, which brings JetPack's CUDA torch)")
    else:
        hint = ("; not an NVIDIA JetPack build (their versions carry 'nv'): check it is CUDA-enabled, "
                "TensorRT-LLM's quantize.py needs CUDA torch" if report.jetson and "nv" not in torch else "")
        report.add("software", INFO, f"torch {torch}{hint}")


def check_pins(report: Report, p: Probe) -> None:
    """On the Orin: what is installed against jetson/constraints-0.12-jetson.txt (a package installed before
    the constraints, or by hand, can differ). Skipped where the file is not there (a wheel install)."""
    from .pins import CONSTRAINTS
    from .pins import check_pins as pins

    if not CONSTRAINTS.is_file():
        return
    for pin in pins(CONSTRAINTS, p.dist_version):
        if not pin.ok:
            report.add("software", WARN, f"{pin.name} {pin.installed} is installed; {CONSTRAINTS.name} pins "
                                         f"{pin.name}{pin.spec}: rerun jetson/setup.sh (PIP_CONSTRAINT holds the pins)")



def check_power(report: Report, p: Probe) -> None:
    mode = power_mode(p.run_cmd(["nvpmodel", "-q"]))
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


def check_memory(report: Report, p: Probe, meminfo: Optional[str], mem_total: Optional[int]) -> None:
    available = meminfo_kib(meminfo, "MemAvailable")
    if mem_total is not None:
        avail = f", {available / GIB_KIB:.1f} GiB available" if available is not None else ""
        report.add("memory", INFO, f"{mem_total / GIB_KIB:.1f} GiB total{avail}")
    else:
        report.add("memory", WARN, f"cannot read {p.proc_meminfo}")
    disk, zram = swap_kib(read_file(p.proc_swaps))
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
