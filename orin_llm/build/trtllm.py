"""The TensorRT-LLM 0.12.0-jetson build: profile → checkpoint → engine, as data first.

The checkpoints take NVIDIA's documented Jetson path (README4Jetson): examples/llama/convert_checkpoint.py,
weight-only INT4 (`int4_wo`) or a GPTQ checkpoint (`int4_gptq`); what needs calibration (AWQ, a static
INT8 KV cache) goes through ModelOpt's examples/quantization/quantize.py, which that guide never uses,
and the dry run says so on each such step.

`trtllm_steps` turns a profile into the exact commands (a list of :class:`Step`), so a dry run
prints what a real build would run and a golden test pins it. `run_steps` runs them with logs.

Every flag below was checked against `docs/trtllm-0.12-jetson.md` ("the doc"), which cites the
TensorRT-LLM sources at v0.12.0 (R) / the v0.12.0-jetson branch (J); "R≡J" = unchanged on J.
Nothing here imports tensorrt_llm: the build runs its scripts, so this module works on a laptop.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..backends.trtllm.rules import TOKENS_PER_BLOCK, EngineSetup, engine_setups, profile_refusal
from ..errors import OrinError
from ..profile import ModelSpec, Profile
from ..progress import Steps
from .calib_prompts import write_calib_dataset
from .source import profile_path

__all__ = ["CALIB_SIZE", "Step", "build_trtllm", "check_trtllm_profile", "format_steps", "run_steps",
           "trtllm_steps", "write_calib_dataset"]

# Where a from-source install of the v0.12.0-jetson branch keeps its examples (jetson/setup.sh).
DEFAULT_TRTLLM_ROOT = "/opt/TensorRT-LLM"
SETUP_HINT = ("TensorRT-LLM 0.12.0-jetson is not installed (trtllm-build is not on PATH, or the "
              "source tree with examples/ is missing): run jetson/setup.sh on the Orin")

# AWQ uses at most 32 calibration samples: quantize_by_modelopt forces calib_size to 32 whenever it is
# larger (doc §2, R≡J quantize_by_modelopt.py L407-412). We pass 32 so the command says what happens;
# the static INT8 KV scales come from the same calibration pass. write_calib_dataset interleaves the
# homes so the first 32 rows (quantize.py takes `["text"][:calib_size]`, doc §2.1) span all of them.
CALIB_SIZE = 32

_QFORMAT = {"int4_awq": "int4_awq", "int8_wo": "int8_wo", "int4_wo": "int4_wo"}
_UNQUANTIZED_DTYPE = {"fp16": "float16", "bf16": "bfloat16"}
_ROLES = ("draft", "target")


@dataclass(frozen=True)
class Step:
    name: str
    argv: tuple[str, ...]
    log: str  # file name under <out>/logs/


# ---------------------------------------------------------------------------
# Validation


def _needs_calibration(spec: ModelSpec) -> bool:
    return spec.weights == "int4_awq" or spec.kv_cache == "int8"


def _models(profile: Profile) -> list[tuple[str, ModelSpec]]:
    return [(r, s) for r, s in (("draft", profile.draft), ("target", profile.target)) if s is not None]


def check_trtllm_profile(profile: Profile) -> None:
    """Refuse what TensorRT-LLM 0.12 cannot build (or would silently change) with a one-line fix."""
    for role, spec in _models(profile):
        if spec.kv_cache not in ("fp16", "int8"):
            raise OrinError(
                f"{role}.kv_cache = {spec.kv_cache!r} is not supported on backend 'trtllm': TensorRT-LLM "
                "0.12 on Orin keeps the KV cache in fp16 or int8 (fp8 needs SM89+); set kv_cache = "
                "\"fp16\" or \"int8\"")
        if spec.dtype == "float32":
            raise OrinError(
                f"{role}.dtype = 'float32' is not supported on backend 'trtllm' (its weight-only and "
                "attention kernels run in fp16/bf16); set dtype = \"float16\"")
        if spec.weights == "q4_1":
            raise OrinError(f"{role}.weights = 'q4_1' is the torch backend's (a GGUF's own Q4_1 blocks on "
                            "torch's packed int4 kernel); TensorRT-LLM quantizes float weights: use "
                            "\"int4_wo\" (README4Jetson's INT4 default)")
        if spec.weights == "fp32":
            raise OrinError(f"{role}.weights = 'fp32' is not supported on backend 'trtllm'; "
                            "use \"int4_wo\", \"int4_gptq\", \"int8_wo\", \"fp16\" or \"int4_awq\"")
        if spec.weights in _UNQUANTIZED_DTYPE and _UNQUANTIZED_DTYPE[spec.weights] != spec.dtype:
            raise OrinError(
                f"{role}: weights = {spec.weights!r} but dtype = {spec.dtype!r}; TensorRT-LLM stores "
                "unquantized weights in the compute dtype: use weights = \"fp16\" with dtype = \"float16\" "
                "or weights = \"bf16\" with dtype = \"bfloat16\"")
        if spec.model.startswith("package:") or spec.model.endswith(".gguf"):
            raise OrinError(
                f"{role}.model = {spec.model!r}: TensorRT-LLM 0.12 converts Hugging Face model "
                "directories, not GGUF files; point model at the HF checkpoint directory")
        if spec.weights == "int4_gptq" and spec.kv_cache == "int8":
            raise OrinError(
                f"{role}: weights = 'int4_gptq' with kv_cache = 'int8': a GPTQ checkpoint goes through "
                "convert_checkpoint.py, whose --int8_kv_cache calibrates only on a downloaded Hugging Face "
                "dataset (docs/trtllm-0.12-jetson.md §1); set kv_cache = \"fp16\"")
    # What 0.12 refuses to build or load (INT8 KV with paged context FMHA, block reuse or chunked
    # context without it, a draft-tokens target without block reuse): orin_llm/backends/trtllm/rules.py.
    # Before the calibration check: no calibration setting fixes a combination 0.12 refuses.
    refusal = profile_refusal(profile)
    if refusal is not None:
        raise OrinError(refusal)
    for role, spec in _models(profile):
        if _needs_calibration(spec) and profile.calibration == "none":
            raise OrinError(
                f"{role} needs calibration ({spec.weights} weights, {spec.kv_cache} KV cache) but the "
                "profile sets calibration = \"none\"; set calibration = \"calib\"")
    limits = profile.limits
    if profile.draft is not None:
        k = limits.draft_len
        room = limits.max_seq_len - limits.max_input_len
        if room < k + 1:
            raise OrinError(
                f"limits.draft_len = {k} needs room for {k + 1} new tokens per step but max_seq_len - "
                f"max_input_len = {room}; raise limits.max_seq_len or lower limits.draft_len")
        # The builder silently raises max_num_tokens to max_batch_size*(max_draft_len+1) (doc §3,
        # R≡J builder.py L898-916); refuse instead, so the engine matches the profile's memory plan.
        need = limits.max_batch_size * (k + 1)
        if limits.max_num_tokens < need:
            raise OrinError(
                f"limits.max_num_tokens = {limits.max_num_tokens} is below max_batch_size × (draft_len + 1)"
                f" = {need}, which TensorRT-LLM would raise it to; set limits.max_num_tokens >= {need}")


# ---------------------------------------------------------------------------
# The commands


# README4Jetson (J: README4Jetson.md, the only Jetson document of v0.12.0-jetson) builds every engine
# from examples/llama/convert_checkpoint.py: weight-only INT4 ("INT4 Default", L102-110:
# `--weight_only_precision int4`) or a GPTQ checkpoint as it is ("INT4 GPTQ", L112-120 and §2.1
# L46-53: `--use_weight_only --weight_only_precision int4_gptq --per_group`). Flags (R≡J
# examples/llama/convert_checkpoint.py): --model_dir L22, --dtype L47-50 (float32|bfloat16|float16),
# --use_weight_only L62-67, --weight_only_precision L76-86 (int8|int4|int4_gptq), --per_group L142-149,
# --group_size L158-162 (default 128), --output_dir L189-192. args_to_quant_config (L240-278) gives
# W8A16/W4A16 only with --use_weight_only, and W4A16_GPTQ from int4_gptq (group_size, zero points).
_WEIGHT_ONLY = {"int4_wo": "int4", "int8_wo": "int8", "int4_gptq": "int4_gptq"}
# What only ModelOpt's quantize.py does (not in NVIDIA's Jetson guide): AWQ, and static INT8 KV scales
# from our own calibration prompts. convert_checkpoint.py --int8_kv_cache calibrates through
# load_calib_dataset, which reads a named Hugging Face dataset (default ccdv/cnn_dailymail, downloaded)
# and cannot read a local directory (doc §1, R≡J convert_utils.py L214-242): no use on a robot.
MODELOPT_NOTE = "ModelOpt quantize.py: not in NVIDIA's Jetson guide"


def checkpoint_tool(spec: ModelSpec) -> str:
    """Which 0.12 script makes this model's TensorRT-LLM checkpoint."""
    return "quantize.py" if _needs_calibration(spec) else "convert_checkpoint.py"


