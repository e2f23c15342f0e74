"""Profile → engine directory.

torch: convert the target, quantize the draft, calibrate INT8 KV scales, write the manifest.
trtllm: the same memory plan, then TensorRT-LLM's own tools as subprocesses (build/trtllm.py).
edgellm: the same memory plan, then TensorRT Edge-LLM's export here and its engine build on the Orin
(build/edgellm.py, build/edgellm_pipeline.py).
Written into a temp dir beside the target and renamed at the end, so a failed build never leaves
a half-engine where a good one is expected.
"""

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
from ..profile import ModelSpec, Profile
from ..progress import Steps
from .memory import MemoryPlan, check_feasible, engine_file_sizes, format_plan, plan_memory
from .source import Source, load_arch, resolve_source
from .staged import staged


def tool_versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {"orin-llm": __version__, "python": platform.python_version()}
    for dist in ("torch", "transformers", "tokenizers", "safetensors", "gguf", "tensorrt_llm"):
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            pass
    return out


def _files(root: Path, sub: str) -> list:
    return [file_entry(p, root) for p in sorted((root / sub).rglob("*")) if p.is_file()]


def _entry(root: Path, sub: str, spec: ModelSpec, source: Source, source_files: list) -> ModelEntry:
    from ..kernels.quant import kernels_for  # torch: imported when a torch build runs

    return ModelEntry(dir=sub, source=spec.model, source_files=source_files,
                      arch=arch_from_config_file(root / sub), weights=spec.weights, dtype=spec.dtype,
                      kv_cache=KvCacheEntry(dtype=spec.kv_cache), files=_files(root, sub),
                      kernels=kernels_for(spec.weights, spec.int4_group_size))


def _manifest(profile: Profile, root: Path, target: ModelEntry, draft: Optional[ModelEntry],
              plan: MemoryPlan) -> Manifest:
    seed = None
    if profile.lookup_seed != "none":
        from .lookup_seed import write_lookup_seed

        seed = write_lookup_seed(root, profile.lookup_seed)
    return Manifest(lookup_seed=seed,
        schema_version=SCHEMA_VERSION, name=profile.name, backend=profile.backend,
        created_utc=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        target=target, draft=draft, tokenizer=_files(root, "tokenizer"),
        limits=profile.limits.model_dump(), tools=tool_versions(),
        profile=profile.model_dump(mode="json"), memory_plan=plan.as_dict())


def build_engine(profile: Profile, out: Path, profile_dir: Path | None = None, quiet: bool = False,
                 force: bool = False, dry_run: bool = False) -> Path:
    plan = check_feasible(plan_memory(profile, profile_dir))  # infeasible: refused with the numbers
    if profile.backend == "trtllm":
        return _build_trtllm(profile, out, profile_dir, plan, quiet, force, dry_run)
    if profile.backend == "edgellm":
        from .edgellm_pipeline import build_edgellm

        return build_edgellm(profile, out, profile_dir, plan, quiet, force, dry_run)
    if dry_run:
        print(format_plan(plan))
        print(f"# torch build: convert {profile.target.model} ({profile.target.weights})"
              + (f", quantize draft {profile.draft.model} ({profile.draft.weights})" if profile.draft else "")
              + (", calibrate INT8 KV scales" if _needs_scales(profile) else ""))
        return out
    if out.exists() and not force:
        raise OrinError(f"{out} already exists; pass --force to replace it")
    from .convert import export_model, export_q4_1, export_quantized, export_tokenizer, load_hf_model, load_hf_tokenizer

    steps = Steps(5 if _needs_scales(profile) else 4, quiet)
    source = resolve_source(profile.target.model, profile_dir)
    draft_source = resolve_source(profile.draft.model, profile_dir) if profile.draft else None
    with staged(out) as tmp:
        with steps.step("hashing source files"):
            hashes = {s.path: [file_entry(f) for f in s.files] for s in (source, draft_source) if s}
        with steps.step(f"loading and writing the target from {source.path.name} ({source.kind})"):
            model = load_hf_model(source, profile.target.dtype)
            export_model(model, tmp / "target")
            if profile.target.weights == "q4_1":  # the GGUF's blocks beside the float export (runtime/weights.py)
                export_q4_1(model, tmp / "target")
            export_tokenizer(load_hf_tokenizer(source), tmp / "tokenizer")
        draft_entry = None
        if profile.draft and draft_source:
            with steps.step(f"quantizing the draft ({profile.draft.weights})"):
                same = draft_source.path == source.path and profile.draft.dtype == profile.target.dtype
                draft_model = model if same else load_hf_model(draft_source, profile.draft.dtype)
                if draft_model.config.vocab_size != model.config.vocab_size:
                    raise OrinError("the draft model must share the target's tokenizer (vocab sizes "
                                    f"{draft_model.config.vocab_size} vs {model.config.vocab_size})")
                if profile.draft.weights in ("int8_wo", "int4_wo"):
                    export_quantized(draft_model, tmp / "draft", profile.draft.weights,
                                     profile.draft.int4_group_size)
                else:
                    export_model(draft_model, tmp / "draft")
                draft_entry = _entry(tmp, "draft", profile.draft, draft_source, hashes[draft_source.path])
        del model
        with steps.step("writing manifest"):
            target = _entry(tmp, "target", profile.target, source, hashes[source.path])
            write_manifest(tmp, _manifest(profile, tmp, target, draft_entry, plan))
        if _needs_scales(profile):
            with steps.step(f"calibrating INT8 KV scales on the {profile.calibration} split"):
                from .calibrate import calibrate_engine

                calibrate_engine(tmp, profile.calibration, profile.calibration_size, quiet=quiet)
    return out


