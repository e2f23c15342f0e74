"""Profile → engine directory. Written into a temp dir beside the target and renamed at the end,
so a failed build never leaves a half-engine where a good one is expected."""

from __future__ import annotations

import datetime as dt
import platform
import shutil
import tempfile
from pathlib import Path

from .. import __version__
from ..arch import arch_from_config_file
from ..errors import OrinError
from ..manifest import SCHEMA_VERSION, KvCacheEntry, Manifest, ModelEntry, file_entry, write_manifest
from ..profile import Profile
from ..progress import Steps
from .source import resolve_source


def tool_versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {"orin-llm": __version__, "python": platform.python_version()}
    for dist in ("torch", "transformers", "tokenizers", "safetensors", "gguf"):
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            pass
    return out


def _files(root: Path, sub: str) -> list:
    return [file_entry(p, root) for p in sorted((root / sub).rglob("*")) if p.is_file()]


def build_engine(profile: Profile, out: Path, profile_dir: Path | None = None, quiet: bool = False,
                 force: bool = False) -> Path:
    if profile.backend != "torch":
        raise OrinError(f"profile {profile.name!r} targets backend {profile.backend!r}; "
                        "this build writes torch engines (TensorRT-LLM builds: see `--dry-run`)")
    if out.exists() and not force:
        raise OrinError(f"{out} already exists; pass --force to replace it")
    from .convert import export_model, export_tokenizer, load_hf_model, load_hf_tokenizer

    steps = Steps(4, quiet)
    source = resolve_source(profile.target.model, profile_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    tmp.chmod(0o755)  # mkdtemp makes it 0700; an engine is read by the daemon's user too
    try:
        with steps.step(f"hashing {len(source.files)} source file(s)"):
            source_files = [file_entry(f) for f in source.files]
        with steps.step(f"loading {source.path.name} ({source.kind})"):
            model = load_hf_model(source, profile.target.dtype)
            tokenizer = load_hf_tokenizer(source)
        with steps.step("writing target weights and tokenizer"):
            export_model(model, tmp / "target")
            export_tokenizer(tokenizer, tmp / "tokenizer")
            del model
        with steps.step("writing manifest"):
            target = ModelEntry(
                dir="target", source=profile.target.model, source_files=source_files,
                arch=arch_from_config_file(tmp / "target"), weights=profile.target.weights,
                dtype=profile.target.dtype, kv_cache=KvCacheEntry(dtype=profile.target.kv_cache),
                files=_files(tmp, "target"))
            manifest = Manifest(
                schema_version=SCHEMA_VERSION, name=profile.name, backend=profile.backend,
                created_utc=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                target=target, tokenizer=_files(tmp, "tokenizer"),
                limits=profile.limits.model_dump(), tools=tool_versions(),
                profile=profile.model_dump(mode="json"))
            write_manifest(tmp, manifest)
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out