def _checkpoint_steps(role: str, spec: ModelSpec, model_dir: Path, profile: Profile, out: Path,
                      trtllm_root: str, python: str, calib_size: int) -> list[Step]:
    if checkpoint_tool(spec) == "quantize.py":
        return [_quantize_step(role, spec, model_dir, profile, out, trtllm_root, python, calib_size)]
    # Llama 3.2 ties lm_head to the embeddings and 0.12's converter cannot convert that (build/tied_head.py
    # says where it fails); the model goes in through a directory of links that adds lm_head.weight.
    hf = out / "hf" / role
    head = Step(f"{role}-lm-head", (python, "-m", "orin_llm.build.tied_head", "--model_dir", str(model_dir),
                                    "--output_dir", str(hf)), f"{role}-lm-head.log")
    argv = [python, f"{trtllm_root}/examples/llama/convert_checkpoint.py",
            "--model_dir", str(hf), "--output_dir", str(out / "ckpt" / role), "--dtype", spec.dtype]
    if spec.weights in _WEIGHT_ONLY:
        argv += ["--use_weight_only", "--weight_only_precision", _WEIGHT_ONLY[spec.weights]]
    if spec.weights == "int4_gptq":
        # --group_size must be the checkpoint's own (build_trtllm checks its quantization_config)
        argv += ["--per_group", "--group_size", str(spec.int4_group_size)]
    return [head, Step(f"{role}-checkpoint", tuple(argv), f"{role}-checkpoint.log")]


