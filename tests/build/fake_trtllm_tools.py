"""Fake TensorRT-LLM 0.12.0-jetson build tools: examples/llama/convert_checkpoint.py,
examples/quantization/quantize.py and trtllm-build.

`run` has subprocess.run's signature and is passed to build/trtllm.py `run_steps(runner=run)`: each step's
argv goes through the real tool's argument parser (the flags, types and choices of docs/trtllm-0.12-jetson.md
§2-3) and then does what the tool does to the files the next step and the runtime read:

* convert_checkpoint.py parses as v0.12.0's parse_arguments (R≡J examples/llama/convert_checkpoint.py
  L20-238), maps the flags to a quantization as args_to_quant_config does (L240-278: no --use_weight_only,
  no weight-only quantization, whatever --weight_only_precision says), calibrates an int8 KV cache only
  from a downloaded dataset (L383-399 → convert_utils.load_calib_dataset: offline here, so it fails), and
  reads the weights as the unified ModelWeightsLoader does: every *.safetensors file of --model_dir
  (model_weights_loader.py L143-158), failing on a missing lm_head.weight as ColumnLinear.postprocess does
  (layers/linear.py L380);
* quantize.py writes a TensorRT-LLM checkpoint config.json whose `quantization` says the weight and KV
  formats (R≡J quantize_by_modelopt.py L468-477), and calibrates (reads --calib_dataset the way
  get_calib_dataloader does, doc §2.1) only for AWQ or an int8 KV cache;
* trtllm-build applies tensorrt_llm/builder.py build()'s rules (R≡J L898-933: max_seq_len += max_draft_len
  and max_num_tokens raised for speculative decoding; RuntimeError for paged context FMHA with an int8 KV
  cache) and writes the engine's config.json as EngineConfig does ({"version", "pretrained_config",
  "build_config": BuildConfig.to_dict()}), which tests/backends/trtllm/fake_trtllm.py's Executor then reads.

Written from the sources, not from orin_llm/backends/trtllm/rules.py, which it must agree with. A failing tool
writes its traceback's last line to the log and returns exit code 1 (argparse errors: 2), as the real ones.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

# quant_algo written to the checkpoint's config.json per --qformat (quantize_by_modelopt.py L468-477).
QUANT_ALGO = {"int4_awq": "W4A16_AWQ", "int8_wo": "W8A16", "int4_wo": "W4A16", "full_prec": None}
# SpeculativeDecodingMode(IntFlag) with auto(): NONE 1, DRAFT_TOKENS_EXTERNAL 2, MEDUSA 4, LOOKAHEAD_DECODING 8,
# EXPLICIT_DRAFT_TOKENS 16 (R≡J tensorrt_llm/models/modeling_utils.py L65-86).
SPECULATIVE_MODE = {None: 1, "draft_tokens_external": 2, "medusa": 4, "lookahead_decoding": 8,
                    "explicit_draft_tokens": 16}


def quantize(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="quantize.py")  # R≡J examples/quantization/quantize.py L10-104
    p.add_argument("--model_dir")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--calib_dataset", default="cnn_dailymail")
    p.add_argument("--dtype", default="float16")
    p.add_argument("--qformat", default="full_prec",
                   choices=["fp8", "int8_sq", "int4_awq", "w4a8_awq", "int8_wo", "int4_wo", "full_prec"])
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--tokenizer_max_seq_length", type=int, default=2048)
    p.add_argument("--batch_size", type=int, default=1)
    p.add_argument("--calib_size", type=int, default=512)
    p.add_argument("--calib_max_seq_length", type=int, default=512)
    p.add_argument("--output_dir", default="exported_model")
    p.add_argument("--tp_size", type=int, default=1)
    p.add_argument("--pp_size", type=int, default=1)
    p.add_argument("--awq_block_size", type=int, default=128)
    p.add_argument("--kv_cache_dtype", default=None, choices=["int8", "fp8", None])
    a = p.parse_args(argv)
    if not (Path(a.model_dir) / "config.json").is_file():
        raise OSError(f"{a.model_dir} does not appear to have a file named config.json")  # transformers' words
    if not (a.qformat in ("full_prec", "int8_wo", "int4_wo") and a.kv_cache_dtype is None):
        # get_calib_dataloader (doc §2.1): a remote dataset by name, a local directory, nothing else
        if "cnn_dailymail" in a.calib_dataset or a.calib_dataset == "pileval":
            raise ConnectionError(f"cannot download {a.calib_dataset!r} on this offline machine")
        if not os.path.isdir(a.calib_dataset):
            raise NotImplementedError(f"Unsupported dataset name or local repo directory: {a.calib_dataset}.")
        rows = (Path(a.calib_dataset) / "train.jsonl").read_text().splitlines()
        assert all("text" in json.loads(r) for r in rows[:a.calib_size]), "the train split has no text column"
    hf = json.loads((Path(a.model_dir) / "config.json").read_text())
    out = Path(a.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    quant = {"quant_algo": QUANT_ALGO[a.qformat], "kv_cache_quant_algo": "INT8" if a.kv_cache_dtype == "int8" else None}
    if a.qformat == "int4_awq":
        quant.update(group_size=a.awq_block_size, has_zero_point=False, pre_quant_scale=True)
    config = {"architecture": "LlamaForCausalLM", "dtype": a.dtype, "vocab_size": hf["vocab_size"],
              "num_hidden_layers": hf["num_hidden_layers"], "hidden_size": hf["hidden_size"],
              "max_position_embeddings": hf["max_position_embeddings"], "quantization": quant}
    (out / "config.json").write_text(json.dumps(config, indent=2))
    (out / "rank0.safetensors").write_bytes(b"")


def _safetensors_names(model_dir: Path) -> set[str]:
    names: set[str] = set()
    for path in sorted(model_dir.glob("*.safetensors")):
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            names |= set(json.loads(f.read(n))) - {"__metadata__"}
    return names


def convert_checkpoint(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="convert_checkpoint.py")  # R≡J examples/llama/convert_checkpoint.py L20-238
    p.add_argument("--model_dir", type=str, default=None)
    p.add_argument("--meta_ckpt_dir", type=str, default=None)
    p.add_argument("--tp_size", type=int, default=1)
    p.add_argument("--pp_size", type=int, default=1)
    p.add_argument("--moe_tp_size", type=int, default=-1)
    p.add_argument("--moe_ep_size", type=int, default=-1)
    p.add_argument("--dtype", type=str, default="float16", choices=["float32", "bfloat16", "float16"])
    for flag, kind, default in (("vocab_size", int, 32000), ("n_positions", int, 2048), ("n_layer", int, 32),
                                ("n_head", int, 32), ("n_kv_head", int, None), ("n_embd", int, 4096),
                                ("inter_size", int, 11008), ("multiple_of", int, None),
                                ("ffn_dim_multiplier", float, None), ("rms_norm_eps", float, 1e-06)):
        p.add_argument(f"--{flag}", type=kind, default=default)
    p.add_argument("--use_weight_only", default=False, action="store_true")
    p.add_argument("--disable_weight_only_quant_plugin", default=False, action="store_true")
    p.add_argument("--weight_only_precision", const="int8", type=str, nargs="?", default="int8",
                   choices=["int8", "int4", "int4_gptq"])
    p.add_argument("--calib_dataset", type=str, default="ccdv/cnn_dailymail")
    p.add_argument("--smoothquant", "-sq", type=float, default=None)
    p.add_argument("--per_channel", action="store_true", default=False)
    p.add_argument("--per_token", action="store_true", default=False)
    p.add_argument("--int8_kv_cache", default=False, action="store_true")
    p.add_argument("--fp8_kv_cache", default=False, action="store_true")
    p.add_argument("--quant_ckpt_path", type=str, default=None)
    p.add_argument("--use_fp8_rowwise", action="store_true", default=False)
    p.add_argument("--per_group", default=False, action="store_true")
    p.add_argument("--load_by_shard", action="store_true")
    p.add_argument("--hidden_act", type=str, default="silu")
    p.add_argument("--rotary_base", type=float, default=10000.0)
    p.add_argument("--group_size", type=int, default=128)
    p.add_argument("--load_model_on_cpu", action="store_true")
    p.add_argument("--use_parallel_embedding", action="store_true", default=False)
    p.add_argument("--embedding_sharding_dim", type=int, default=0, choices=[0, 1])
    p.add_argument("--use_embedding_sharing", action="store_true", default=False)
    p.add_argument("--output_dir", type=str, default="tllm_checkpoint")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--moe_num_experts", default=0, type=int)
    p.add_argument("--moe_top_k", default=0, type=int)
    p.add_argument("--moe_renorm_mode", default=1, type=int)
    p.add_argument("--save_config_only", action="store_true", default=False)
    p.add_argument("--remove_duplicated_kv_heads", action="store_true", default=False)
    p.add_argument("--log_level", type=str, default="info")
    a = p.parse_args(argv)
    model_dir = Path(a.model_dir)
    if not (model_dir / "config.json").is_file():
        raise OSError(f"{a.model_dir} does not appear to have a file named config.json")  # transformers' words
    quant: dict = {"quant_algo": None, "kv_cache_quant_algo": None}  # args_to_quant_config L240-278
    if a.use_weight_only:
        quant["quant_algo"] = {"int8": "W8A16", "int4": "W4A16"}.get(a.weight_only_precision)
    if a.int8_kv_cache:
        quant["kv_cache_quant_algo"] = "INT8"
    if a.weight_only_precision == "int4_gptq":
        quant.update(quant_algo="W4A16_GPTQ", group_size=a.group_size, has_zero_point=True, pre_quant_scale=False)
    if a.smoothquant is not None or a.int8_kv_cache:  # convert_and_save_hf L383-399: calibrates first
        if "cnn_dailymail" in a.calib_dataset or "lambada" in a.calib_dataset:
            raise ConnectionError(f"cannot download {a.calib_dataset!r} on this offline machine")
        raise TypeError("'NoneType' object is not subscriptable")  # convert_utils.py L214-242: dataset[None]
    names = _safetensors_names(model_dir)
    if not names:  # ModelWeightsLoader.detect_format (no .bin/.pth either in these tests)
        raise NotImplementedError("Only safetensors/pickle/binary directories are supported.")
    if "lm_head.weight" not in names:  # load_tensor → None → ColumnLinear.postprocess(None)
        raise AttributeError("'NoneType' object has no attribute 'to'")
    hf = json.loads((model_dir / "config.json").read_text())
    out = Path(a.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    config = {"architecture": "LlamaForCausalLM", "dtype": a.dtype, "vocab_size": hf["vocab_size"],
              "num_hidden_layers": hf["num_hidden_layers"], "hidden_size": hf["hidden_size"],
              "max_position_embeddings": hf["max_position_embeddings"], "quantization": quant}
    (out / "config.json").write_text(json.dumps(config, indent=2))
    (out / "rank0.safetensors").write_bytes(b"")


def _switch(value: str) -> bool:  # the plugin flags' enable|disable (R≡J plugin.py L318-347)
    if value not in ("enable", "disable"):
        raise argparse.ArgumentTypeError(f"invalid choice: {value!r} (choose from 'enable', 'disable')")
    return value == "enable"


def trtllm_build(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="trtllm-build")  # R≡J tensorrt_llm/commands/build.py L36-268
    p.add_argument("--checkpoint_dir", required=True)
    p.add_argument("--output_dir", default="engine_outputs")
    p.add_argument("--max_batch_size", type=int, default=256)
    p.add_argument("--max_input_len", type=int, default=1024)
    p.add_argument("--max_seq_len", type=int, default=None)
    p.add_argument("--max_num_tokens", type=int, default=8192)
    p.add_argument("--max_draft_len", type=int, default=0)
    p.add_argument("--speculative_decoding_mode", default=None, choices=[m for m in SPECULATIVE_MODE if m])
    p.add_argument("--gather_generation_logits", action="store_true")
    dtypes = ["auto", "float16", "float32", "bfloat16", "int32", "disable"]
    p.add_argument("--gemm_plugin", default="disable", choices=dtypes + ["fp8"])
    p.add_argument("--gpt_attention_plugin", default="auto", choices=dtypes)
    for flag, default in (("context_fmha", "enable"), ("paged_kv_cache", "enable"), ("remove_input_padding", "enable"),
                          ("use_paged_context_fmha", "disable"), ("enable_xqa", "enable")):
        p.add_argument(f"--{flag}", type=_switch, default=_switch(default))
    p.add_argument("--tokens_per_block", type=int, default=64)
    a = p.parse_args(argv)
    ckpt = json.loads((Path(a.checkpoint_dir) / "config.json").read_text())
    mode = SPECULATIVE_MODE[a.speculative_decoding_mode]
    max_seq_len = a.max_seq_len if a.max_seq_len is not None else ckpt["max_position_embeddings"]
    max_num_tokens = a.max_num_tokens
    if mode != SPECULATIVE_MODE[None]:  # builder.py build() L898-916
        max_seq_len += a.max_draft_len
        max_num_tokens = max(max_num_tokens, a.max_batch_size * (a.max_draft_len + 1))
    if a.use_paged_context_fmha and ckpt["quantization"].get("kv_cache_quant_algo") == "INT8":  # L919-933
        raise RuntimeError("Paged Context FMHA doesn't work with int8 kv cache currently.")
    plugins = {"gemm_plugin": a.gemm_plugin, "gpt_attention_plugin": a.gpt_attention_plugin,
               "context_fmha": a.context_fmha, "paged_kv_cache": a.paged_kv_cache,
               "remove_input_padding": a.remove_input_padding, "use_paged_context_fmha": a.use_paged_context_fmha,
               "enable_xqa": a.enable_xqa, "tokens_per_block": a.tokens_per_block}
    build = {"max_input_len": a.max_input_len, "max_seq_len": max_seq_len, "max_batch_size": a.max_batch_size,
             "max_beam_width": 1, "max_num_tokens": max_num_tokens, "max_draft_len": a.max_draft_len,
             "speculative_decoding_mode": mode, "gather_generation_logits": a.gather_generation_logits,
             "plugin_config": plugins}
    out = Path(a.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps({"version": "0.12.0", "pretrained_config": ckpt,
                                                 "build_config": build}, indent=2))
    with open(out / "rank0.engine", "wb") as f:  # Engine.save's file name (R≡J tensorrt_llm/builder.py L662-667)
        f.truncate(ENGINE_BYTES.get(out.name, 64))  # sparse: a test's engine of a chosen size takes no disk


ENGINE_BYTES: dict[str, int] = {}  # engine dir name ("target", "draft") -> the size trtllm-build's rank0.engine gets


TOOLS = {"convert_checkpoint.py": convert_checkpoint, "quantize.py": quantize, "trtllm-build": trtllm_build}


def run(argv: list[str], stdout, stderr=None, check: bool = False) -> subprocess.CompletedProcess:
    """subprocess.run for the fake tools: `python3 .../quantize.py ARGS` or `trtllm-build ARGS`; our own
    steps (`python -m orin_llm...`) run for real, with this interpreter."""
    if len(argv) > 2 and argv[1] == "-m" and argv[2].startswith("orin_llm."):
        stdout.flush()
        return subprocess.run([sys.executable, *argv[1:]], stdout=stdout, stderr=subprocess.STDOUT, check=False)
    name, args = (("trtllm-build", argv[1:]) if Path(argv[0]).name == "trtllm-build"
                  else (Path(argv[1]).name, argv[2:]))
    try:
        with contextlib.redirect_stderr(stdout):  # the real tools' stderr goes to the step's log too
            TOOLS[name](list(args))
        code = 0
    except SystemExit as e:  # argparse
        code = e.code if isinstance(e.code, int) else 2
    except Exception as e:  # the tool's own error: its traceback ends with this line
        stdout.write(f"Traceback (most recent call last):\n  ...\n{type(e).__name__}: {e}\n")
        code = 1
    return subprocess.CompletedProcess(list(argv), code)


def install(root: Path, monkeypatch) -> Path:
    """Files where run_steps looks for the tools before the first step (a TensorRT-LLM source tree with
    its examples, trtllm-build on PATH); returns the tree to pass as trtllm_root."""
    tree = root / "TensorRT-LLM"
    for rel in ("examples/quantization/quantize.py", "examples/llama/convert_checkpoint.py"):
        script = tree / rel
        script.parent.mkdir(parents=True)
        script.write_text("# fake: tests/build/fake_trtllm_tools.py runs in its place\n")
    bin_dir = root / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "trtllm-build"
    exe.write_text("#!/bin/sh\nexit 1  # fake: tests/build/fake_trtllm_tools.py runs in its place\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    return tree
