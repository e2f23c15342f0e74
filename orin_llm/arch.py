"""Shape facts of a Llama-family model, read from its HF `config.json` or a GGUF's metadata alone.

Torch-free on purpose: the memory plan reads it on machines that hold no weights.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from .errors import OrinError
from .weight_sizes import hf_fields, param_count


class Arch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    architecture: Literal["llama"] = "llama"
    num_layers: int = Field(gt=0)
    hidden_size: int = Field(gt=0)
    intermediate_size: int = Field(gt=0)
    num_heads: int = Field(gt=0)
    num_kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    vocab_size: int = Field(gt=0)
    tie_word_embeddings: bool
    max_position_embeddings: int = Field(gt=0)
    rms_norm_eps: float = Field(gt=0)
    rope_theta: float = Field(gt=0)
    rope_scaling: Optional[dict[str, Any]] = None  # e.g. Llama 3.x's {"rope_type": "llama3", ...}

    def kv_bytes_per_token(self, bytes_per_element: float) -> int:
        """2 (K and V) × layers × kv_heads × head_dim × bytes."""
        return int(2 * self.num_layers * self.num_kv_heads * self.head_dim * bytes_per_element)

    def param_count(self) -> int:
        return param_count(self)


def arch_from_hf(cfg: dict[str, Any], source: str = "config.json") -> Arch:
    return Arch(**hf_fields(cfg, source))


def arch_from_config_file(path: str | Path) -> Arch:
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise OrinError(f"{path} not found: a model directory needs its config.json")
    try:
        cfg = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise OrinError(f"{path}: not valid JSON ({e})") from None
    return arch_from_hf(cfg, str(path))


def _gguf_scalar(reader, key: str, default=None):
    field = reader.fields.get(key)
    if field is None:
        return default
    part = field.parts[field.data[0]]  # works on every gguf release (ReaderField.contents is newer)
    if field.types[0].name == "STRING":
        return bytes(part).decode("utf-8")
    return part[0].item()


def arch_from_gguf(path: str | Path) -> Arch:
    """A Llama GGUF's shape from its metadata alone (the tensors are memory-mapped, never read)."""
    path = Path(path)
    try:
        import gguf
    except ImportError:
        raise OrinError(f"{path}: reading a GGUF needs the gguf package (pip install gguf)") from None
    try:
        reader = gguf.GGUFReader(str(path))
    except Exception as e:  # a truncated or foreign file: ValueError, struct errors, ...
        raise OrinError(f"{path}: not a readable GGUF file ({e})") from None
    arch = _gguf_scalar(reader, "general.architecture")
    if arch != "llama":
        raise OrinError(f"{path}: GGUF architecture {arch!r}; only 'llama' is supported")
    try:
        layers = _gguf_scalar(reader, "llama.block_count")
        hidden = _gguf_scalar(reader, "llama.embedding_length")
        heads = _gguf_scalar(reader, "llama.attention.head_count")
        if None in (layers, hidden, heads):
            raise KeyError("llama.block_count/embedding_length/attention.head_count")
        tokens = reader.fields.get("tokenizer.ggml.tokens")
        vocab = len(tokens.data) if tokens is not None else _gguf_scalar(reader, "llama.vocab_size")
        head_dim = (_gguf_scalar(reader, "llama.attention.key_length")
                    or _gguf_scalar(reader, "llama.rope.dimension_count") or hidden // heads)
        return Arch(
            num_layers=layers,
            hidden_size=hidden,
            intermediate_size=_gguf_scalar(reader, "llama.feed_forward_length"),
            num_heads=heads,
            num_kv_heads=_gguf_scalar(reader, "llama.attention.head_count_kv", heads),
            head_dim=head_dim,
            vocab_size=vocab,
            # llama.cpp writes no output.weight when the lm_head is the embedding matrix
            tie_word_embeddings=not any(t.name == "output.weight" for t in reader.tensors),
            max_position_embeddings=_gguf_scalar(reader, "llama.context_length", 2048),
            rms_norm_eps=_gguf_scalar(reader, "llama.attention.layer_norm_rms_epsilon", 1e-5),
            rope_theta=_gguf_scalar(reader, "llama.rope.freq_base", 10000.0),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise OrinError(f"{path}: GGUF metadata incomplete for a Llama model ({e})") from None
