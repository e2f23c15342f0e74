"""`orin-llm build` for backend "edgellm": the steps of build/edgellm.py run (here) or printed (the
device's), the engine directory and its manifest written. Staged like every build: a failed export
leaves no half engine."""

from __future__ import annotations

import datetime as dt
import platform
import shutil
import sys
from pathlib import Path
from typing import Optional

from .. import __version__
from ..arch import arch_from_config_file
from ..errors import OrinError
from ..manifest import SCHEMA_VERSION, KvCacheEntry, Manifest, ModelEntry, file_entry, write_manifest
from ..profile import Profile
from .edgellm import (
    TOKENIZER_FILES,
    edgellm_bin,
    edgellm_steps,
    export_summary,
    format_steps,
    python_of,
    run_export,
    server_argv,
    steps_record,
    tool_versions,
)
from .memory import MemoryPlan, format_plan
from .source import profile_path, resolve_source
from .staged import staged


def build_edgellm(profile: Profile, out: Path, profile_dir: Optional[Path], plan: MemoryPlan,
                  quiet: bool, force: bool, dry_run: bool) -> Path:
    steps = edgellm_steps(profile, out, profile_dir)  # refuses what Edge-LLM 0.11 cannot do on Orin
    if dry_run:
        print(format_plan(plan))
        print(format_steps(steps))
        return out
    if out.exists() and not force:
        raise OrinError(f"{out} already exists; pass --force to replace it")
    if any(s.where == "gpu-host" for s in steps):
        quantize = next(s for s in steps if s.where == "gpu-host")
        raise OrinError("INT4 AWQ quantization needs a CUDA GPU (tensorrt-edgellm-quantize --device cuda): run on a "
                        f"GPU host\n  {quantize.line()}\nthen point target.model at its output directory and build "
                        "again")
    export = edgellm_bin("tensorrt-edgellm-export")
    versions = tool_versions(python_of(export))
    source = resolve_source(profile.target.model, profile_dir)
    with staged(out) as tmp:
        local = [s for s in steps if s.where == "here"]
        seconds = 0.0
        for step in local:  # the export, into the staged directory (its argv names `out`)
            argv = tuple(a.replace(str(out), str(tmp)) for a in step.argv)
            seconds += run_export(type(step)(step.name, step.where, argv, step.source), tmp, quiet)
        llm = tmp / "onnx" / "llm"
        summary = export_summary(llm)
        (tmp / "tokenizer").mkdir()
        for name in TOKENIZER_FILES:
            if (llm / name).is_file():
                shutil.copy(llm / name, tmp / "tokenizer" / name)
        if (source.path / "generation_config.json").is_file():  # the EOS ids the daemon stops on
            shutil.copy(source.path / "generation_config.json", tmp / "tokenizer" / "generation_config.json")
        checkpoint = profile_path(profile.target.model, profile_dir)
        target = ModelEntry(dir="onnx/llm", source=profile.target.model,
                            source_files=[file_entry(f) for f in source.files],
                            arch=arch_from_config_file(source.path), weights=profile.target.weights,
                            dtype=profile.target.dtype, kv_cache=KvCacheEntry(dtype="fp16"),
                            files=[file_entry(p, tmp) for p in sorted((tmp / "onnx").rglob("*")) if p.is_file()])
        device = [s for s in steps if s.where != "here"]
        manifest = Manifest(
            schema_version=SCHEMA_VERSION, name=profile.name, backend="edgellm",
            created_utc=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            target=target, tokenizer=[file_entry(p, tmp) for p in sorted((tmp / "tokenizer").iterdir())],
            limits=profile.limits.model_dump(),
            tools={"orin-llm": __version__, "python": platform.python_version(), **versions},
            profile=profile.model_dump(mode="json"), memory_plan=plan.as_dict(),
            edgellm={"export": summary, "export_seconds": round(seconds, 1), "device_steps": steps_record(device),
                     "server_argv": server_argv(profile, checkpoint, out)})
        write_manifest(tmp, manifest)
    if not quiet:
        print(f"Edge-LLM export and manifest written to {out}; on the Orin:\n{format_steps(device)}", file=sys.stderr)
    return out