def _quantize_step(role: str, spec: ModelSpec, model_dir: Path, profile: Profile, out: Path,
                   trtllm_root: str, python: str, calib_size: int) -> Step:
    ckpt = out / "ckpt" / role
    lim = profile.limits
    # examples/quantization/quantize.py (doc §2, R≡J quantize.py L10-104): --model_dir L12-14,
    # --calib_dataset L30-36 (a local *directory*: train split, "text" column, doc §2.1 / L218-256),
    # --dtype L52, --qformat L53-61 (int4_awq | int8_wo | int4_wo | full_prec),
    # --tokenizer_max_seq_length L68-71, --batch_size L73-76, --calib_size L77-80,
    # --calib_max_seq_length L81-84, --output_dir L85, --awq_block_size L88, --kv_cache_dtype L89-92
    # (int8 | fp8; fp8 needs SM89+, Orin is SM87). It loads the model with transformers'
    # AutoModelForCausalLM (R≡J quantize_by_modelopt.py get_model), which ties lm_head itself, so no
    # lm-head step here.
    qformat = _QFORMAT.get(spec.weights, "full_prec")
    argv = [python, f"{trtllm_root}/examples/quantization/quantize.py",
            "--model_dir", str(model_dir), "--output_dir", str(ckpt),
            "--dtype", spec.dtype, "--qformat", qformat]
    if spec.kv_cache == "int8":
        argv += ["--kv_cache_dtype", "int8"]
    # calib_max_seq_length: the default 512 would cut the longer planning prompts (~600 tokens)
    # before the task; with --batch_size 1 nothing is padded, so the cap costs no memory.
    argv += ["--calib_dataset", str(out / "calib_dataset"), "--calib_size", str(calib_size),
             "--calib_max_seq_length", str(lim.max_input_len)]
    if spec.weights == "int4_awq":
        argv += ["--awq_block_size", str(spec.int4_group_size)]
    argv += ["--batch_size", "1", "--tokenizer_max_seq_length", str(lim.max_input_len)]
    return Step(f"{role}-checkpoint", tuple(argv), f"{role}-checkpoint.log")


