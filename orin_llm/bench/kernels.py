"""`bench --scenario kernels`: per kernel family this CPU runs (kernels/native.py FAMILIES, each in a
process of its own: kernel_quality.py), the perplexity of the calibration text (the calib split's
reference answers, teacher-forced on their homes' prefixes) and the agreement with the float reference
(top-1 agreement, mean |Δ logprob| of the reference token, max |Δ logit|), with a float32 KV cache (the
linear kernels alone) and the engine's INT8 one (the default path), and the chat question's first token
and greedy answer. Beside them: torch's int4 kernel (the native family with ORIN_LLM_Q8_DOT=0: bf16
activations), and llama.cpp on the same GGUF and the same token ids (llama-cpp-python in a venv of its
own: --llama-python, or ORIN_LLM_LLAMA_PYTHON; skipped with the reason where neither is given).

A family whose instructions this CPU lacks is listed with the reason, not run. --quick: one answer of each
of the 12 homes (~650 positions); else five (QUICK, FULL).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Optional

import torch

from ..kernels import native
from ..manifest import load_manifest
from . import kernel_quality as kq
from .common import progress, write_json

LLAMA_PYTHON_VARIABLE = "ORIN_LLM_LLAMA_PYTHON"
LLAMA_SCRIPT = Path(__file__).with_name("llama_cpp_logprobs.py")
ANCHOR = "native, ORIN_LLM_Q8_DOT=0"  # torch's int4 kernel: bf16 activations
# (homes, answers per home) of the calib split: --quick, and the full run (the 60 answers the embedded
# build calibrates its KV scales on)
QUICK, FULL = (12, 1), (12, 5)


def engine_gguf(engine_dir: Path) -> Optional[str]:
    """The GGUF the engine's target was built from, where it is still on this machine."""
    source = load_manifest(engine_dir).target.source_files
    gguf = next((f.path for f in source if f.path.endswith(".gguf")), None)
    return gguf if gguf is not None and Path(gguf).is_file() else None


def llama_cpp(llama_python: Optional[str], gguf: Optional[str], ref: dict, tokenizer) -> dict:
    """llama.cpp's numbers on the reference's token ids, compared as a family's are, or why not."""
    python = llama_python or os.environ.get(LLAMA_PYTHON_VARIABLE)
    if not python:
        return {"skipped": f"no llama-cpp-python: pass --llama-python (or set {LLAMA_PYTHON_VARIABLE}) to a venv's "
                           "python that has it"}
    if gguf is None:
        return {"skipped": "the engine's target was not built from a GGUF that is on this machine"}
    with tempfile.TemporaryDirectory() as tmp:
        job = Path(tmp) / "job.json"
        job.write_text(json.dumps({"gguf": gguf, "seqs": ref["seqs"], "question": ref["question"]["ids"],
                                   "greedy": kq.GREEDY_TOKENS, "eos": ref["eos"],
                                   "threads": torch.get_num_threads()}))
        try:
            r = subprocess.run([python, str(LLAMA_SCRIPT), str(job)], capture_output=True, text=True, timeout=3600)
        except OSError as e:
            return {"skipped": f"{python}: {e}"}
    if r.returncode != 0:
        return {"skipped": f"{python} {LLAMA_SCRIPT.name} exit {r.returncode}: {r.stderr.strip()[-1500:]}"}
    got = json.loads(r.stdout.strip().splitlines()[-1])
    top = torch.cat([torch.tensor(a["argmax"]) for a in got["answers"]])
    nxt = torch.cat([torch.tensor(a["next_logprob"], dtype=torch.float32) for a in got["answers"]])
    # teacher forcing over the GGUF's Q4_1 blocks and llama.cpp's own cache (f16 K/V by default)
    measured = kq.compare_positions(*kq.positions(ref["logits"], ref["seqs"]), top, nxt)
    answer = tokenizer.decode([i for i in got["question"]["answer_ids"] if i not in ref["eos"]])
    return {"llama_cpp": got["llama_cpp"], "system_info": got["system_info"], "gguf": Path(gguf).name,
            "rewind_max_abs_dlogit": got["rewind_max_abs_dlogit"], "teacher_forced": measured,
            "question": {"top": [[tokenizer.decode([i]), round(lp, 3)] for i, lp in got["question"]["top"]],
                         "answer": answer, "reference_answer": ref["question"]["answer"]},
            "seconds": got["seconds"]}


def run(engine_dir: Path, out: Path, quick: bool = False, llama_python: Optional[str] = None) -> dict:
    manifest = load_manifest(engine_dir)
    if manifest.backend != "torch":
        progress("kernels: torch engines only (our C++ ops are the torch runtime's); skipped")
        return {}
    homes, per_home = QUICK if quick else FULL
    families: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        ref_file = Path(tmp) / "reference.pt"
        progress(f"kernels: the float reference on {per_home} answer(s) of each of {homes} calib homes")
        kq.save_reference(engine_dir, ref_file, "calib", homes, per_home)
        ref = torch.load(ref_file, mmap=True)
        runs = [(name, name, kq.EMULATE.get(name)) for name in native.FAMILIES] + [(ANCHOR, native.NATIVE,
                                                                                  {"ORIN_LLM_Q8_DOT": "0"})]
        for label, family, env in runs:
            missing = native.family_missing(native.FAMILIES[family])
            if missing:
                families[label] = {"family": family, "skipped": missing}
                progress(f"kernels: {label}: not on this CPU ({missing})")
                continue
            progress(f"kernels: {label}" + (f" ({' '.join(f'{k}={v}' for k, v in env.items())})" if env else ""))
            families[label] = got = kq.run_family(family, engine_dir, ref_file, env=env, timeout=3600)
            if "error" in got:
                progress(f"kernels: {label}: {got['error'][-300:]}")
                continue
            progress(f"kernels: {label}: {kq.summary(got)}")
        from ..runtime.engine_files import load_tokenizer

        llama = llama_cpp(llama_python, engine_gguf(engine_dir), ref, load_tokenizer(engine_dir / "tokenizer"))
        progress("kernels: llama.cpp: " + (llama["skipped"] if "skipped" in llama else
                                           f"perplexity {llama['teacher_forced']['perplexity']:.4f}"))
        data = {"engine": manifest.name, "split": "calib", "items": len(ref["items"]),
                "positions": int(sum(len(r) for _, rs in ref["seqs"] for r in rs)),
                "reference": {"what": "the engine's float32 export, float32 KV cache, torch's kernels",
                              "perplexity": kq.compare(ref, ref["logits"])["reference_perplexity"],
                              "question_top": ref["question_top"], "answer": ref["question"]["answer"]},
                "families": families, "llama_cpp": llama}
    write_json(out, "kernels", data)
    return data
