"""The TensorRT Edge-LLM 0.11 build (JetPack 7): profile → ONNX export here → engines on the Orin.

Edge-LLM's own workflow has two halves on two machines (its 0.11.0 Quick Start, "Option 1"): the
export of a Hugging Face checkpoint to ONNX, which runs on any CPU, and the TensorRT engine build,
which runs on the device the engine is for. `orin-llm build` runs the first half for real, in the
virtual environment `make edgellm` makes (Edge-LLM pins torch, transformers and onnx versions of its
own), and writes an engine directory whose manifest lists the second half: each command with where it
runs and its source. `--dry-run` prints all of it. Every flag is cited in `edgellm_steps`; the citations
(`W:` the 0.11.0 wheel's files, `QS` the Quick Start) are explained in backends/edgellm/rules.py.

The engine directory:

    manifest.json         backend "edgellm", versions, limits, the memory plan, the device's commands
    onnx/llm/             what tensorrt-edgellm-export wrote: model.onnx (+ .data), config.json (the runtime
                          config: kv_cache_dtype, eos ids), embedding.safetensors, tokenizer, chat template
    tokenizer/            the tokenizer files the daemon encodes with (copied from onnx/llm/)
    logs/export.log

Nothing here imports Edge-LLM: its tools run as subprocesses of their own Python.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

from ..backends.edgellm.rules import EDGELLM_VERSION, kv_capacity, profile_refusal
from ..errors import OrinError
from ..profile import Profile
from .source import profile_path

# Where `make edgellm` installs Edge-LLM (beside the repository's own .venv); ORIN_LLM_EDGELLM_BIN overrides.
REPO = Path(__file__).resolve().parents[2]
DEFAULT_BIN = REPO / ".venv-edgellm" / "bin"
SERVER_PORT = 8000  # the server's own default (W:experimental/server/config.py L291), bound to loopback
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


@dataclass(frozen=True)
class EdgeStep:
    name: str
    where: str  # "here" (orin-llm build runs it), "gpu-host" (a CUDA x86 host), "device" (the Orin)
    argv: tuple[str, ...]
    source: str  # the file and lines, or the doc section, each flag comes from

    def line(self) -> str:
        return shlex.join(self.argv)


def edgellm_bin(tool: str) -> Path:
    """An Edge-LLM console script: $ORIN_LLM_EDGELLM_BIN/tool, else .venv-edgellm's, else on PATH."""
    for d in (os.environ.get("ORIN_LLM_EDGELLM_BIN"), str(DEFAULT_BIN)):
        if d and (Path(d) / tool).is_file():
            return Path(d) / tool
    found = shutil.which(tool)
    if found is None:
        raise OrinError(f"{tool} not found: run `make edgellm` (tensorrt-edgellm {EDGELLM_VERSION} in .venv-edgellm), "
                        "or set ORIN_LLM_EDGELLM_BIN to the bin directory of an environment that has it")
    return Path(found)


def is_prequantized(checkpoint: Path) -> bool:
    """A checkpoint ModelOpt (or GPTQ) quantized already: its config.json says how."""
    try:
        cfg = json.loads((checkpoint / "config.json").read_text())
    except (OSError, ValueError):
        return False
    return bool(cfg.get("quantization_config")) or (checkpoint / "hf_quant_config.json").is_file()


def edgellm_steps(profile: Profile, out: Path, profile_dir: Optional[Path]) -> list[EdgeStep]:
    """Every command of the build, in order, with where it runs and its source."""
    refusal = profile_refusal(profile)
    if refusal is not None:
        raise OrinError(refusal)
    lim = profile.limits
    checkpoint = profile_path(profile.target.model, profile_dir)
    steps = []
    export_from = checkpoint
    if profile.target.weights == "int4_awq" and not is_prequantized(checkpoint):
        export_from = out / "quantized"
        steps.append(EdgeStep(
            "quantize", "gpu-host",
            ("tensorrt-edgellm-quantize", "llm", "--model_dir", str(checkpoint), "--output_dir", str(export_from),
             "--quantization", "int4_awq"),
            "W:tensorrt_edgellm/scripts/quantize.py L133-134 (llm, --model_dir), L51 (--output_dir), L52-56 "
            "(--quantization int4_awq), L102 (--device cuda: a GPU host); QS §1 'Quantization is optional'"))
    steps.append(EdgeStep(
        "export", "here", ("tensorrt-edgellm-export", str(export_from), str(out / "onnx")),
        "W:tensorrt_edgellm/scripts/export.py L3955-3963 (positional model, output_dir; llm/ is created); "
        "QS §1 'Export the Checkpoint' (unquantized and pre-quantized checkpoints export on CPU)"))
    capacity = kv_capacity(profile, lim.max_batch_size * lim.max_seq_len + profile.cached_prefix_tokens)
    steps.append(EdgeStep(
        "llm_build", "device",
        ("./build/examples/llm/llm_build", "--onnxDir", str(out / "onnx" / "llm"), "--engineDir",
         str(out / "engines" / "llm"), "--maxBatchSize", str(lim.max_batch_size), "--maxInputLen",
         str(lim.max_input_len), "--maxKVCacheCapacity", str(capacity)),
        "QS §2 'Build the Engines' (./build/examples/llm/llm_build --onnxDir --engineDir --maxBatchSize "
        "--maxInputLen --maxKVCacheCapacity, run on the target from the repository root): the C++ runtime's "
        "engine (llm_inference)"))
    steps.append(EdgeStep("serve", "device", tuple(server_argv(profile, export_from, out)),
                          "W:experimental/server/config.py L284-291 (model, --host, --port), L317-322 "
                          "(--cache-dir: a cache miss builds every component), L336-340 (--max-input-len, "
                          "--max-batch-size, --max-kv-cache-capacity), L349-354 (--enable-context-reuse), "
                          "L355-363 (--enable-in-flight-batching), L307 (--max-queued-requests); the server "
                          "builds its engines from the checkpoint, not from the ONNX export "
                          "(W:experimental/server/runtime/engine_build.py L120-123)"))
    return steps


