"""What an engine directory holds besides the models, read for either backend: the tokenizer and its
end ids, the lookup seed, the KV pool the memory plan sized; `EngineText`, the tokenizer side both
engines share."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import torch

from ..errors import OrinError
from ..manifest import Manifest, ModelEntry, read_json_object
from .kv_pool import KVPool, load_k_smoothing, load_scales
from .tokenizer import Tokenizer

BLOCK_SIZE = 16  # tokens per KV block: prefix reuse is whole blocks (a prompt's partial last block is computed)

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
KV_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def load_tokenizer(path: Path) -> Tokenizer:
    """The engine's tokenizer directory, read without transformers (tokenizer.py: 28-31 MB less resident)."""
    return Tokenizer(path)


def lookup_seed(engine_dir: Path, manifest: Manifest) -> list[list[int]]:
    """The token ids of the plans that seed the lookup drafter's history (none if not built)."""
    if manifest.lookup_seed is None:
        return []
    path = engine_dir / manifest.lookup_seed.path
    outputs = read_json_object(path).get("outputs")
    is_ids = lambda o: isinstance(o, list) and all(isinstance(t, int) for t in o)  # noqa: E731
    if not isinstance(outputs, list) or not all(is_ids(o) for o in outputs):
        raise OrinError(f"{path}: outputs must be lists of token ids; rebuild the engine")
    return outputs


def eos_ids(tokenizer, model_dir: Path) -> set[int]:
    ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    gen_cfg = model_dir / "generation_config.json"
    if gen_cfg.is_file():  # Llama 3 Instruct ends turns with <|eot_id|>, listed only here
        eos = json.loads(gen_cfg.read_text()).get("eos_token_id")
        ids |= set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    return ids


class EngineText:
    """The tokenizer side both backends share (this Engine and TrtllmEngine)."""

    manifest: Manifest
    tokenizer: object

    @property
    def name(self) -> str:
        return self.manifest.name

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def chat_text(self, messages: list[dict], add_generation_prompt: bool = True,
                  tools: Optional[list[dict]] = None) -> str:
        """`tools`: function tools for a chat template that renders them itself (server/tool_calls.py)."""
        return self.tokenizer.apply_chat_template(
            messages, tools=tools, tokenize=False, add_generation_prompt=add_generation_prompt)

    def chat_ids(self, messages: list[dict[str, str]]) -> list[int]:
        return self.encode(self.chat_text(messages))


def load_pool(engine_dir: Path, entry: ModelEntry, role: str, num_blocks: int, device: str,
              kv_override: Optional[str]) -> KVPool:
    dtype = DTYPES[entry.dtype]
    kv = kv_override or entry.kv_cache.dtype
    if kv == "int8":  # never a silent fp cache: INT8 without calibrated scales is an error
        if not entry.kv_cache.scales:
            raise OrinError(f"{engine_dir}: INT8 KV cache asked for, but the {role} has no calibrated "
                            f"KV scales; run `orin-llm calibrate --engine {engine_dir}`")
        k_scale, v_scale = load_scales(engine_dir / entry.kv_cache.scales)
        return KVPool(entry.arch, num_blocks, BLOCK_SIZE, dtype, device, k_scale, v_scale)
    if kv not in KV_DTYPES:
        raise OrinError(f"KV cache dtype {kv!r} is not supported (fp32, fp16, bf16, int8)")
    return KVPool(entry.arch, num_blocks, BLOCK_SIZE, KV_DTYPES[kv], device)


def k_smoothing_for(engine_dir: Path, entry: ModelEntry, kv_override: Optional[str]) -> Optional[torch.Tensor]:
    """The K smoothing factors the model's rows take (k_smoothing.py): where its KV cache is INT8 and
    its calibration wrote them; None elsewhere (a full-precision cache gains nothing from them)."""
    if (kv_override or entry.kv_cache.dtype) != "int8" or not entry.kv_cache.scales:
        return None
    return load_k_smoothing(engine_dir / entry.kv_cache.scales)


def pool_tokens(manifest: Manifest) -> int:
    """KV tokens the memory plan gave the target (every sequence in flight + cached prefixes); at
    least one full-length sequence. Engines built before the plan existed get max_seq_len."""
    limits = manifest.limits
    plan = manifest.memory_plan or {}
    target = plan.get("target") if isinstance(plan.get("target"), dict) else {}
    tokens = target.get("max_kv_tokens") or plan.get("max_kv_tokens") or limits["max_seq_len"]
    return max(int(tokens), limits["max_seq_len"])