def _engine_step(role: str, setup: EngineSetup, spec: ModelSpec, profile: Profile, out: Path) -> Step:
    lim = profile.limits
    argv = ["trtllm-build", "--checkpoint_dir", str(out / "ckpt" / role), "--output_dir", str(out / role)]
    # Plugins take a dtype or `disable` (choices auto,float16,float32,bfloat16,int32,disable; doc §3,
    # R≡J plugin.py L77-84, defaults L151-172). We name the checkpoint's dtype rather than `auto`,
    # which resolves to the same. Weight-only/AWQ checkpoints switch on the
    # weight_only_(groupwise_)quant_matmul_plugin by themselves (doc §3, builder.py L862-934).
    argv += ["--gemm_plugin", spec.dtype, "--gpt_attention_plugin", spec.dtype]
    # Feature switches take the strings enable|disable (doc §3, R≡J plugin.py L175-187, generator
    # L318-347). Draft/target decoding needs paged KV + removed padding on both engines (doc §3,
    # R≡J docs/source/speculative_decoding.md L52-59). Paged context FMHA is on where block reuse
    # (prefix_reuse) or chunked context needs it (trtllm_rules.engine_setups); check_trtllm_profile
    # has already refused it with an int8 KV cache.
    paged_ctx = "enable" if setup.paged_context_fmha else "disable"
    argv += ["--paged_kv_cache", "enable", "--remove_input_padding", "enable", "--context_fmha", "enable",
             "--use_paged_context_fmha", paged_ctx, "--tokens_per_block", str(TOKENS_PER_BLOCK)]
    # Engine limits (doc §3, R≡J tensorrt_llm/commands/build.py): --max_batch_size L77-81,
    # --max_input_len L82-85, --max_seq_len L86-93 (--max_output_len does not exist at 0.12),
    # --max_num_tokens L95-100. With speculative decoding the builder adds max_draft_len to
    # max_seq_len itself (builder.py L898-916).
    argv += ["--max_batch_size", str(lim.max_batch_size), "--max_input_len", str(lim.max_input_len),
             "--max_seq_len", str(lim.max_seq_len), "--max_num_tokens", str(lim.max_num_tokens)]
    if setup.draft_tokens_external:
        # The target verifies the draft's tokens: --max_draft_len (build.py L147-153) and
        # --speculative_decoding_mode draft_tokens_external (L228-236); doc §3, R≡J
        # docs/source/speculative_decoding.md L71-81.
        # Not --gather_generation_logits (build.py L126-139): the doc (§3, §5) needs it only on the
        # *draft*, for logits-based acceptance (ExternalDraftTokensConfig(logits=...)). The planner
        # decodes greedily and accepts by token-id match, so the draft's logits are never passed, and
        # gathering them would add a vocab-sized (128,256) fp32 output per generated token.
        argv += ["--max_draft_len", str(lim.draft_len),
                 "--speculative_decoding_mode", "draft_tokens_external"]
    return Step(f"{role}-engine", tuple(argv), f"{role}-engine.log")


