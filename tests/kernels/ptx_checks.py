"""What a compiled kernel's PTX says, with no GPU: its global loads by width, and what ptxas reports of its
registers and spills (triton's own ptxas, `-v`). Used by test_triton_decode_gemv_ptx.py."""

from __future__ import annotations

import re
import subprocess
import tempfile
from collections import Counter
from pathlib import Path

_USAGE = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_REGS = re.compile(r"Used (\d+) registers")


def global_loads(ptx: str) -> Counter:
    """ld.global instructions by their width suffix: 'v4.b32' (16 bytes), 'v2.b32', 'b32', 'b16', ..."""
    out: Counter = Counter()
    for op in re.findall(r"\bld\.global((?:\.[\w:]+)*)\s", ptx):
        parts = [p for p in op.split(".") if p and not p.startswith(("L1::", "L2::", "nc", "cs", "ca", "cg"))]
        out[".".join(parts)] += 1
    return out


def ptxas_usage(ptx: str, arch: int) -> dict[str, int]:
    """ptxas -v's figures for the kernel in `ptx` on sm_`arch` (the target the PTX names)."""
    from triton.backends.nvidia.compiler import get_ptxas

    target = re.search(r"^\.target (\S+)", ptx, re.M).group(1)
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "k.ptx"
        src.write_text(ptx)
        proc = subprocess.run([get_ptxas(arch).path, "-v", "--gpu-name", target, str(src), "-o", str(Path(d) / "k.o")],
                              capture_output=True, text=True, timeout=120)
    if proc.returncode:
        raise RuntimeError(f"ptxas failed on {target}: {proc.stderr[-1000:]}")
    usage, regs = _USAGE.search(proc.stderr), _REGS.search(proc.stderr)
    return {"stack": int(usage.group(1)), "spill_stores": int(usage.group(2)), "spill_loads": int(usage.group(3)),
            "registers": int(regs.group(1))}