def _needs_scales(profile: Profile) -> bool:
    kv = [profile.target.kv_cache] + ([profile.draft.kv_cache] if profile.draft else [])
    if "int8" in kv and profile.calibration == "none":
        raise OrinError("an INT8 KV cache needs calibrated scales: "
                        "set calibration = \"calib\" in the profile")
    return "int8" in kv


def _build_trtllm(profile: Profile, out: Path, profile_dir: Optional[Path], plan: MemoryPlan,
                  quiet: bool, force: bool, dry_run: bool) -> Path:
    from .trtllm import build_trtllm, format_steps

    if dry_run:
        steps = build_trtllm(profile, out, profile_dir, dry_run=True, quiet=True)
        print(format_plan(plan))
        print(format_steps(steps))
        return out
    if out.exists() and not force:
        raise OrinError(f"{out} already exists; pass --force to replace it")
    build_trtllm(profile, out, profile_dir, dry_run=False, quiet=quiet)
    # The plan again, with the engine files' real sizes (measured) for the weights and the load's moment:
    # an engine bigger than its estimate is refused here, with the numbers, before a daemon tries it.
    sizes = engine_file_sizes(out)
    if set(sizes) != {r for r, s in (("target", profile.target), ("draft", profile.draft)) if s is not None}:
        raise OrinError(f"{out}: trtllm-build left no rank*.engine for every model (found: {sorted(sizes) or 'none'}); "
                        f"see the build's logs in {out}/logs")
    plan = check_feasible(plan_memory(profile, profile_dir, engine_files=sizes))
    # The engines are TensorRT-LLM's; the manifest records them with the same schema. The tokenizer
    # (and the EOS ids in generation_config.json) come from the target's HF dir; the draft shares it.
    target_src = resolve_source(profile.target.model, profile_dir)
    (out / "tokenizer").mkdir(exist_ok=True)
    names = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json")
    for name in names:
        if (target_src.path / name).is_file():
            shutil.copy(target_src.path / name, out / "tokenizer" / name)
    entries = {}
    for role, spec in (("target", profile.target), ("draft", profile.draft)):
        if spec is None:
            continue
        src = resolve_source(spec.model, profile_dir)
        entries[role] = ModelEntry(
            dir=role, source=spec.model, source_files=[file_entry(f) for f in src.files],
            arch=load_arch(spec, profile_dir, section=role), weights=spec.weights,
            dtype=spec.dtype, kv_cache=KvCacheEntry(dtype=spec.kv_cache), files=_files(out, role))
    write_manifest(out, _manifest(profile, out, entries["target"], entries.get("draft"), plan))
    print(f"TensorRT-LLM engines and manifest written to {out}", file=sys.stderr)
    return out
