"""Decode attention straight over the INT8 KV cache, on CPUs: a small C++ op (csrc/int8_attention.cpp).

Why: a decode step of a small model is mostly per-op cost. Over an INT8 cache, torch needed about ten
ops a layer for attention (gather the sequence's K/V and convert them to float, fold the scales into
q and the output, SDPA), and a verify step one SDPA per query so that each row matched a one-token
step. The op reads the int8 K/V through the sequence's slots, computes each query row on its own in
float32 (so rows are bit for bit independent of what else is in the call: speculation stays exactly
lossless), and runs all of a step's queries of one sequence in one call. No library has this: torch's
kernels take float K/V, and llama.cpp's are not callable from torch.

Built on first use with torch's cpp_extension (a C++ compiler and ninja, which the package depends on;
JetPack has g++), for this CPU (-march/-mcpu=native; the build directory is named by the source, the
torch version and the CPU, so a shared cache never hands a binary to another CPU). Where it cannot
be built, or with ORIN_LLM_INT8_ATTN=0 (A/B measurements), decode attention runs the torch ops as
before, and the log says so once.
"""

from __future__ import annotations

import hashlib
import logging
import os
import platform
import threading
from pathlib import Path
from typing import Optional

import torch

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("csrc") / "int8_attention.cpp"
HEAD_DIMS = (64, 128)  # the head sizes the op is compiled for (Llama 3.2 1B/3B, SmolLM2: 64 and 128)

_lock = threading.Lock()
_op = None
_error: Optional[str] = None


def _cpu_id() -> str:
    """What the native build depends on: the architecture and the CPU's feature flags."""
    flags = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                flags = line
                break
    except OSError:
        pass
    return f"{platform.machine()} {flags}"


def _build():
    from torch.utils import cpp_extension

    src = SOURCE.read_bytes()
    key = hashlib.sha256(src + torch.__version__.encode() + _cpu_id().encode()).hexdigest()[:12]
    native = "-mcpu=native" if platform.machine() in ("aarch64", "arm64") else "-march=native"
    return cpp_extension.load(name=f"orin_llm_int8_attention_{key}", sources=[str(SOURCE)],
                              extra_cflags=["-O3", native, "-fno-trapping-math"], verbose=False)


def op():
    """The compiled op, built on first call; None where it cannot be (the reason: `unavailable()`)."""
    global _op, _error
    if _op is not None or _error is not None:
        return _op
    with _lock:
        if _op is None and _error is None:
            if os.environ.get("ORIN_LLM_INT8_ATTN", "1") == "0":
                _error = "turned off (ORIN_LLM_INT8_ATTN=0)"
            else:
                try:  # (built once per machine and torch: later processes load it in a second)
                    log.info("loading the INT8 decode attention op (built on first use here: ~30 s)")
                    _op = _build().int8_decode_attention
                except Exception as e:  # noqa: BLE001 (no compiler, no ninja, a build error: say which)
                    _error = f"{type(e).__name__}: {str(e).strip().splitlines()[-1] if str(e).strip() else e}"
            if _error is not None:
                log.warning("the INT8 decode attention op is not available (%s): decode attention runs "
                            "torch's ops over converted K/V (slower, same results to rounding)", _error)
    return _op


def unavailable() -> Optional[str]:
    """Why the op is not used here (None: it is, or has not been asked for yet)."""
    return _error


def usable(cache, head_dim: int) -> bool:
    """True when decode attention over this cache can run the op: an INT8 cache on a CPU that
    offers the op's surface (int8_layer, slot_table)."""
    return (getattr(cache, "dtype", None) == torch.int8 and cache.device.type == "cpu"
            and head_dim in HEAD_DIMS and hasattr(cache, "int8_layer") and op() is not None)


def int8_decode_attention(q: torch.Tensor, cache, layer: int, pos: int) -> torch.Tensor:
    """q: [T, H, D] float32 after RoPE, queries at positions pos .. pos+T-1 whose K/V the cache
    already holds; query t sees positions 0 .. pos+t. Returns [T, H·D] float32."""
    k, v, k_scale, v_scale = cache.int8_layer(layer)
    t = q.shape[0]
    out = op()(q.contiguous(), k, v, cache.slot_table(pos + t), pos, k_scale, v_scale)
    return out.view(t, -1)
