"""Source model → HF-layout safetensors + tokenizer files, written once at build time.

A GGUF is dequantized here and never again: later loads read safetensors. The output is a
plain HF model dir, so `transformers` can load the very same weights (the reference tests).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import torch

from ..errors import OrinError
from .source import Source

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}

# Read by transformers 4.x (JetPack's Python 3.10 tops out there) and 5.x alike.
_PORTABLE_TOKENIZER_CLASS = "PreTrainedTokenizerFast"


def load_hf_model(source: Source, dtype: str):
    from transformers import AutoModelForCausalLM

    kwargs: dict = {"dtype": DTYPES[dtype]}
    where = source.path
    if source.kind == "gguf":
        kwargs["gguf_file"] = source.path.name
        where = source.path.parent
    logging.getLogger("transformers").setLevel(logging.ERROR)
    try:
        model = AutoModelForCausalLM.from_pretrained(str(where), **kwargs)
    except (OSError, ValueError) as e:
        raise OrinError(f"cannot load model {source.ref!r}: {str(e).splitlines()[0]}") from None
    if getattr(model.config, "model_type", None) != "llama":
        raise OrinError(f"model {source.ref!r} is a {model.config.model_type!r}; only Llama-family "
                        "models are supported")
    # A GGUF load leaves a quantizer behind; what we save is plain dequantized weights.
    if getattr(model.config, "quantization_config", None) is not None:
        del model.config.quantization_config
    model.hf_quantizer = None
    return model


def load_hf_tokenizer(source: Source):
    from transformers import AutoTokenizer

    if source.kind == "gguf":
        return AutoTokenizer.from_pretrained(str(source.path.parent), gguf_file=source.path.name)
    return AutoTokenizer.from_pretrained(str(source.path))


def export_model(model, out: Path) -> None:
    model.save_pretrained(str(out), safe_serialization=True)


def export_quantized(model, out: Path, weights: str, group: int) -> None:
    """The decoder's linear layers weight-only quantized (see kernels/quant.py); embeddings and
    norms as they are; a tied lm_head is not stored twice."""
    from safetensors.torch import save_file

    from ..kernels.quant import quantize

    out.mkdir(parents=True, exist_ok=True)
    tensors = {}
    for name, w in model.state_dict().items():
        if name == "lm_head.weight" and model.config.tie_word_embeddings:
            continue
        if ".layers." in name and name.endswith("_proj.weight"):
            q, scales = quantize(w, weights, group)
            tensors[name[: -len("weight")] + "qweight"] = q.contiguous()
            tensors[name[: -len("weight")] + "scales"] = scales.float().contiguous()
        else:
            tensors[name] = w.contiguous()
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt", "orin_llm_weights": weights})
    model.config.to_json_file(str(out / "config.json"))
    if model.generation_config is not None:
        model.generation_config.to_json_file(str(out / "generation_config.json"))


def export_q4_1(model, out: Path) -> None:
    """q4_1.safetensors: every decoder linear layer's Q4_1 blocks (codes, scales, mins), recovered
    from the dequantized GGUF weights and checked exact (kernels/quant.py recover_q4_1)."""
    from safetensors.torch import save_file

    from ..kernels.quant import recover_q4_1, recover_q8_0
    from ..runtime.weights import Q4_1_FILE

    tensors = {}
    for name, w in model.state_dict().items():
        base = name[: -len("weight")]
        if ".layers." in name and name.endswith("_proj.weight"):
            tensors[base + "qweight"], tensors[base + "scales"], tensors[base + "mins"] = recover_q4_1(w, name)
        elif name.endswith("embed_tokens.weight"):
            try:  # the GGUF's Q8_0 embedding, for lookups; not Q8_0: the float one is used
                tensors[base + "codes"], tensors[base + "scales"] = recover_q8_0(w, name)
            except OrinError:
                pass
    if not tensors:
        raise OrinError("weights = \"q4_1\": the model has no decoder linear layers to keep as Q4_1")
    save_file(tensors, str(out / Q4_1_FILE), metadata={"format": "pt", "orin_llm_weights": "q4_1"})


def export_tokenizer(tokenizer, out: Path) -> None:
    tokenizer.save_pretrained(str(out))
    cfg_path = out / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["tokenizer_class"] = _PORTABLE_TOKENIZER_CLASS
    if tokenizer.chat_template and "chat_template" not in cfg:
        cfg["chat_template"] = tokenizer.chat_template  # older transformers ignore chat_template.jinja
    cfg_path.write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n")
    if not (out / "tokenizer.json").is_file():
        raise OrinError(f"tokenizer export wrote no tokenizer.json in {out}")