def trtllm_steps(profile: Profile, out: Path, trtllm_root: str = DEFAULT_TRTLLM_ROOT,
                 python: str = "python3", profile_dir: Path | None = None,
                 calib_size: int = CALIB_SIZE) -> list[Step]:
    """The commands of a TensorRT-LLM build: checkpoint then engine, draft (if any) first, then target.

    Relative model paths are resolved against ``profile_dir``. Raises OrinError for a profile that
    TensorRT-LLM 0.12 cannot build (see :func:`check_trtllm_profile`).
    """
    check_trtllm_profile(profile)
    out = Path(out)
    if "cnn_dailymail" in str(out / "calib_dataset"):
        # quantize.py picks a remote dataset by substring before it looks for a local dir (doc §2.1).
        raise OrinError(f"output path {out} contains 'cnn_dailymail', which quantize.py mistakes for "
                        "the Hugging Face dataset of that name; choose another output directory")
    steps: list[Step] = []
    for (role, spec), setup in zip(_models(profile), engine_setups(profile), strict=True):
        model_dir = profile_path(spec.model, profile_dir)
        steps += _checkpoint_steps(role, spec, model_dir, profile, out, trtllm_root, python, calib_size)
        steps.append(_engine_step(role, setup, spec, profile, out))
    return steps


def format_steps(steps: Sequence[Step]) -> str:
    """The commands as a shell script body: `# name` then the shell-quoted command, per step; a ModelOpt
    step says that it is not NVIDIA's Jetson path."""
    def note(s: Step) -> str:
        return f"; {MODELOPT_NOTE}" if any(a.endswith("/quantize.py") for a in s.argv[1:2]) else ""
    return "".join(f"# {s.name} (log: logs/{s.log}{note(s)})\n{shlex.join(s.argv)}\n" for s in steps)


# ---------------------------------------------------------------------------
# Running


def _tail(path: Path, n: int = 20) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(lines[-n:])


def _check_installed(steps: Sequence[Step]) -> None:
    for s in steps:
        exe = s.argv[0]
        if shutil.which(exe) is None and not Path(exe).is_file():
            raise OrinError(f"{exe!r} not found: {SETUP_HINT}")
        script = next((a for a in s.argv[1:2] if a.endswith(".py")), None)
        if script is not None and not Path(script).is_file():
            raise OrinError(f"{script} not found: {SETUP_HINT}")


def run_steps(steps: Sequence[Step], out: Path, quiet: bool = False,
              runner: Callable[..., Any] = subprocess.run) -> None:
    """Run each step as a subprocess, stdout+stderr to ``<out>/logs/<log>``; OrinError on failure.

    ``runner`` is called like ``subprocess.run(argv, stdout=f, stderr=STDOUT, check=False)`` and
    must return an object with ``returncode``. Every executable and script is looked up before the
    first step starts, so a missing install fails in seconds, not after an hour of calibration.
    """
    logs = Path(out) / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    _check_installed(steps)
    progress = Steps(len(steps), quiet)
    for s in steps:
        log = logs / s.log
        with progress.step(s.name):
            with open(log, "w", encoding="utf-8") as f:
                f.write(f"$ {shlex.join(s.argv)}\n")
                f.flush()
                try:
                    proc = runner(list(s.argv), stdout=f, stderr=subprocess.STDOUT, check=False)
                except FileNotFoundError:
                    raise OrinError(f"{s.argv[0]!r} not found: {SETUP_HINT}") from None
            if proc.returncode != 0:
                raise OrinError(f"step '{s.name}' failed (exit {proc.returncode}); last lines of "
                                f"logs/{s.log}:\n{_tail(log)}")


# ---------------------------------------------------------------------------
# The whole build


