"""An engine directory, loaded for the torch backend: tokenizer, target model, KV cache."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch

from ..errors import OrinError, PromptTooLong
from ..manifest import Manifest, ModelEntry, load_manifest, read_json_object
from .generate import Generation
from .kv_cache import Int8KVCache, KVCache
from .llama import PROBE_ROWS, Llama, load_llama
from .sampling import SamplingParams
from .speculative import CombinedDrafter, DraftModelDrafter, LookupDrafter
from .text import TextStream

# What "auto" means. Measured on the embedded default on CPU (docs/BENCHMARKS.md): the model-free
# lookup drafter gives the decode speedup; a same-size INT8 draft costs about as much as the target.
AUTO_SPECULATION = "lookup"

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
KV_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def apply_thread_setting() -> None:
    """ORIN_LLM_THREADS=N sets torch's intra-op threads. On a CPU shared with other busy
    processes (a robot's ROS nodes, CI), fewer threads than cores avoids OpenMP barrier stalls
    that we measured at 5-10x slower decoding on 2 cores with the second one busy."""
    value = os.environ.get("ORIN_LLM_THREADS")
    if value:
        if not value.isdigit() or int(value) < 1:
            raise OrinError(f"ORIN_LLM_THREADS={value!r}: give a positive whole number")
        torch.set_num_threads(int(value))


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


@dataclass
class Lane:
    """A model and its own KV cache: the target, or the draft that speculates for it."""

    model: Llama
    cache: KVCache


def load_lane(engine_dir: Path, entry: ModelEntry, role: str, capacity: int, device: str,
              kv_override: Optional[str]) -> Lane:
    dtype = DTYPES[entry.dtype]
    kv = kv_override or entry.kv_cache.dtype
    model = load_llama(engine_dir / entry.dir, entry.arch, dtype, device, capacity)
    if kv == "int8":  # never a silent fp cache: INT8 without calibrated scales is an error
        if not entry.kv_cache.scales:
            raise OrinError(f"{engine_dir}: INT8 KV cache asked for, but the {role} has no calibrated "
                            f"KV scales; run `orin-llm calibrate --engine {engine_dir}`")
        from ..build.calibrate import load_scales

        k_scale, v_scale = load_scales(engine_dir / entry.kv_cache.scales)
        return Lane(model, Int8KVCache(entry.arch, capacity, k_scale, v_scale, dtype, device))
    if kv not in KV_DTYPES:
        raise OrinError(f"KV cache dtype {kv!r} is not supported (fp32, fp16, bf16, int8)")
    return Lane(model, KVCache(entry.arch, capacity, KV_DTYPES[kv], device))


class EngineText:
    """The tokenizer side both backends share (this Engine and TrtllmEngine)."""

    manifest: Manifest
    tokenizer: object

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


class Engine(EngineText):
    def __init__(self, engine_dir: Path, manifest: Manifest, tokenizer, target: Lane,
                 draft: Optional[Lane] = None):
        self.dir, self.manifest, self.tokenizer = engine_dir, manifest, tokenizer
        self.target, self.draft = target, draft
        self.model, self.cache = target.model, target.cache
        self.eos_ids = eos_ids(tokenizer, engine_dir / manifest.target.dir)
        self.pinned: list[int] = []  # token ids whose K/V stay in cache[0:len(pinned)] across requests
        self.lookup_seed = lookup_seed(engine_dir, manifest)
        self.lookup = LookupDrafter(seed=self.lookup_seed)  # one per engine: its history is the point

    @classmethod
    def load(cls, engine_dir: str | Path, device: str = "auto", kv_cache: Optional[str] = None,
             draft: bool = True, exact: bool = True) -> Engine:
        """kv_cache overrides the manifest's KV dtype for both models (e.g. "fp32" as the
        reference for INT8); draft=False leaves the draft model unloaded. exact=True runs the
        target's decode steps batch-invariant (llama.py), so speculation is bit-exact lossless;
        exact=False is faster on CPUs, where a padded matmul costs more than a one-row one."""
        engine_dir = Path(engine_dir)
        manifest = load_manifest(engine_dir)
        apply_thread_setting()
        if manifest.backend != "torch":
            raise OrinError(f"{engine_dir} was built for the {manifest.backend!r} backend; "
                            "the torch runtime loads torch engines only")
        device = pick_device(device)
        capacity = manifest.limits["max_seq_len"]
        target = load_lane(engine_dir, manifest.target, "target", capacity, device, kv_cache)
        draft_lane = None
        if draft and manifest.draft is not None:
            draft_lane = load_lane(engine_dir, manifest.draft, "draft", capacity, device, kv_cache)
        if exact:
            width = target.model.decode_width = 2 * manifest.limits.get("draft_len", 4) + 1  # k_max + 1
            # row independence was probed up to PROBE_ROWS rows; past that, pad (slower, still exact)
            target.model.rows_independent = target.model.rows_independent and width <= PROBE_ROWS
        return cls(engine_dir, manifest, load_tokenizer(engine_dir / "tokenizer"), target, draft_lane)

    @property
    def lanes(self) -> list[Lane]:
        return [self.target] + ([self.draft] if self.draft else [])

    def check_prompt(self, n: int) -> None:
        limit = self.manifest.limits["max_input_len"]
        if n > limit:
            raise PromptTooLong(n, limit)

    def pin(self, ids: list[int]) -> None:
        """Prefill `ids` once and keep their K/V: later prompts that start with them skip them."""
        self.check_prompt(len(ids))
        self.pinned = []
        for lane in self.lanes:  # the draft keeps its own copy of the prefix's K/V
            lane.cache.crop(0)
            if ids:
                lane.model(torch.tensor(ids, device=lane.cache.k.device), lane.cache)
        self.pinned = list(ids)

    def cached_prefix(self, prompt_ids: list[int]) -> int:
        n = len(self.pinned)
        return n if 0 < n < len(prompt_ids) and prompt_ids[:n] == self.pinned else 0

    def kv_usage(self) -> dict:
        """What the server reports: backend-neutral (TrtllmEngine has the same method)."""
        return {"device": str(self.cache.k.device), "tokens": self.cache.length,
                "capacity_tokens": self.cache.capacity, "bytes": sum(lane.cache.nbytes for lane in self.lanes)}

    @property
    def speculation_modes(self) -> list[str]:
        return ["auto", "none", "lookup"] + (["draft_model", "combined"] if self.draft else [])

    def drafter(self, speculation: str, params: SamplingParams):
        """The drafter a request asked for; unavailable ones are an error, never plain decoding.
        "auto" decodes sampled requests plainly: with a drafter, the random stream is consumed
        differently as the lookup history grows, so a seed would not reproduce its output (the
        distribution is right either way; an explicit drafter is honoured)."""
        if speculation not in self.speculation_modes:
            raise OrinError(f"speculation {speculation!r} is not available in engine {self.name!r} "
                            f"(available: {', '.join(self.speculation_modes)})")
        if speculation == "auto" and not params.greedy:
            return None
        mode = AUTO_SPECULATION if speculation == "auto" else speculation
        if mode == "none":
            return None
        if mode == "lookup":
            return self.lookup
        model = DraftModelDrafter(self.draft.model, self.draft.cache)
        return model if mode == "draft_model" else CombinedDrafter(self.lookup, model)

    def generate(self, prompt_ids: list[int], params: SamplingParams,
                 speculation: str = "auto") -> Generation:
        drafter = self.drafter(speculation, params)
        self.check_prompt(len(prompt_ids))
        cached = self.cached_prefix(prompt_ids)
        if not cached:
            self.pinned = []  # this prompt overwrites the pinned prefix's K/V
        for lane in self.lanes:
            lane.cache.crop(cached)
        k = self.manifest.limits.get("draft_len", 4)
        return Generation(self.model, self.cache, TextStream(self.tokenizer, params.stop), prompt_ids,
                          params, self.eos_ids, cached=cached, drafter=drafter, draft_len=k,
                          draft_len_max=2 * k)
