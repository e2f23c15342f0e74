"""`orin-llm doctor`: is this machine ready to build and serve the planner, and does an engine fit it?

It checks, and says how to fix what is wrong:

* **device** — JetPack / L4T (`/etc/nv_tegra_release`; `dpkg-query` for the `nvidia-jetpack`
  meta-package), the module (`/proc/device-tree/model` + MemTotal → e.g. `jetson-agx-orin-64gb`).
  TensorRT-LLM v0.12.0-jetson is made for JetPack 6.1 = L4T R36.4.0.
* **software** — Python, TensorRT-LLM (where it is installed, `import tensorrt_llm` runs in a child
  Python: its `__version__`, or the import's error with the next thing to try), TensorRT, torch, and on
  the Orin the installed versions against `jetson/constraints-0.12-jetson.txt` (`pins.py`).
* **power** — `nvpmodel -q` (MAXN wanted) and `jetson_clocks --show` (clocks pinned).
* **memory** — MemTotal / MemAvailable, disk swap and zram (`/proc/meminfo`, `/proc/swaps`), then
  the build preflight's own warnings (`orin_llm.doctor.preflight`: swap, free memory, MAXN), which
  `orin-llm build` shows too before a TensorRT-LLM build.
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

host.py reads the machine (`Probe`), preflight.py holds the build's warnings, report.py the report,
machine.py the device, software, power and memory sections, engine.py the engine and policy ones,
diagnose.py runs them all, pins.py and device_imports.py hold the constraints' checks,
__main__.py is `python -m orin_llm.doctor`; smoke.py is first contact's test
of a running daemon (`python -m orin_llm.doctor.smoke`).
"""

from .diagnose import diagnose, run_doctor
from .host import Probe
from .machine import device_name, parse_l4t
from .preflight import preflight
from .report import ERROR, INFO, OK, WARN, Check, Report

__all__ = ["ERROR", "INFO", "OK", "WARN", "Check", "Probe", "Report", "device_name", "diagnose", "parse_l4t",
           "preflight", "run_doctor"]
