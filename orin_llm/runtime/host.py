"""The host side of loading a torch engine: torch's threads, oneDNN's caches, glibc's heap, the device.
Set before the engine loads (the caches are read when the first primitive is made); the values come
from the caller (the daemon's DaemonConfig, the CLI), read once at the edge."""

from __future__ import annotations

import os
from typing import Optional

import torch

from ..errors import OrinError
from .weights import bound_heap

# oneDNN keeps every matmul primitive it made, up to 1024 by default, and torch's ideep layer keeps
# its own per-shape cache of them (LRU_CACHE_CAPACITY, also 1024). Prompt attention makes one per
# block shape (its key count grows block by block), so pinning a 4k home left hundreds of MB in the
# two caches. 64 each keep every shape a decode step and a warm request reuse: the same pin time, warm
# TTFT and decode rate side by side, where 0 slows a warm request (lab notes). Both are read when the
# first primitive is made: set before the engine loads; an explicit setting wins.
PRIMITIVE_CACHES = {"ONEDNN_PRIMITIVE_CACHE_CAPACITY": "64", "LRU_CACHE_CAPACITY": "64"}


def apply_thread_setting(threads: Optional[int] = None) -> None:
    """`threads` sets torch's intra-op threads (None: torch's own count; the daemon and the CLI pass
    --threads or the user's ORIN_LLM_THREADS, read where they start: server/config.py). On a CPU shared
    with other busy processes (a robot's ROS nodes, CI), fewer threads than cores avoids OpenMP barrier
    stalls that we measured at 5-10x slower decoding on 2 cores with the second one busy. Also bounds
    oneDNN's and ideep's primitive caches (PRIMITIVE_CACHES), and glibc's heap (bound_heap)."""
    for name, value in PRIMITIVE_CACHES.items():
        os.environ.setdefault(name, value)
    bound_heap()
    if threads is not None:
        if threads < 1:
            raise OrinError(f"threads={threads}: give a positive whole number")
        torch.set_num_threads(threads)


def pick_device(device: str) -> str:
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise OrinError(f"device {device!r} asked for, but torch sees no CUDA device")
    if device.startswith("cuda"):
        # Prompt attention runs per aligned block, each block a new (queries, keys) shape, and cuDNN's SDPA
        # (torch's first choice on Hopper) builds an execution plan per new shape: a cold prompt would pay
        # one per block. Flash and memory-efficient attention take any shape as it comes.
        torch.backends.cuda.enable_cudnn_sdp(False)
    return device


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None:
        return default
    if not value.isdigit() or int(value) < 1:
        raise OrinError(f"{name}={value!r}: give a positive whole number")
    return int(value)