def server_argv(profile: Profile, checkpoint: Path, out: Path, port: int = SERVER_PORT) -> list[str]:
    """The daemon's engine process on the Orin: Edge-LLM's OpenAI server on loopback (backends/edgellm), from
    the checkpoint the export read (a quantized one where the build quantizes)."""
    lim = profile.limits
    capacity = kv_capacity(profile, lim.max_batch_size * lim.max_seq_len + profile.cached_prefix_tokens)
    argv = ["tensorrt-edgellm-serve", str(checkpoint), "--host", "127.0.0.1", "--port", str(port),
            "--cache-dir", str(out / "serve-cache"), "--max-input-len", str(lim.max_input_len),
            "--max-batch-size", str(lim.max_batch_size), "--max-kv-cache-capacity", str(capacity),
            "--max-queued-requests", str(lim.max_batch_size * 8)]
    if profile.prefix_reuse:
        argv.append("--enable-context-reuse")
    if lim.max_batch_size > 1:
        argv.append("--enable-in-flight-batching")
    return argv


def format_steps(steps: list[EdgeStep]) -> str:
    where = {"here": "here (orin-llm build runs it)", "gpu-host": "on an x86 host with a CUDA GPU",
             "device": "on the Orin (JetPack 7)"}
    lines = ["# TensorRT Edge-LLM " + EDGELLM_VERSION + " build"]
    for i, s in enumerate(steps, 1):
        lines += [f"# {i}. {s.name}: {where[s.where]}", f"#    source: {s.source}", s.line()]
    return "\n".join(lines)


def tool_versions(python: Path) -> dict[str, str]:
    """The export environment's versions (its own Python: Edge-LLM's pins are not ours)."""
    code = ("import importlib.metadata as m, json, platform; out = {'edgellm_python': platform.python_version()}\n"
            "for d in ('tensorrt-edgellm', 'torch', 'transformers', 'onnx', 'onnxscript', 'onnx-graphsurgeon'):\n"
            "    try: out['edgellm_env:' + d] = m.version(d)\n    except m.PackageNotFoundError: pass\n"
            "print(json.dumps(out))")
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise OrinError(f"cannot read the Edge-LLM environment's versions: {done.stderr.strip()[-300:]}")
    return json.loads(done.stdout)


def run_export(step: EdgeStep, out: Path, quiet: bool) -> float:
    """Run the export step with its log in out/logs/export.log; its seconds."""
    tool = edgellm_bin(step.argv[0])
    (out / "logs").mkdir(parents=True, exist_ok=True)
    log = out / "logs" / "export.log"
    t0 = time.perf_counter()
    with open(log, "w") as f:
        f.write("+ " + step.line() + "\n")
        f.flush()
        done = subprocess.run([str(tool), *step.argv[1:]], stdout=f, stderr=subprocess.STDOUT,
                              env={**os.environ, "PYTHONUNBUFFERED": "1"})
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        tail = log.read_text()[-1500:]
        raise OrinError(f"tensorrt-edgellm-export failed (exit {done.returncode}); its log: {log}\n{tail}")
    if not quiet:
        print(f"  export: {seconds:.1f} s ({log})", file=sys.stderr)
    return seconds


def export_summary(llm_dir: Path) -> dict:
    """What the export's runtime config says (onnx/llm/config.json), checked against what the backend needs."""
    try:
        config = json.loads((llm_dir / "config.json").read_text())
    except (OSError, ValueError) as e:
        raise OrinError(f"{llm_dir}: no runtime config the export should have written ({e})") from None
    if config.get("kv_cache_dtype") != "fp16":
        raise OrinError(f"{llm_dir}/config.json: kv_cache_dtype {config.get('kv_cache_dtype')!r}; on Orin "
                        "Edge-LLM's KV cache is FP16 (backends/edgellm/rules.py)")
    missing = [n for n in ("model.onnx", "embedding.safetensors", "tokenizer.json") if not (llm_dir / n).is_file()]
    if missing:
        raise OrinError(f"{llm_dir}: the export left no {', '.join(missing)}; see logs/export.log")
    return {k: config.get(k) for k in ("model", "edgellm_version", "kv_cache_dtype", "eos_token_id", "vocab_size",
                                       "num_hidden_layers", "num_key_value_heads", "head_dim")}


def steps_record(steps: list[EdgeStep]) -> list[dict]:
    return [{**asdict(s), "argv": list(s.argv)} for s in steps]


def python_of(tool: Path) -> Path:
    """The interpreter of a console script's environment (its bin/python)."""
    return tool.parent / "python"
