"""A Hugging Face model directory that TensorRT-LLM 0.12's convert_checkpoint.py can read when the model
ties its lm_head to the embeddings (Llama 3.2: `"tie_word_embeddings": true`, no `lm_head.weight` in
its safetensors).

Why: at v0.12.0 (R≡J, docs/trtllm-0.12-jetson.md §10) convert_checkpoint.py converts through
`LLaMAForCausalLM.from_hugging_face` (tensorrt_llm/models/llama/model.py L287), by default with the
unified `ModelWeightsLoader` (model.py L328-363). It asks every shard for `lm_head.weight`
(`load_tensor` returns None for a key no shard holds, model_weights_loader.py L168-173) and passes
that None to the lm_head's `ColumnLinear.postprocess` (L271), which calls `None.to(...)`
(tensorrt_llm/layers/linear.py L380): AttributeError. The older loader
(TRTLLM_DISABLE_UNIFIED_CONVERTER=1) reads `dict(hf_model.named_parameters())`, where a tied
lm_head is not listed, and `get_weight(..., "lm_head")` raises KeyError (models/llama/convert.py
L428-433, L1345). The unified loader reads every `*.safetensors` file of the directory (glob,
model_weights_loader.py L143-158), so a directory of links to the checkpoint's files plus one more
file, `lm_head.safetensors`, holding the embedding's bytes under the name `lm_head.weight`, converts.

Only the safetensors container is touched (8-byte header length, JSON header, raw bytes: the format
as huggingface/safetensors documents it), so this runs without torch and copies in chunks: a 3B's
embedding is ~0.75 GiB and the Orin shares its memory with the policy.

    python -m orin_llm.build.tied_head --model_dir HF_DIR --output_dir OUT_DIR
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import sys
from pathlib import Path

from ..errors import OrinError

EMBEDDING = "model.embed_tokens.weight"
HEAD = "lm_head.weight"
HEAD_FILE = "lm_head.safetensors"
CHUNK = 16 << 20


def read_header(path: Path) -> tuple[dict, int]:
    """(the safetensors JSON header, the offset of the data section)."""
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise OrinError(f"{path}: not a safetensors file (shorter than its 8-byte header length)")
        (n,) = struct.unpack("<Q", raw)
        try:
            header = json.loads(f.read(n))
        except ValueError as e:
            raise OrinError(f"{path}: not a safetensors file ({e})") from None
    return header, 8 + n


def tensor_names(model_dir: Path) -> dict[str, Path]:
    """Every tensor name of the directory's *.safetensors files → its file."""
    names: dict[str, Path] = {}
    for path in sorted(model_dir.glob("*.safetensors")):
        header, _ = read_header(path)
        for name in header:
            if name != "__metadata__":
                names[name] = path
    return names


def write_head(model_dir: Path, out: Path) -> Path:
    """Write ``out/lm_head.safetensors``: the embedding's dtype, shape and bytes as ``lm_head.weight``."""
    names = tensor_names(model_dir)
    if EMBEDDING not in names:
        raise OrinError(f"{model_dir}: no {EMBEDDING} in its *.safetensors files; TensorRT-LLM 0.12 converts "
                        "Hugging Face Llama checkpoints in safetensors: download the model's safetensors files")
    src = names[EMBEDDING]
    header, data_start = read_header(src)
    entry = header[EMBEDDING]
    begin, end = entry["data_offsets"]
    new_header = json.dumps({HEAD: {"dtype": entry["dtype"], "shape": entry["shape"],
                                    "data_offsets": [0, end - begin]}}).encode()
    new_header += b" " * (-len(new_header) % 8)  # the data section starts 8-byte aligned
    path = out / HEAD_FILE
    with open(src, "rb") as fin, open(path, "wb") as fout:
        fout.write(struct.pack("<Q", len(new_header)))
        fout.write(new_header)
        fin.seek(data_start + begin)
        left = end - begin
        while left:
            chunk = fin.read(min(CHUNK, left))
            if not chunk:
                raise OrinError(f"{src}: ends inside {EMBEDDING}; the file is truncated, download it again")
            fout.write(chunk)
            left -= len(chunk)
    return path


def untie(model_dir: Path, out: Path) -> bool:
    """Make ``out`` the model directory convert_checkpoint.py reads: a link to each of ``model_dir``'s files,
    and where no shard holds ``lm_head.weight``, ``lm_head.safetensors``. Returns whether it wrote one."""
    model_dir, out = Path(model_dir).absolute(), Path(out)
    if not (model_dir / "config.json").is_file():
        raise OrinError(f"{model_dir} is not a Hugging Face model directory (no config.json)")
    out.mkdir(parents=True, exist_ok=True)
    for old in out.iterdir():  # a re-run starts from the source directory as it is now
        if old.is_symlink() or old.is_file():
            old.unlink()
    for f in sorted(model_dir.iterdir()):
        if f.is_file():
            os.symlink(f, out / f.name)
    if HEAD in tensor_names(model_dir):
        return False
    write_head(model_dir, out)
    return True


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m orin_llm.build.tied_head", description=__doc__.split("\n\n")[0])
    p.add_argument("--model_dir", required=True)
    p.add_argument("--output_dir", required=True)
    a = p.parse_args(argv)
    try:
        wrote = untie(Path(a.model_dir), Path(a.output_dir))
    except OrinError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"{a.output_dir}: links to {a.model_dir}'s files"
          + (f" and {HEAD_FILE} ({HEAD} = {EMBEDDING})" if wrote else f" (it holds {HEAD} already)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
