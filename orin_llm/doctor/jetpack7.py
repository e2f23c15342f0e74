"""The doctor on JetPack 7 (L4T R38): which backend an Orin takes, by its JetPack, and Edge-LLM's checks.

TensorRT-LLM stops at v0.12.0-jetson, which runs on JetPack 6 (L4T R36.4) only; on JetPack 7 NVIDIA's engine
for Jetson is TensorRT Edge-LLM (0.11: Jetson Orin official on JetPack 7.2), orin-llm's backend "edgellm"
(backends/edgellm, jetson/profiles/agx-orin-64gb-edgellm.toml). The torch backend runs on either."""

from __future__ import annotations

from typing import Optional

from .host import Probe
from .report import ERROR, INFO, OK, WARN, Report

EDGELLM_SERIES = "0.11"
PROFILES = {6: "jetson/profiles/agx-orin-64gb.toml", 7: "jetson/profiles/agx-orin-64gb-edgellm.toml"}
BACKENDS = {6: "trtllm", 7: "edgellm"}
EDGELLM_SETUP = ("install TensorRT Edge-LLM 0.11 built for JetPack 7 (NVIDIA's sources with "
                 "-DEMBEDDED_TARGET=jetson-orin, or its container; jetson/GUIDE.md, \"JetPack 7\")")


def jetpack_major(l4t: Optional[tuple[int, int, int]]) -> Optional[int]:
    """L4T R36 is JetPack 6, R38 JetPack 7; None for anything else (unknown or older)."""
    return {36: 6, 38: 7}.get(l4t[0]) if l4t else None


def backend_for(jetpack: Optional[int]) -> Optional[str]:
    """The device backend a JetPack takes (None: neither; the torch backend still runs)."""
    return BACKENDS.get(jetpack) if jetpack else None


def report_backend(report: Report, jetpack: Optional[int]) -> None:
    backend = backend_for(jetpack)
    if backend is None:
        return
    other = ("TensorRT Edge-LLM needs JetPack 7" if jetpack == 6
             else "TensorRT-LLM v0.12.0-jetson runs on JetPack 6 only")
    report.add("device", INFO, f"JetPack {jetpack}: backend {backend} ({PROFILES[jetpack]}); {other}; the torch "
                               "backend runs on either")


def check_edgellm(report: Report, p: Probe) -> Optional[str]:
    """On JetPack 7: Edge-LLM installed, of the series the backend targets. Its installed version, or None."""
    version = p.dist_version("tensorrt-edgellm") or p.dist_version("tensorrt_edgellm")
    if version is None:
        report.add("software", ERROR, f"TensorRT Edge-LLM is not installed: {EDGELLM_SETUP}")
        return None
    if not version.startswith(EDGELLM_SERIES + "."):
        report.add("software", WARN, f"TensorRT Edge-LLM {version}: orin-llm's edgellm backend is written against "
                                     f"{EDGELLM_SERIES}.x (backends/edgellm/rules.py); other releases are unverified")
    else:
        report.add("software", OK, f"TensorRT Edge-LLM {version}")
    return version


def check_engine_jetpack(report: Report, backend: str, jetpack: Optional[int]) -> None:
    """A device engine on the wrong JetPack: engines are not portable across JetPacks, and each backend runs
    on one of them."""
    want = {"trtllm": 6, "edgellm": 7}.get(backend)
    if want is not None and jetpack is not None and jetpack != want:
        report.add("engine", ERROR, f"a {backend} engine runs on JetPack {want}, this Orin runs JetPack {jetpack}: "
                                    f"build with {PROFILES[jetpack]} here")
