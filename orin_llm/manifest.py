"""The engine directory's `manifest.json`: what was built, from what, with which tools.

Written by the build, read (and validated) by every loader. A broken manifest is refused
with one line that names the problem; the weights are checked against it by size on every
load and by sha256 with `verify_files(..., hashes=True)`.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .arch import Arch
from .errors import OrinError
from .profile import Backend, KvDtype, Weights

SCHEMA_VERSION = 1
MANIFEST = "manifest.json"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FileEntry(_Strict):
    path: str  # relative to the engine dir, or absolute for build sources
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    bytes: int = Field(ge=0)


class KvCacheEntry(_Strict):
    dtype: KvDtype
    scales: Optional[str] = None  # safetensors file with static K/V scales (int8 only)


class ModelEntry(_Strict):
    dir: str
    source: str  # the profile's `model = ...`
    source_files: list[FileEntry]
    arch: Arch
    weights: Weights
    dtype: str
    kv_cache: KvCacheEntry
    files: list[FileEntry]
    # torch engines: the packed weight-only kernels its quantized layers run on a CPU
    # (kernels/quant.py); the loader refuses a CPU whose torch lacks one (runtime/weights.py)
    kernels: list[str] = Field(default_factory=list)


class Manifest(_Strict):
    schema_version: int
    name: str
    backend: Backend
    created_utc: str
    target: ModelEntry
    draft: Optional[ModelEntry] = None
    tokenizer: list[FileEntry]
    limits: dict[str, int]
    tools: dict[str, str]
    profile: dict[str, Any]
    memory_plan: Optional[dict[str, Any]] = None
    lookup_seed: Optional[FileEntry] = None  # plans seeding the lookup drafter's history (build/lookup_seed.py)
    # backend "edgellm": the export's runtime config, the device's commands with their sources, the server's
    # command line (build/edgellm.py)
    edgellm: Optional[dict[str, Any]] = None

    def files(self) -> list[FileEntry]:
        models = [self.target] + ([self.draft] if self.draft else [])
        return [f for m in models for f in m.files] + self.tokenizer + ([self.lookup_seed] if self.lookup_seed else [])


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def file_entry(path: Path, root: Path | None = None) -> FileEntry:
    rel = str(path.relative_to(root)) if root is not None else str(path)
    return FileEntry(path=rel, sha256=sha256_file(path), bytes=path.stat().st_size)


def write_manifest(engine_dir: Path, manifest: Manifest) -> Path:
    path = engine_dir / MANIFEST
    path.write_text(manifest.model_dump_json(indent=2) + "\n")
    return path


def read_json_object(path: Path) -> dict:
    """A JSON object from an engine file, or an OrinError that says to rebuild the engine."""
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise OrinError(f"{path}: not valid JSON ({e}); rebuild the engine") from None
    if not isinstance(data, dict):
        raise OrinError(f"{path}: expected a JSON object; rebuild the engine")
    return data


def load_manifest(engine_dir: str | Path) -> Manifest:
    engine_dir = Path(engine_dir)
    path = engine_dir / MANIFEST
    if not engine_dir.is_dir():
        raise OrinError(f"engine dir {engine_dir} does not exist (build one: orin-llm build --embedded)")
    if not path.is_file():
        raise OrinError(f"{engine_dir} is not an engine directory: no {MANIFEST} (rebuild it)")
    data = read_json_object(path)
    if data.get("schema_version") != SCHEMA_VERSION:
        raise OrinError(f"{path}: schema_version {data.get('schema_version')!r}, this orin-llm reads "
                        f"{SCHEMA_VERSION}; rebuild the engine")
    try:
        manifest = Manifest.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        msg = "unknown field" if err["type"] == "extra_forbidden" else err["msg"]
        raise OrinError(f"{path}: {where}: {msg}; rebuild the engine") from None
    verify_files(engine_dir, manifest, hashes=False)
    return manifest


def verify_files(engine_dir: Path, manifest: Manifest, hashes: bool) -> None:
    """Every file the manifest lists is there with its size (and, if asked, its sha256)."""
    for entry in manifest.files():
        f = engine_dir / entry.path
        if not f.is_file():
            raise OrinError(f"{engine_dir}: {entry.path} is listed in {MANIFEST} but missing; rebuild")
        size = f.stat().st_size
        if size != entry.bytes:
            raise OrinError(f"{engine_dir}: {entry.path} has {size} bytes, {MANIFEST} says "
                            f"{entry.bytes}; rebuild")
        if hashes and sha256_file(f) != entry.sha256:
            raise OrinError(f"{engine_dir}: {entry.path} sha256 differs from {MANIFEST}; rebuild")
