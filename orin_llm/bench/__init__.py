"""`orin-llm bench`: measured, side-by-side numbers. Every scenario writes <out>/<scenario>.json
(with the machine and the command) and, where a picture helps, <out>/<scenario>.png; memory and
power are sampled by phase throughout, and report.md sums it all up.

Every scenario runs on a torch or a TensorRT-LLM engine (runtime.loader.load_engine picks the
runtime by the manifest). What has no meaning on one backend is left out of its JSON with the
reason, never replaced by another number: the torch decode-step variants (exact/fast) and the
teacher-forced INT8 KV agreement, which needs logits a TensorRT-LLM target does not return (kv.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional


def run_scenarios(names, engine_dir: Path, out: Path, quick: bool, policy_onnx: Optional[Path] = None,
                  policy_rate_hz: float = 30.0, llama_python: Optional[str] = None,
                  splits: Optional[tuple[str, ...]] = None) -> Path:
    from ..manifest import load_manifest
    from .common import loaded, progress, pyplot
    from .report import write_report
    from .sampler import Sampler

    manifest = load_manifest(engine_dir)  # a clear error before any work
    out.mkdir(parents=True, exist_ok=True)
    with Sampler() as sampler:
        for name in names:
            sampler.phase = name
            progress(f"scenario {name}")
            if name == "prefix":
                from .prefix import run

                with loaded(engine_dir, device="cpu", draft=False) as engine:
                    run(engine, out, quick)
            elif name == "kv":
                from .kv import run

                run(engine_dir, out, quick)
            elif name == "speculative":
                from .speculative import run

                run(engine_dir, out, quick)
            elif name == "constrained":
                from .constrained import run

                if manifest.backend != "torch":  # the fake-tested logits post-processor path cannot run here
                    progress("constrained: torch engines only (TensorRT-LLM applies the grammar through its "
                             "logits post-processor, tested through the fake); skipped")
                    continue
                with loaded(engine_dir, device="cpu") as engine:
                    run(engine, out, quick)
            elif name == "plan_quality":
                from .plan_quality import run

                if manifest.backend != "torch":  # as constrained: the grammar runs on torch engines here
                    progress("plan_quality: torch engines only (TensorRT-LLM applies the grammar through its "
                             "logits post-processor, tested through the fake); skipped")
                    continue
                with loaded(engine_dir, device="cpu") as engine:
                    run(engine, out, quick, **({"splits": splits} if splits else {}))
            elif name == "daemon":
                from .daemon import run

                run(engine_dir, out, quick)
            elif name == "policy":
                from .policy import run

                run(engine_dir, out, quick, policy_onnx, policy_rate_hz)
            elif name == "traffic":  # issue #15's four: each through a daemon of its own
                from .traffic import run

                run(engine_dir, out, quick)
            elif name == "agents":
                from .agents import run

                run(engine_dir, out, quick)
            elif name == "throughput":
                from .throughput import run

                run(engine_dir, out, quick)
            elif name == "fleet":  # issue #35: robots' daemons against vLLM replicas behind vLLM's router
                from .fleet import run

                run(engine_dir, out, quick)
            elif name == "restart":
                from .restart import run

                run(engine_dir, out, quick)
            elif name == "kernels":  # issue 44: each kernel family against the float reference and llama.cpp
                from .kernels import run

                run(engine_dir, out, quick, llama_python)
        sampler.phase = "done"
    (out / "samples.json").write_text(json.dumps({**sampler.summary(), "samples": sampler.samples}, indent=1))
    if sampler.samples:
        plt = pyplot()
        fig, ax = plt.subplots(figsize=(7, 3.5))
        for phase in dict.fromkeys(s["phase"] for s in sampler.samples):
            pts = [s for s in sampler.samples if s["phase"] == phase]
            ax.plot([s["t_s"] for s in pts], [s["mem_used_bytes"] / 2**30 for s in pts], ".", label=phase)
        ax.set_xlabel("time (s)")
        ax.set_ylabel("memory used (GiB)")
        ax.set_title(f"memory by phase ({sampler.source})")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / "samples.png", dpi=120)
    return write_report(out, manifest)
