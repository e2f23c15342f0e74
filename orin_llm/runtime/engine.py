"""An engine directory, loaded for the torch backend: tokenizer, target model, KV cache."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import torch

from ..errors import OrinError
from ..manifest import Manifest, load_manifest
from .generate import Generation
from .kv_cache import KVCache
from .llama import Llama, load_llama
from .sampling import SamplingParams
from .text import TextStream

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
KV_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def pick_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise OrinError(f"device {device!r} asked for, but torch sees no CUDA device")
    return device


def load_tokenizer(path: Path):
    from transformers import AutoTokenizer

    logging.getLogger("transformers").setLevel(logging.ERROR)
    return AutoTokenizer.from_pretrained(str(path))


def eos_ids(tokenizer, model_dir: Path) -> set[int]:
    ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    gen_cfg = model_dir / "generation_config.json"
    if gen_cfg.is_file():  # Llama 3 Instruct ends turns with <|eot_id|>, listed only here
        eos = json.loads(gen_cfg.read_text()).get("eos_token_id")
        ids |= set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    return ids


class Engine:
    def __init__(self, engine_dir: Path, manifest: Manifest, tokenizer, model: Llama, cache: KVCache):
        self.dir, self.manifest, self.tokenizer, self.model, self.cache = (
            engine_dir, manifest, tokenizer, model, cache)
        self.eos_ids = eos_ids(tokenizer, engine_dir / manifest.target.dir)
        self.pinned: list[int] = []  # token ids whose K/V stay in cache[0:len(pinned)] across requests

    @classmethod
    def load(cls, engine_dir: str | Path, device: str = "auto") -> Engine:
        engine_dir = Path(engine_dir)
        manifest = load_manifest(engine_dir)
        if manifest.backend != "torch":
            raise OrinError(f"{engine_dir} was built for the {manifest.backend!r} backend; "
                            "the torch runtime loads torch engines only")
        kv = manifest.target.kv_cache.dtype
        if kv not in KV_DTYPES:
            raise OrinError(f"{engine_dir}: KV cache dtype {kv!r} is not supported by this runtime")
        device = pick_device(device)
        capacity = manifest.limits["max_seq_len"]
        target = manifest.target
        model = load_llama(engine_dir / target.dir, target.arch, DTYPES[target.dtype], device, capacity)
        cache = KVCache(target.arch, capacity, KV_DTYPES[kv], device)
        return cls(engine_dir, manifest, load_tokenizer(engine_dir / "tokenizer"), model, cache)

    @property
    def name(self) -> str:
        return self.manifest.name

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def chat_text(self, messages: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        return self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=add_generation_prompt)

    def chat_ids(self, messages: list[dict[str, str]]) -> list[int]:
        return self.encode(self.chat_text(messages))

    def check_prompt(self, n: int) -> None:
        limit = self.manifest.limits["max_input_len"]
        if n > limit:
            raise OrinError(f"prompt has {n} tokens; this engine's max_input_len is {limit}")

    def pin(self, ids: list[int]) -> None:
        """Prefill `ids` once and keep their K/V: later prompts that start with them skip them."""
        self.check_prompt(len(ids))
        self.pinned = []
        self.cache.crop(0)
        if ids:
            self.model(torch.tensor(ids, device=self.cache.k.device), self.cache)
        self.pinned = list(ids)

    def cached_prefix(self, prompt_ids: list[int]) -> int:
        n = len(self.pinned)
        return n if 0 < n < len(prompt_ids) and prompt_ids[:n] == self.pinned else 0

    def generate(self, prompt_ids: list[int], params: SamplingParams,
                 speculation: str = "auto") -> Generation:
        if speculation not in ("auto", "none"):  # no silent fallback to plain decoding
            raise OrinError(f"speculation {speculation!r} is not available in engine {self.name!r} "
                            "(available: auto, none)")
        self.check_prompt(len(prompt_ids))
        cached = self.cached_prefix(prompt_ids)
        if not cached:
            self.pinned = []  # this prompt overwrites the pinned prefix's K/V
        self.cache.crop(cached)
        return Generation(self.model, self.cache, TextStream(self.tokenizer, params.stop), prompt_ids,
                          params, self.eos_ids, cached=cached)
