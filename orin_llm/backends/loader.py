"""Load an engine directory with the runtime its manifest names: torch, TensorRT-LLM or TensorRT Edge-LLM."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Union

from ..errors import OrinError
from ..manifest import load_manifest
from ..runtime.engine_config import EngineConfig

# Options of the torch runtime that mean nothing to a TensorRT-LLM engine, which is accepted and
# dropped for them: the engine runs on the GPU it was built for (device), its KV cache dtype is
# compiled into the engine (kv_cache), its kernels and weights are what they are (exact, weights,
# switches), and torch's CPU threads do not run it (threads).
TORCH_ONLY_OPTIONS = ("device", "kv_cache", "exact", "weights", "switches", "threads")


def load_engine(engine_dir: Union[str, Path], config: Optional[EngineConfig] = None, **kw: Any):
    """`Engine.load(engine_dir, config, **kw)` for a torch engine (config: filled at the edge,
    EngineConfig.at_edge; else `kw` are its fields), `TrtllmEngine.load(engine_dir, draft=...)` for a trtllm
    one. For trtllm, `device`, `kv_cache`, `exact`, `weights`, `switches` and `threads` are ignored (no
    effect, see TORCH_ONLY_OPTIONS), and of a config only `draft` is read; `draft` and `features` are
    honoured (a torch engine refuses `features` unless it is None); anything else is a TypeError, as for
    Engine.load. The manifest is read and verified once, here, and handed to the engine."""
    manifest = load_manifest(engine_dir)
    if config is not None and manifest.backend != "torch":
        kw = {"draft": config.draft, **kw}
    if kw.get("features") is not None and manifest.backend != "trtllm":
        raise OrinError(f"--trtllm-features: {engine_dir} is a {manifest.backend} engine; the switches are "
                        "TensorRT-LLM's (backends/trtllm/features.py)")
    kw = {k: v for k, v in kw.items() if not (k == "features" and v is None)}
    if manifest.backend == "edgellm":  # its server on loopback serves it: no torch option means anything there
        from .edgellm.engine import EdgellmEngine

        options = {k: v for k, v in kw.items() if k not in TORCH_ONLY_OPTIONS + ("draft",)}
        return EdgellmEngine.load(engine_dir, manifest=manifest, **options)
    if manifest.backend == "trtllm":
        from .trtllm.engine import TrtllmEngine

        options = {k: v for k, v in kw.items() if k not in TORCH_ONLY_OPTIONS}
        return TrtllmEngine.load(engine_dir, manifest=manifest, **options)
    from ..runtime.engine import Engine

    return Engine.load(engine_dir, config, manifest=manifest, **kw)
