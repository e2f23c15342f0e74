"""How a torch engine is loaded: one typed config, filled once where a process starts (the CLI, the daemon,
a bench or a build step: `EngineConfig.at_edge`, which alone reads the environment's ORIN_LLM_* settings)
and handed whole to `Engine.load`. Below the edge nothing reads the environment for it.

Which kernel runs each step is decided from `switches` once at load (kernel_plan.py) and reported by /health.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Optional

from ..errors import OrinError
from .kernel_plan import KernelSwitches

PREFILL_CHUNK_VARIABLE = "ORIN_LLM_PREFILL_CHUNK"
PREFILL_CHUNK_TOKENS = 256


@dataclass(frozen=True)
class EngineConfig:
    """device: "auto" (CUDA where torch sees it), "cpu" or "cuda[:n]".
    kv_cache: overrides the manifest's KV dtype for both models (e.g. "fp32", the reference for INT8).
    draft: False makes no draft model available; True loads it on the first request that asks for it.
    exact: the target's decode steps batch-invariant (llama.py), so speculation is bit-exact lossless;
        False is faster on CPUs, where a padded matmul costs more than a one-row one.
    prefill_chunk_tokens: prompt tokens a request computes per step (the scheduler's setting).
    kv_tokens: the KV pool's size in tokens, instead of the memory plan's.
    weights: "fp32" loads a q4_1 target's float32 export instead of its Q4_1 blocks (the reference, and
        the way out on a CPU without the packed int4 kernel: runtime/weights.py).
    threads: torch's intra-op threads (host.apply_thread_setting; None: leave them as they are).
    switches: kernels turned off for A/B measurements (kernel_plan.py)."""

    device: str = "auto"
    kv_cache: Optional[str] = None
    draft: bool = True
    exact: bool = True
    prefill_chunk_tokens: int = PREFILL_CHUNK_TOKENS
    kv_tokens: Optional[int] = None
    weights: Optional[str] = None
    threads: Optional[int] = None
    switches: KernelSwitches = field(default_factory=KernelSwitches)

    def __post_init__(self):
        if self.prefill_chunk_tokens < 1:
            raise OrinError(f"prefill_chunk_tokens={self.prefill_chunk_tokens}: give a positive whole number")
        if self.kv_tokens is not None and self.kv_tokens < 1:
            raise OrinError(f"kv_tokens={self.kv_tokens}: give a positive whole number")

    @classmethod
    def at_edge(cls, environ: Optional[Mapping[str, str]] = None, **given: Any) -> EngineConfig:
        """The config a process starts with: what its caller gives (None: not given), the rest from the
        environment (the kernel switches, ORIN_LLM_PREFILL_CHUNK) or the defaults."""
        env = os.environ if environ is None else environ
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(given) - known)
        if unknown:
            raise TypeError(f"EngineConfig has no field {', '.join(unknown)}")
        given = {k: v for k, v in given.items() if v is not None}
        if "switches" not in given:
            given["switches"] = KernelSwitches.from_environment(env)
        if "prefill_chunk_tokens" not in given:
            given["prefill_chunk_tokens"] = _positive(env, PREFILL_CHUNK_VARIABLE, PREFILL_CHUNK_TOKENS)
        return cls(**given)


def _positive(env: Mapping[str, str], name: str, default: int) -> int:
    value = env.get(name)
    if value is None:
        return default
    if not value.isdigit() or int(value) < 1:
        raise OrinError(f"{name}={value!r}: give a positive whole number")
    return int(value)
