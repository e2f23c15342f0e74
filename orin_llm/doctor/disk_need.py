"""The disk a TensorRT-LLM build of a profile needs, computed from the profile's models (standard library only:
first contact's checks run it before anything is installed; doctor/first_checks.py).

For each model (target, draft): its Hugging Face checkpoint where the profile says it lives (counted only
while it is not there yet), and in the engine directory the lm_head copy for a tied head
(build/tied_head.py), the converted checkpoint (`ckpt/<role>`, convert_checkpoint.py's output) and the
engine (`<role>/rank0.engine`), each the size of the quantized weights (weight_sizes.py, the memory
plan's own arithmetic). Plus TensorRT-LLM's source tree and C++ build in /opt, when it is not installed.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from ..errors import OrinError
from ..weight_sizes import DTYPE_BYTES, hf_fields, param_count, weights_bytes

if sys.version_info >= (3, 11):
    import tomllib
else:  # JetPack 6's Python 3.10: pip's own tomli (_toml)
    tomllib = None

GIB = 1024**3
# TensorRT-LLM v0.12.0-jetson's shallow clone with its submodules and LFS files, its C++ build for SM87 and
# ccache's default 5 GB cache. An estimate, not measured on an Orin: first contact's tarball records
# `df` after the build, the figure to correct it with.
TRTLLM_SOURCE_BUILD_BYTES = 30 * GIB
TRTLLM_DIR = Path("/opt/TensorRT-LLM")


@dataclass(frozen=True)
class DiskItem:
    label: str
    path: Path  # where it goes (it may not exist yet)
    bytes: int


def gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


def _toml() -> Any:
    if tomllib is not None:
        return tomllib
    try:
        from pip._vendor import tomli
    except ImportError:
        raise OrinError("reading the profile needs pip's tomli on Python 3.10: sudo apt install python3-pip "
                        "(README4Jetson §1.2 installs it first)") from None
    return tomli


def read_profile(path: Path) -> dict[str, Any]:
    """The profile's TOML as a dict: tomllib (Python 3.11+), else the tomli pip vendors (JetPack 6's 3.10)."""
    toml = _toml()
    try:
        with open(path, "rb") as f:
            return toml.load(f)
    except OSError as e:
        raise OrinError(f"cannot read the profile {path}: {e.strerror}") from None
    except ValueError as e:  # tomllib.TOMLDecodeError is a ValueError
        raise OrinError(f"{path}: not valid TOML ({e})") from None


def _config(spec: dict[str, Any], profile_dir: Path, section: str) -> dict[str, Any]:
    # build/source.py resolve_config's rule: `config` relative to the profile wins, else <model>/config.json
    path = Path(spec["config"]).expanduser() if spec.get("config") else Path(spec["model"]) / "config.json"
    if not path.is_absolute():
        path = profile_dir / path
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise OrinError(f"[{section}] cannot read the model's config.json {path}: {e}") from None


def _has_checkpoint(model_dir: Path) -> bool:
    return (model_dir / "config.json").is_file() and any(model_dir.glob("*.safetensors"))


def disk_need(profile: dict[str, Any], profile_dir: Path, engine_dir: Path, fresh: bool = False) -> list[DiskItem]:
    """What goes where; `fresh`: as on a new Orin (no checkpoint, no TensorRT-LLM build yet), for the dry run."""
    if profile.get("backend") != "trtllm":
        raise OrinError(f"the disk check knows the TensorRT-LLM build; this profile's backend is "
                        f"{profile.get('backend')!r}")
    items = []
    for role in ("target", "draft"):
        spec = profile.get(role)
        if spec is None:
            continue
        cfg = _config(spec, profile_dir, role)
        shape = SimpleNamespace(**hf_fields(cfg, f"[{role}] config.json"))
        ckpt_width = DTYPE_BYTES.get(cfg.get("torch_dtype", "bfloat16"), 2)
        model_dir = Path(spec["model"])
        if fresh or not _has_checkpoint(model_dir):
            items.append(DiskItem(f"{role} checkpoint", model_dir, param_count(shape) * ckpt_width))
        weights = weights_bytes(shape, spec.get("weights", "fp16"), spec.get("dtype", "float16"),
                                spec.get("int4_group_size", 128), "trtllm")
        if shape.tie_word_embeddings:
            items.append(DiskItem(f"{role} lm_head copy", engine_dir / "hf" / role,
                                  shape.vocab_size * shape.hidden_size * ckpt_width))
        items.append(DiskItem(f"{role} converted checkpoint", engine_dir / "ckpt" / role, weights))
        items.append(DiskItem(f"{role} engine", engine_dir / role, weights))
    if fresh or not (TRTLLM_DIR / "build").is_dir():
        items.append(DiskItem("TensorRT-LLM source build (estimate)", TRTLLM_DIR, TRTLLM_SOURCE_BUILD_BYTES))
    return items


def existing(path: Path) -> Path:
    """The nearest directory of `path` that exists (where it will be written)."""
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def mount_of(path: Path) -> str:
    p = existing(path)
    while not os.path.ismount(p) and p != p.parent:
        p = p.parent
    return str(p)


def free_bytes(path: str) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize
