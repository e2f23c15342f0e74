"""A model directory → a Llama: safetensors into our fused layout, quantized layers, packed kernels.

The formats (a manifest entry's `weights`):
- fp32 / fp16 / bf16: model.safetensors as transformers writes it. On CPUs the linear layers are
  packed once for oneDNN (packed.py).
- int8_wo / int4_wo (the draft): `<layer>.qweight` / `.scales` in model.safetensors (quant.py).
- q4_1 (the target of a Q4_1 GGUF): model.safetensors stays transformers' float32 export (the
  reference the tests compare with, and what `weights="fp32"` loads), and q4_1.safetensors holds
  each linear layer's Q4_1 blocks, recovered at build time (quant.recover_q4_1). Loading q4_1 reads
  only the other tensors of model.safetensors (norms, the embedding).

Kernels (invariant 5, no silent fallback): the build records in the manifest which packed kernels
the quantized layers run on a CPU, and `check_kernels` refuses to load such an engine on a CPU whose
torch lacks one, saying what to do. On CUDA the int4 layers stay 4-bit on torch's int4 kernel
(kernels/cuda_linear.py: the Q4_1 blocks repacked at load, checked against the dequantized layer),
computing in bf16 (kernel_plan.compute_dtype); a layer that kernel cannot take, or every layer with
ORIN_LLM_INT4_CUDA=0, is dequantized once at load to the compute dtype, and the log and the kernel
plan say so.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Optional

import torch
from safetensors import safe_open
from safetensors.torch import load_file
from torch import nn

from ..arch import Arch
from ..errors import OrinError
from ..kernels import decode_layer
from ..kernels.cuda_linear import TritonQ8Head, choose_int4
from ..kernels.packed import PackedLinear, pack_linears, rows_independent
from ..kernels.quant import Q8Embedding, QuantLinear, kernel_available, quantize_tied_head
from . import k_smoothing
from .head import Q8Head
from .kernel_plan import PROBE_ROWS, QUANTIZED, CpuFeatures, KernelPlan, KernelSwitches, plan_kernels
from .llama import Llama

log = logging.getLogger(__name__)

Q4_1_FILE = "q4_1.safetensors"

_FUSED = {"q_proj": ("qkv_proj", ("q_proj", "k_proj", "v_proj")),
          "gate_proj": ("gate_up_proj", ("gate_proj", "up_proj"))}
_FOLDED = {"k_proj", "v_proj", "up_proj"}  # concatenated into the layer above


def release_freed_memory() -> bool:
    """Give the C heap's free pages back to the OS (glibc's malloc_trim; elsewhere nothing): what a
    load or a long prefill freed can stay resident in the allocator's free lists. Measured here: no
    change right after one engine's load, 240 MB returned after a first engine was freed in the same
    process; cheap either way."""
    libc = _libc()
    try:
        return bool(libc is not None and libc.malloc_trim(0))
    except AttributeError:  # not glibc (musl, macOS): no malloc_trim
        return False


# glibc's mallopt parameter numbers (malloc.h)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
# Allocations below this come from the heap, where a freed block is reused by the next step. A decode
# step's largest temporaries are [rows, vocab] float32 logits (6.3 MB for 32 rows: 4 requests with
# 7-token drafts); a 4k-token prefill's larger ones are mapped and unmapped, which its compute dwarfs.
MMAP_THRESHOLD_BYTES = 16 << 20
# Free memory at the top of the heap past this goes back to the OS: twice the largest block the
# heap serves, so one step's temporaries never trim and fault back in on the next step.
TRIM_THRESHOLD_BYTES = 32 << 20


def bound_heap() -> bool:
    """Fix glibc's mmap threshold at 16 MiB and its trim threshold at 32 MiB (mallopt), unless
    MALLOC_TRIM_THRESHOLD_ or MALLOC_MMAP_THRESHOLD_ is set.

    Why both, and why these: left to itself, glibc raises both thresholds (up to 32 and 64 MiB) each
    time a large block is freed, and a greedy daemon grew 66 MB over 12 plans. Fixing the trim
    threshold alone at 1 MiB (what we did first) also froze the mmap threshold at 128 KiB: every
    per-layer K/V read and logits buffer of a decode step was then mapped fresh and unmapped, and a
    daemon whose heap got into that state took 420-500k page faults per 64-token plan and decoded
    at 31 instead of 50 tok/s (the "slow mode"). With these values it takes under 1k, for 14-18 MB more
    resident memory (docs/notes/benchmarks-lab-notes.md, "The slow mode was page faults")."""
    if os.environ.get("MALLOC_TRIM_THRESHOLD_") or os.environ.get("MALLOC_MMAP_THRESHOLD_"):
        return False
    libc = _libc()
    try:
        return bool(libc is not None and libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
                    and libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))
    except AttributeError:  # not glibc
        return False


def _libc():
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name) if name else None
    except OSError:
        return None


def check_kernels(kernels: list[str], device: str | torch.device, what: str) -> None:
    """Refuse, on a CPU, an engine whose quantized layers need a packed kernel this torch lacks."""
    if torch.device(device).type != "cpu":
        return
    missing = [k for k in kernels if not kernel_available(k, "cpu")]
    if missing:
        raise OrinError(f"{what} runs {', '.join(missing)} on CPUs, and this torch ({torch.__version__}) "
                        "does not have it here; load the float32 weights instead (`orin-llm serve "
                        "--weights fp32`, Engine.load(weights=\"fp32\")), or rebuild with weights = \"fp32\"")


def _fuse(state: dict[str, torch.Tensor], arch: Arch) -> dict[str, torch.Tensor]:
    """HF names → ours: q|k|v and gate|up concatenated row-wise, for plain and quantized tensors."""
    out = {}
    for name, w in state.items():
        name = name.removeprefix("model.")
        module, _, suffix = name.rpartition(".")
        parent, _, leaf = module.rpartition(".")
        if leaf in _FOLDED:
            continue
        if leaf in _FUSED:
            fused, parts = _FUSED[leaf]
            name = f"{parent}.{fused}.{suffix}"
            w = torch.cat([state[f"model.{parent}.{p}.{suffix}"] for p in parts])
        out[name] = w
    if arch.tie_word_embeddings or "lm_head.weight" not in out:
        out["lm_head.weight"] = out["embed_tokens.weight"]
    return out


def _read(model_dir: Path, q4_1: bool) -> dict[str, torch.Tensor]:
    """The tensors, copied out of the files: safetensors hands out views of its memory map, and one
    small view kept (a norm's weight) keeps the whole file mapped and its read pages resident
    (measured: 400 MB of the embedded engine's daemon, docs/notes/benchmarks-lab-notes.md)."""
    files = sorted(model_dir.glob("model*.safetensors"))  # not kv_scales.safetensors
    if not files:
        raise OrinError(f"{model_dir}: no *.safetensors weights")
    state: dict[str, torch.Tensor] = {}
    if not q4_1:
        for f in files:
            state.update({name: t.clone() for name, t in load_file(str(f)).items()})
        return state
    if not (model_dir / Q4_1_FILE).is_file():
        raise OrinError(f"{model_dir}: no {Q4_1_FILE}; the engine is not a q4_1 build (rebuild it)")
    state = {name: t.clone() for name, t in load_file(str(model_dir / Q4_1_FILE)).items()}
    for f in files:  # the rest, tensor by tensor: the float32 linear weights are never read
        with safe_open(str(f), framework="pt") as st:
            for name in st.keys():  # noqa: SIM118 (safe_open is not a mapping)
                if not name.endswith("_proj.weight"):
                    state[name] = st.get_tensor(name).clone()
    return state


def load_llama(model_dir: Path, arch: Arch, dtype: torch.dtype, device: str, max_positions: int,
               weights: str = "fp32", switches: KernelSwitches = KernelSwitches(), kv_cache: str = "fp32",
               decode_width: int = 0, k_smooth: Optional[torch.Tensor] = None) -> Llama:
    """`weights`: the manifest's (or the caller's override); "q4_1" loads q4_1.safetensors. The model's
    kernels are planned here, once (kernel_plan.py), from this machine's features, `switches`, and the
    engine: its cache dtype `kv_cache` and its exact decode steps' width `decode_width` (0: not exact).
    `k_smooth`: K smoothing factors folded into the q and k rows (k_smoothing.py; None: none)."""
    features = CpuFeatures.probe(device, switches, weights in QUANTIZED)
    plan = plan_kernels(features, arch, kv_cache, device, switches, weights, dtype)
    state = _read(model_dir, weights == "q4_1")
    with torch.device("meta"):
        model = Llama(arch, max_positions)
    fused = _fuse(state, arch)
    k_smoothing.apply(fused, k_smooth, arch)
    embed = (fused.pop("embed_tokens.codes"), fused.pop("embed_tokens.scales")) if "embed_tokens.codes" in fused \
        else None
    quantized = [n[: -len(".qweight")] for n in fused if n.endswith(".qweight")]
    for name in quantized:  # weight-only quantized layers (the draft model, a q4_1 target)
        qweight, scales = fused.pop(name + ".qweight"), fused.pop(name + ".scales")
        # on CUDA the layer is repacked below: its scales and mins kept as given until then (fp16 values)
        held = torch.float32 if plan.int4_cuda else dtype
        model.set_submodule(name, QuantLinear(qweight, scales, held, fused.pop(name + ".mins", None)))
    missing, unexpected = model.load_state_dict({k: v.to(dtype) for k, v in fused.items()},
                                                strict=False, assign=True)
    missing = [m for m in missing if m not in ("cos", "sin") and m.rpartition(".")[0] not in quantized]
    if missing or unexpected:
        raise OrinError(f"{model_dir}: weights do not match a Llama of this config "
                        f"(missing {missing[:3]}, unexpected {unexpected[:3]})")
    model = model.to(device).eval()
    # timed at the rows decode steps run: W, and 1 where plain steps may run 1 row wide (cuda_graphs.py)
    rows = (1, decode_width) if plan.triton_attention and decode_width > 1 else (max(1, decode_width),)
    int4_why, int4_layers = _pack_cuda(model, dtype, plan.int4_kernel if plan.triton_linear else "int4pack",
                                       rows) if plan.int4_cuda else (None, ())
    independent = _pack(model, device, dtype, weights, plan)
    if embed is not None:  # a q4_1 target: its GGUF's Q8_0 embedding for lookups; the float one only as the head
        model.embed_tokens = Q8Embedding(*embed, dtype).to(device)
        if arch.tie_word_embeddings and dtype == torch.float32 and plan.torch_int8:
            # the tied head over the same codes: int8 with exact greedy choices, float32 on demand (head.py)
            model.lm_head = Q8Head(model.embed_tokens, plan.q8_dot, plan.onednn_pack)
            release_freed_memory()  # the float32 head just dropped: vocab × hidden float32s
    head_why = None
    if plan.triton_head and embed is not None and arch.tie_word_embeddings:
        # the tied head over the Q8_0 codes the embedding holds, with the file's scales (cuda_linear.py)
        head, head_why = TritonQ8Head.build(model.embed_tokens.codes, embed[1])
        if head is not None:
            model.lm_head = head
        else:
            log.warning("the Triton INT8 head does not run here (%s): the head stays %s", head_why, dtype)
    elif plan.triton_head:
        head_why = "no Q8_0 embedding tied to the head"
    if plan.int4_cuda and isinstance(model.lm_head, TritonQ8Head):
        independent = rows_independent(model, PROBE_ROWS)  # again: the head the probe saw is gone
    args = [decode_layer.layer_args(b) for b in model.layers] if plan.fused_decode else []
    fusable = None if all(a is not None for a in args) else "a layer does not run on q8_dot's kernels"
    model.plan = plan.settled(independent, fusable, decode_width, _head_kernel(model.lm_head), int4_why, head_why,
                              int4_layers)
    model.fused_args = args if model.plan.fused_decode else None
    if torch.device(device).type == "cpu" and not plan.bf16_prompt:
        log.info("no bf16 prompt attention (%s): prefill attention over an INT8 KV cache runs float32 SDPA "
                 "(slower at long prompts, same results to rounding)", dict(plan.why_not).get("bf16_prompt_attention"))
    return model


def _head_kernel(head: nn.Module) -> str:
    """The lm_head's kernel, in words (the plan's report)."""
    if isinstance(head, Q8Head):
        on = "q8_dot" if head.on_q8_dot else "torch's int8 kernel"
        return f"int8 candidates on {on}, the top recomputed exactly; float32 on demand (head.py)"
    if isinstance(head, QuantLinear):
        return "int8 weight-only, tied to the embedding" + (" (q8_dot)" if head.q8 is not None else "")
    if isinstance(head, TritonQ8Head):
        return "int8 over the Q8_0 embedding's codes and scales, float32 logits (Triton)"
    if isinstance(head, nn.Linear) and head.weight.is_cuda:
        return f"torch's Linear in {str(head.weight.dtype).removeprefix('torch.')}, tied to the embedding's values"
    return "oneDNN packed float32" if isinstance(head, PackedLinear) else f"torch's {type(head).__name__}"


def _pack_cuda(model: Llama, dtype: torch.dtype, asked: str, rows: tuple[int, ...]) -> tuple[Optional[str], tuple]:
    """The int4 layers onto a CUDA int4 kernel: per layer shape the one cuda_linear.choose_int4 picks
    (`asked`: KernelSwitches.int4_kernel; timed at `rows` rows, the decode steps'); a layer no kernel
    takes is dequantized once. Returns why not every layer runs one (None: all do), and per shape
    (out x in, kernel, the choice in words)."""
    why, chosen = None, {}
    for name, m in [(n, m) for n, m in model.named_modules() if isinstance(m, QuantLinear) and m.bits == 4]:
        layer, reason, _ = choose_int4(m, dtype, rows, asked, chosen)
        if layer is None:
            why = why or f"{name}: {reason}"
            layer = nn.Linear(m.in_features, m.out_features, bias=False, device=m.qweight.device, dtype=dtype)
            layer.weight.data = m.dequantize().to(dtype)
        model.set_submodule(name, layer)
    if why:
        log.warning("the CUDA int4 kernel does not run every layer (%s): those are dequantized", why)
    layers = tuple((f"{n}x{k}", c.kernel, c.describe()) for (n, k), c in chosen.items())
    for shape, _, words in layers:
        log.info("int4 layers %s: %s", shape, words)
    return why, layers


def _pack(model: Llama, device: str, dtype: torch.dtype, weights: str, plan: KernelPlan) -> bool:
    """Put every linear layer on the plan's kernel, and probe row independence (packed.py): whether it holds."""
    quant = [(n, m) for n, m in model.named_modules() if isinstance(m, QuantLinear)]
    if quant and not all([m.pack(plan.q8_dot) for _, m in quant]):
        if weights == "q4_1":  # the target: dequantize once, not per call (check_kernels refused a CPU)
            for name, m in quant:
                if m.packed:  # this one's shape did run packed
                    continue
                lin = nn.Linear(m.in_features, m.out_features, bias=False, device=device, dtype=dtype)
                lin.weight.data = m.dequantize()
                model.set_submodule(name, lin)
            log.info("no packed int4 kernel on %s: the q4_1 layers are dequantized to %s at load", device, dtype)
        else:
            log.info("no packed weight-only kernel on %s: the quantized layers dequantize per call (slower)",
                     device)
    elif quant and weights != "q4_1":  # a draft's tied float head too, to one int8 matrix
        quantize_tied_head(model, dtype, plan.q8_dot)  # (a target's stays float: logits in float32, quant.py)
    if plan.onednn_pack and any(type(m) is nn.Linear for m in model.modules()):
        if not pack_linears(model):
            log.warning("oneDNN could not pack the linear layers on this CPU: torch's default ones run (slower)")
            return False
    if weights == "q4_1" or any(isinstance(m, PackedLinear) for m in model.modules()):
        if rows_independent(model, PROBE_ROWS):
            return True
        log.info("the linear kernels are not row-independent here: exact decode steps are padded")
    return False
