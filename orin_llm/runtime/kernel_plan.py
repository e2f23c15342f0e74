"""Which kernel runs each step of a model, decided once when it loads: the kernel plan.

Three inputs, each read once at load and passed in:
- the switches (`KernelSwitches`): the ORIN_LLM_* environment variables that turn a kernel off for A/B
  measurements, read where the process starts (EngineConfig.at_edge) and handed down in the EngineConfig;
- the CPU's features (`CpuFeatures`): bf16 dot products, torch's oneDNN and packed weight-only kernels,
  and which of our C++ ops (native.py) built here, or why not;
- the engine: the device, the compute and cache dtypes, the weights' format and the head size.

`plan_kernels` turns them into a `KernelPlan`, an immutable object the model keeps (Llama.plan) and
reads at every step instead of flags: per step kind (a decode step, verify and draft rows, a prompt
chunk, the lm_head) and cache dtype, which kernel runs, and for each of our kernels not used, why.
A few facts are known only once the weights are in place (whether every layer's shape runs on q8_dot's
tiles, whether the linear kernels' rows are independent, which head was built): `KernelPlan.settled`
records them before the model gets its plan. /health reports it (`KernelPlan.report`).

Only the choice lives here: the kernels are in their modules (q8_dot.py, int8_attention.py,
prefill_attention.py, decode_layer.py, attention.py, packed.py, quant.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Optional

import torch

from ..arch import Arch
from ..kernels import decode_layer, int8_attention, prefill_attention, q8_dot
from ..kernels.attention import bf16_dot_products
from ..kernels.cuda_linear import INT4_KERNELS
from ..kernels.int8_attention import HEAD_DIMS
from ..kernels.packed import onednn_available
from ..kernels.quant import INT8_KERNEL, kernel_available
from ..kernels.triton import available as triton_available

PROBE_ROWS = 16  # row independence is checked up to this many rows: past any draft length we run

# Our C++ ops' names, as /health has always called them
Q8_DOT, FUSED = "q8_dot", "fused_decode_layer"
INT8_DECODE, INT8_PROMPT = "int8_decode_attention", "int8_prompt_attention"
BF16_PROMPT, ONEDNN = "bf16_prompt_attention", "onednn_packing"  # torch's kernels, which a switch turns off too
INT4_CUDA, GRAPHS, COMPILE = "int4_cuda_linear", "cuda_graphs", "torch_compile"  # the CUDA path's
TRITON_ATTN, TRITON_HEAD, TRITON_LINEAR = "triton_decode_attention", "triton_int8_head", "triton_int4_linear"
FUSED_STEP = "triton_step_ops"  # the fixed-shape step's small ops fused (kernels/triton/step_ops.py)
TRITON_PREFILL = "triton_prefill_attention"  # prompt chunks' attention over the pool (kernels/triton)
CUDA_KERNELS = (INT4_CUDA, GRAPHS, COMPILE, TRITON_ATTN, TRITON_HEAD, TRITON_LINEAR, FUSED_STEP, TRITON_PREFILL)

QUANTIZED = ("q4_1", "int8_wo", "int4_wo")  # weight formats whose linear layers are QuantLinear (quant.py)

# switch field -> its environment variable (the names docs/ and bench/ use)
SWITCH_VARIABLES = {
    "q8_dot": "ORIN_LLM_Q8_DOT",
    "int8_attention": "ORIN_LLM_INT8_ATTN",
    "prefill_attention": "ORIN_LLM_PREFILL_ATTN",
    "fused_decode": "ORIN_LLM_FUSED_DECODE",
    "bf16_attention": "ORIN_LLM_BF16_ATTN",
    "pack": "ORIN_LLM_PACK",
    "int4_cuda": "ORIN_LLM_INT4_CUDA",
    "cuda_graphs": "ORIN_LLM_CUDA_GRAPHS",
    "triton_attention": "ORIN_LLM_TRITON_ATTN",
    "triton_head": "ORIN_LLM_TRITON_HEAD",
    "fused_step": "ORIN_LLM_FUSED_STEP",
    "triton_prefill": "ORIN_LLM_TRITON_PREFILL",
}
# off unless set to 1 (OPT_IN): compiling the decode step costs tens of seconds per batch bucket at start
OPT_IN = {"torch_compile": "ORIN_LLM_COMPILE"}
# which CUDA int4 kernel runs the Q4_1 layers (cuda_linear.INT4_KERNELS): auto (the default) times torch's
# and the Triton GEMV per layer shape at load and keeps the faster; int4pack, gemv or tiled force one
INT4_KERNEL_VARIABLE = "ORIN_LLM_INT4_KERNEL"


@dataclass(frozen=True)
class KernelSwitches:
    """Kernels turned on (True, the default) or off, for A/B measurements against what runs without them."""
    q8_dot: bool = True  # q8_dot's integer dot products for quantized layers
    int8_attention: bool = True  # the INT8 decode attention op
    prefill_attention: bool = True  # the INT8 prompt attention op
    fused_decode: bool = True  # the fused decode layer
    bf16_attention: bool = True  # prompt attention over an INT8 cache as bf16 GEMMs
    pack: bool = True  # oneDNN-packed float32 linear layers
    int4_cuda: bool = True  # Q4_1 layers on torch's CUDA int4 kernel (cuda_linear.py), not dequantized
    cuda_graphs: bool = True  # decode steps at fixed shapes, captured in CUDA graphs per bucket (cuda_graphs.py)
    triton_attention: bool = True  # those steps' attention on the Triton paged kernel (kernels/triton)
    triton_head: bool = True  # a Q4_1 target's tied head on the Triton INT8 kernel over the Q8_0 codes
    fused_step: bool = True  # the fixed-shape step's small ops in fused Triton kernels (kernels/triton/step_ops.py)
    triton_prefill: bool = True  # prompt chunks' attention on the Triton paged prefill kernel (CUDA)
    torch_compile: bool = False  # those steps' small ops fused by torch.compile (ORIN_LLM_COMPILE=1)
    int4_kernel: str = "auto"  # the CUDA int4 kernel of the Q4_1 layers (ORIN_LLM_INT4_KERNEL, INT4_KERNELS)

    def __post_init__(self):
        if self.int4_kernel not in INT4_KERNELS:
            raise ValueError(f"{INT4_KERNEL_VARIABLE}={self.int4_kernel!r}: set it to one of {', '.join(INT4_KERNELS)}")

    @classmethod
    def from_environment(cls, env: Mapping[str, str]) -> KernelSwitches:
        """The switches as `env` (the process's environment, read at the edge: engine_config.py) sets them: a
        variable set to 0 turns its kernel off (ORIN_LLM_COMPILE=1 turns compilation on)."""
        return cls(**{name: env.get(var, "1") != "0" for name, var in SWITCH_VARIABLES.items()},
                   **{name: env.get(var, "0") == "1" for name, var in OPT_IN.items()},
                   int4_kernel=env.get(INT4_KERNEL_VARIABLE, "auto").strip().lower() or "auto")

    def off(self, name: str) -> Optional[str]:
        """Why switch `name` keeps its kernel from running (None: it does not)."""
        if name in OPT_IN:
            return None if getattr(self, name) else f"not asked for ({OPT_IN[name]}=1 turns it on)"
        return None if getattr(self, name) else f"turned off ({SWITCH_VARIABLES[name]}=0)"


@dataclass(frozen=True)
class CpuFeatures:
    """What this machine offers the model: probed once (`probe`), or written out by a test."""
    cpu: bool  # the model runs on a CPU: our ops, oneDNN packing and torch's packed kernels are CPU-only
    bf16_dot: bool = False  # bf16 dot-product instructions (AVX512-BF16, AMX): bf16 GEMMs at speed
    onednn: bool = False  # torch's oneDNN linear kernels, to pack float32 weights for
    torch_int8: bool = False  # torch's packed weight-only int8 kernel (quant.INT8_KERNEL)
    ops: tuple[tuple[str, Optional[str]], ...] = ()  # our C++ ops asked for: (name, None where built, else why not)

    def op(self, name: str) -> Optional[str]:
        """None where op `name` built here, else why it is not available."""
        return dict(self.ops).get(name, "not built for this engine")

    @classmethod
    def probe(cls, device: str | torch.device, switches: KernelSwitches, quantized: bool) -> CpuFeatures:
        """This machine's features for a model on `device`. Our ops are built (or loaded) only where the
        plan could use them: not where a switch turns them off, q8_dot and the fused layer only for
        quantized weights, the prompt op only with bf16 dot products."""
        if torch.device(device).type != "cpu":
            return cls(cpu=False)
        bf16 = bf16_dot_products()
        ops: dict[str, Optional[str]] = {}

        def ask(name: str, switch: str, module, wanted: bool) -> None:
            if switches.off(switch):
                ops[name] = switches.off(switch)
            elif wanted:
                ops[name] = None if module.op() is not None else (module.unavailable() or "not available")

        ask(INT8_DECODE, "int8_attention", int8_attention, True)
        ask(INT8_PROMPT, "prefill_attention", prefill_attention, bf16 and switches.bf16_attention)
        ask(Q8_DOT, "q8_dot", q8_dot, quantized)
        ask(FUSED, "fused_decode", decode_layer, quantized and ops.get(Q8_DOT, "") is None
            and ops.get(INT8_DECODE, "") is None)
        return cls(cpu=True, bf16_dot=bf16, onednn=onednn_available(),
                   torch_int8=kernel_available(INT8_KERNEL, "cpu"), ops=tuple(ops.items()))


def _first(*checks: tuple[bool, str]) -> Optional[str]:
    """The reason of the first failed check (None: all passed)."""
    return next((why for ok, why in checks if not ok), None)


@dataclass(frozen=True)
class KernelPlan:
    """The kernels a model runs, decided at load. The fields the forward reads at each step are plain
    booleans; `why_not` says, for each of our kernels not used, why; `report` gives it all per step kind
    and cache dtype. Immutable: an A/B comparison in one process swaps the model's plan (dataclasses.replace)."""
    device: str = "cpu"
    kv_cache: str = "fp32"  # the engine's cache dtype (the plan answers for both kinds of cache)
    weights: str = "fp32"
    q8_dot: bool = False  # quantized linear layers on q8_dot's kernels (where a layer's shape fits)
    onednn_pack: bool = False  # float32 linear layers packed for oneDNN (packed.py)
    torch_int8: bool = False  # torch's packed int8 weight-only kernel runs here (quant.py)
    bf16_prompt: bool = False  # prompt attention over an INT8 cache past MIN_KEYS keys: bf16 GEMMs (attention.py)
    int8_decode: bool = False  # decode and verify attention over an INT8 cache: the INT8 decode op
    int8_prompt: bool = False  # those bf16 prompt steps on the INT8 prompt op instead of the GEMMs
    fused_decode: bool = False  # those steps' layers in one C++ call each (decode_layer.py)
    # exact (batch-invariant) decode and verify steps of up to decode_width rows (0: not exact), on
    # row-independent kernels or else padded to decode_width rows (llama.py)
    decode_width: int = 0
    rows_independent: bool = False
    lm_head: str = "torch's linear"
    int4_cuda: bool = False  # Q4_1 layers on torch's CUDA int4 kernel (cuda_linear.py)
    cuda_graphs: bool = False  # exact decode steps at fixed shapes in CUDA graphs per bucket (cuda_graphs.py)
    torch_compile: bool = False  # the fixed-shape decode step compiled (torch.compile) before capture
    triton_attention: bool = False  # the fixed-shape step's attention on the Triton paged kernel
    triton_head: bool = False  # the tied head on the Triton INT8 kernel (cuda_linear.TritonQ8Head)
    # the fixed-shape step's residual adds + RMSNorms, RoPE + K/V write, SiLU·mul as fused Triton kernels
    fused_step_ops: bool = False
    triton_prefill: bool = False  # a prompt chunk's attention in one Triton call per layer over the paged pool
    # int4 layers may run a Triton kernel (cuda_linear.py: the GEMV, or the tiled one); settled: some do
    triton_linear: bool = False
    int4_kernel: str = "auto"  # what was asked for (KernelSwitches.int4_kernel)
    int4_layers: tuple[tuple[str, str], ...] = field(default=())  # settled: (out x in, the kernel and its timings)
    why_not: tuple[tuple[str, str], ...] = field(default=())  # (kernel, why it is not used)

    def settled(self, rows_independent: bool, layers_fuse: Optional[str], decode_width: int,
                lm_head: str, int4_cuda: Optional[str] = None, triton_head: Optional[str] = None,
                int4_layers: tuple[tuple[str, str, str], ...] = ()) -> KernelPlan:
        """The plan once the weights are in place: `rows_independent` as probed (packed.py),
        `layers_fuse` None where every layer can run the fused op (else why not), the exact steps'
        width (0: not exact), the head that was built, why a planned CUDA int4 kernel did not
        take every Q4_1 layer (None: it did), and per int4 layer shape (out x in, kernel, in words) the
        kernel cuda_linear.choose_int4 chose."""
        why = dict(self.why_not)
        fused = self.fused_decode and rows_independent and layers_fuse is None
        if self.fused_decode and not fused:
            why[FUSED] = layers_fuse or "the linear kernels are not row-independent here"
        int4 = self.int4_cuda and int4_cuda is None
        if self.int4_cuda and not int4:
            why[INT4_CUDA] = int4_cuda
        triton = int4 and any(kernel != "int4pack" for _, kernel, _ in int4_layers) if int4_layers else \
            self.triton_linear and int4
        if self.triton_linear and not triton:
            why[TRITON_LINEAR] = ("torch's int4 kernel was faster at every layer shape (timed at load)"
                                  if int4 else f"no CUDA int4 layers ({why.get(INT4_CUDA)})")
        head = self.triton_head and triton_head is None
        if self.triton_head and not head:
            why[TRITON_HEAD] = triton_head
        graphs = self.cuda_graphs and decode_width > 0
        if self.cuda_graphs and not graphs:
            why[GRAPHS] = "the engine's decode steps are not exact (exact=False): they run eagerly"
        # row independence was probed up to PROBE_ROWS rows; wider exact steps are padded (slower, still exact)
        rows = rows_independent and decode_width <= PROBE_ROWS
        return replace(self, fused_decode=fused, rows_independent=rows, decode_width=decode_width,
                       lm_head=lm_head, int4_cuda=int4, cuda_graphs=graphs, triton_head=head,
                       triton_linear=triton, int4_layers=tuple((shape, words) for shape, _, words in int4_layers),
                       triton_attention=self.triton_attention and graphs,
                       fused_step_ops=self.fused_step_ops and graphs,
                       torch_compile=self.torch_compile and graphs, why_not=tuple(why.items()))

    @property
    def linear(self) -> str:
        """The linear layers' kernel, in words."""
        if self.weights in QUANTIZED:
            if self.q8_dot:
                return "q8_dot"
            if self.int4_cuda:
                return self._int4_linear()
            if self.device == "cpu":
                return "torch's packed weight-only kernels (where a layer's shape fits; dequantized elsewhere)"
            return "dequantized (no packed weight-only kernel on this device)"
        return "oneDNN packed float32" if self.onednn_pack else "torch's linear"

    def _int4_linear(self) -> str:
        torch_int4 = "torch's CUDA int4 kernel (_weight_int4pack_mm)"
        gemv = "the Triton int4 GEMV (kernels/triton/int4_gemv.py)"
        tiled = "the Triton tiled int4 kernel (kernels/triton/q4_linear.py)"
        family = ("the Triton decode GEMV family (kernels/triton/decode_gemv.py; prompt chunks: its GEMM, "
                  "prompt_gemm.py)")
        kernels = {torch_int4 if words.startswith("torch") else family if "decode family" in words
                   else gemv if "GEMV" in words else tiled for _, words in self.int4_layers}
        if len(kernels) > 1:
            return f"per layer shape, {' or '.join(sorted(kernels))}, the fastest at load (int4_layers)"
        if kernels:
            kernel = kernels.pop()
        elif not self.triton_linear or self.int4_kernel == "int4pack":
            kernel = torch_int4
        else:
            kernel = {"gemv": gemv, "tiled": tiled, "family": family}.get(
                self.int4_kernel, f"{torch_int4}, {gemv} or {family} per layer shape, the fastest at load")
        return f"{kernel}, the Q4_1 blocks repacked at load"

    def steps(self, int8_cache: bool) -> dict[str, dict[str, str]]:
        """Per step kind, what runs the layers and the attention over an INT8 or a float cache."""
        int8_op = int8_cache and self.int8_decode
        fused = int8_cache and self.fused_decode
        layers = f"fused decode_layer around {self.linear}" if fused else self.linear
        graphed_layers = layers + ("; residual add + RMSNorm, RoPE + K/V write, SiLU·mul fused (Triton)"
                                   if self.cuda_graphs and self.fused_step_ops else "")
        decode = "INT8 decode op" if int8_op else "SDPA"
        verify = "INT8 decode op" if int8_op else "SDPA per query" if self.decode_width else "SDPA, causal mask"
        if self.cuda_graphs:  # cuda_graphs.py: fixed shapes, the block tables as static tensors
            graphed = ("Triton paged decode attention over the block table, one query a row, in a CUDA graph per bucket"
                       if self.triton_attention else
                       "SDPA over the block table's keys, masked per query, in a CUDA graph per bucket"
                       + (" (torch.compile)" if self.torch_compile else ""))
            decode = verify = graphed
        before = "INT8 decode op" if fused and self.int8_prompt else "SDPA per block"
        if int8_cache and self.int8_prompt:
            prompt = f"INT8 prompt op past MIN_KEYS keys, {before} before"
        elif int8_cache and self.bf16_prompt:
            prompt = "bf16 GEMMs past MIN_KEYS keys, SDPA per block before"
        else:
            prompt = "SDPA per block"
        if self.triton_prefill:
            prompt = "Triton paged prefill attention over the pool, one call per layer and chunk" + (
                "" if int8_cache else " (a cache in the compute dtype; else SDPA per block)")
        return {"decode": {"layers": graphed_layers, "attention": decode},
                "verify": {"layers": graphed_layers, "attention": verify},
                "prompt": {"layers": layers if fused and self.int8_prompt else self.linear, "attention": prompt},
                "lm_head": {"kernel": self.lm_head}}

    def report(self) -> dict:
        """For /health: each of our kernels, true or why not; and per cache dtype, each step kind's kernels."""
        used = {Q8_DOT: self.q8_dot, INT8_DECODE: self.int8_decode, FUSED: self.fused_decode,
                INT8_PROMPT: self.int8_prompt, BF16_PROMPT: self.bf16_prompt, ONEDNN: self.onednn_pack,
                INT4_CUDA: self.int4_cuda, GRAPHS: self.cuda_graphs, COMPILE: self.torch_compile,
                TRITON_ATTN: self.triton_attention, TRITON_HEAD: self.triton_head, TRITON_LINEAR: self.triton_linear,
                FUSED_STEP: self.fused_step_ops, TRITON_PREFILL: self.triton_prefill}
        why = dict(self.why_not)
        out: dict = {"device": self.device, "kv_cache": self.kv_cache, "weights": self.weights,
                     "exact_decode_width": self.decode_width, "rows_independent": self.rows_independent}
        if self.int4_layers:
            out["int4_layers"] = dict(self.int4_layers)
        for name, on in used.items():
            out[name] = True if on else why.get(name, "not applicable to this engine or device")
        out["steps"] = {"int8": self.steps(True), "float": self.steps(False)}
        return out


def plan_kernels(features: CpuFeatures, arch: Arch, kv_cache: str, device: str | torch.device,
                 switches: KernelSwitches, weights: str = "fp32", dtype: torch.dtype = torch.float32) -> KernelPlan:
    """The kernels for a model of `arch` with `weights` (their format) computing in `dtype` on `device`,
    whose engine caches K/V as `kv_cache` ("int8", "fp32", ...). What holds only for one kind of cache
    (the INT8 ops, the bf16 GEMMs) is decided here and applied per step by the cache's dtype."""
    kind = torch.device(device).type
    cpu = (features.cpu and kind == "cpu", f"not a CPU ({kind})")
    quantized = weights in QUANTIZED
    head = (arch.head_dim in HEAD_DIMS, f"head size {arch.head_dim} (the ops are compiled for {HEAD_DIMS})")
    why: dict[str, Optional[str]] = {}
    why[Q8_DOT] = _first(cpu, (quantized, f"no quantized layers ({weights} weights)"),
                         (not switches.off("q8_dot"), switches.off("q8_dot") or ""),
                         (features.op(Q8_DOT) is None, features.op(Q8_DOT) or ""))
    why[ONEDNN] = _first(cpu, (dtype == torch.float32, f"compute dtype {dtype} (packing is float32)"),
                         (not switches.off("pack"), switches.off("pack") or ""),
                         (features.onednn, "torch has no oneDNN linear kernels here"))
    why[BF16_PROMPT] = _first(cpu, (not switches.off("bf16_attention"), switches.off("bf16_attention") or ""),
                              (features.bf16_dot, "no bf16 dot products on this CPU (AVX512-BF16 or AMX)"))
    why[INT8_DECODE] = _first(cpu, (not switches.off("int8_attention"), switches.off("int8_attention") or ""),
                              (features.op(INT8_DECODE) is None, features.op(INT8_DECODE) or ""), head)
    why[INT8_PROMPT] = _first((why[BF16_PROMPT] is None, f"no bf16 prompt attention ({why[BF16_PROMPT]})"),
                              (not switches.off("prefill_attention"), switches.off("prefill_attention") or ""),
                              (features.op(INT8_PROMPT) is None, features.op(INT8_PROMPT) or ""), head)
    cuda = (kind == "cuda", f"not a CUDA device ({kind})")
    why[INT4_CUDA] = _first(cuda, (weights in ("q4_1", "int4_wo"), f"no int4 layers ({weights} weights)"),
                            (not switches.off("int4_cuda"), switches.off("int4_cuda") or ""))
    why[GRAPHS] = _first(cuda, (not switches.off("cuda_graphs"), switches.off("cuda_graphs") or ""))
    why[COMPILE] = _first((why[GRAPHS] is None, f"no CUDA graphs ({why[GRAPHS]})"),
                          (not switches.off("torch_compile"), switches.off("torch_compile") or ""))
    # (asked only on CUDA: importing triton costs a CPU daemon memory it never uses)
    triton_why = triton_available() if kind == "cuda" else f"not a CUDA device ({kind})"
    triton = (triton_why is None, triton_why or "")
    why[TRITON_ATTN] = _first((why[GRAPHS] is None, f"no fixed-shape decode steps ({why[GRAPHS]})"), triton,
                              (not switches.off("triton_attention"), switches.off("triton_attention") or ""))
    why[FUSED_STEP] = _first((why[GRAPHS] is None, f"no fixed-shape decode steps ({why[GRAPHS]})"), triton,
                             (not switches.off("fused_step"), switches.off("fused_step") or ""))
    why[TRITON_PREFILL] = _first(cuda, triton,
                                 (not switches.off("triton_prefill"), switches.off("triton_prefill") or ""))
    why[TRITON_HEAD] = _first(cuda, (weights == "q4_1", f"no Q8_0 head to read ({weights} weights)"), triton,
                              (not switches.off("triton_head"), switches.off("triton_head") or ""))
    why[TRITON_LINEAR] = _first((why[INT4_CUDA] is None, f"no CUDA int4 layers ({why[INT4_CUDA]})"), triton,
                                (switches.int4_kernel != "int4pack", f"{INT4_KERNEL_VARIABLE}=int4pack"))
    why[FUSED] = _first(cpu, (not switches.off("fused_decode"), switches.off("fused_decode") or ""),
                        (why[Q8_DOT] is None, f"the layers are not on q8_dot ({why[Q8_DOT]})"),
                        (why[INT8_DECODE] is None, f"no INT8 decode op ({why[INT8_DECODE]})"),
                        (dtype == torch.float32, f"compute dtype {dtype} (the op is float32)"),
                        (features.op(FUSED) is None, features.op(FUSED) or ""))
    return KernelPlan(device=str(device), kv_cache=kv_cache, weights=weights, q8_dot=why[Q8_DOT] is None,
                      onednn_pack=why[ONEDNN] is None, torch_int8=features.torch_int8 and cpu[0],
                      bf16_prompt=why[BF16_PROMPT] is None, int8_decode=why[INT8_DECODE] is None,
                      int8_prompt=why[INT8_PROMPT] is None, fused_decode=why[FUSED] is None,
                      int4_cuda=why[INT4_CUDA] is None, cuda_graphs=why[GRAPHS] is None,
                      torch_compile=why[COMPILE] is None, triton_attention=why[TRITON_ATTN] is None,
                      triton_head=why[TRITON_HEAD] is None, triton_linear=why[TRITON_LINEAR] is None,
                      int4_kernel=switches.int4_kernel, fused_step_ops=why[FUSED_STEP] is None,
                      triton_prefill=why[TRITON_PREFILL] is None,
                      # (the CUDA path's kernels say why not only on a CUDA device: elsewhere "not applicable")
                      why_not=tuple((k, v) for k, v in why.items()
                                    if v is not None and (kind == "cuda" or k not in CUDA_KERNELS)))


def compute_dtype(device: str | torch.device, weights: str, built: torch.dtype) -> torch.dtype:
    """What a model computes in: the manifest's dtype, except a quantized model on CUDA, which computes
    in bf16 (the int4 kernel's activations; float32 there would read and move twice the bytes). The
    float32 reference (weights="fp32") stays float32 everywhere."""
    if torch.device(device).type == "cuda" and weights in QUANTIZED and built == torch.float32:
        return torch.bfloat16
    return built


TORCH_ONLY = KernelPlan()  # torch's ops everywhere: a model not loaded by load_llama (built by hand in a test)