def check_model_dir(role: str, spec: ModelSpec, model_dir: Path) -> None:
    """The checkpoint is an HF directory, quantized (GPTQ) exactly when the profile says int4_gptq.

    convert_checkpoint.py takes int4_gptq's group size from --group_size, not from the checkpoint
    (R≡J convert_checkpoint.py L272-276), so a mismatch would convert silently wrong.
    """
    config = model_dir / "config.json"
    if not config.is_file():
        raise OrinError(f"{role}.model: {model_dir} is not a Hugging Face model directory (no "
                        "config.json); download the checkpoint there or fix the path in the profile")
    try:
        quant = json.loads(config.read_text()).get("quantization_config") or {}
    except ValueError as e:
        raise OrinError(f"{config}: not valid JSON ({e}); download the checkpoint again") from None
    method = quant.get("quant_method")
    if spec.weights == "int4_gptq":
        if method != "gptq" or quant.get("bits") != 4:
            raise OrinError(f"{role}.weights = 'int4_gptq' needs a 4-bit GPTQ checkpoint, but {config} has "
                            f"quantization_config {quant or 'none'}; point model at a GPTQ checkpoint or set "
                            "weights = \"int4_wo\"")
        if quant.get("group_size") != spec.int4_group_size:
            raise OrinError(f"{role}: the GPTQ checkpoint's group_size is {quant.get('group_size')} but "
                            f"int4_group_size = {spec.int4_group_size}; set int4_group_size = "
                            f"{quant.get('group_size')} under [{role}]")
    elif method is not None:
        raise OrinError(f"{role}.model: {model_dir} is already quantized ({method}); TensorRT-LLM converts "
                        "a float checkpoint with weights = \"" + spec.weights + "\""
                        + (": set weights = \"int4_gptq\"" if method == "gptq" else
                           ": point model at the float checkpoint"))



def build_trtllm(profile: Profile, out: Path, profile_dir: Path | None = None, dry_run: bool = False,
                 quiet: bool = False) -> list[Step]:
    """Validate, write the calibration set, check the machine, run the steps; return the steps.

    In a dry run nothing is written or run (the caller prints :func:`format_steps`). The manifest is
    the caller's job.
    """
    if profile.backend != "trtllm":
        raise OrinError(f"profile {profile.name!r} has backend = {profile.backend!r}; "
                        "set backend = \"trtllm\" for a TensorRT-LLM build")
    # Absolute paths: quantize.py hands --calib_dataset to datasets.load_dataset, and the dry run
    # should print exactly what runs.
    out = Path(out).absolute()
    steps = trtllm_steps(profile, out, profile_dir=profile_dir)
    if dry_run:
        return steps
    for role, spec in _models(profile):
        check_model_dir(role, spec, profile_path(spec.model, profile_dir))
    if any("--calib_dataset" in s.argv for s in steps):
        path = write_calib_dataset(out)
        with open(path, encoding="utf-8") as f:
            rows = sum(1 for _ in f)
        if rows < CALIB_SIZE:
            raise OrinError(f"{path} has {rows} calibration prompts, fewer than {CALIB_SIZE}; "
                            "regenerate the calib split with python calibration/generate.py")
    run_steps(steps, out, quiet=quiet)
    return steps


def main(argv: list[str] | None = None) -> int:
    """`python -m orin_llm.build.trtllm --profile P [--out DIR]`: the commands a TensorRT-LLM build of the
    profile runs, as `orin-llm build --dry-run` prints them but without the memory plan and with ``--out``
    as given (jetson/first-contact.sh --dry-run shows them; its golden test pins them)."""
    import argparse
    import sys

    from ..profile import load_profile

    ap = argparse.ArgumentParser(prog="python -m orin_llm.build.trtllm", description=main.__doc__.split("\n")[0])
    ap.add_argument("--profile", required=True)
    ap.add_argument("--out", help="the engine directory (default engines/<profile name>)")
    a = ap.parse_args(argv)
    try:
        profile = load_profile(a.profile)
        steps = trtllm_steps(profile, Path(a.out or f"engines/{profile.name}"), profile_dir=Path(a.profile).parent)
    except OrinError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(format_steps(steps), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
