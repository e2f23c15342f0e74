"""The memory plan: how a profile's engines fit next to the policy model in unified memory.

On a Jetson the CPU and the GPU share one pool, so "free GPU memory" also counts what the policy
model, the OS and ROS 2 will need later. The plan therefore never takes a fraction of free memory:
it starts from the device's usable memory and subtracts, item by item,

    OS and services  -  CUDA contexts  -  policy model  -  target and draft weights  -  workspace

and what is left is the KV-cache budget, split so that target and draft hold the same number of
tokens (the draft has to cache every sequence the target does). See docs/ARCHITECTURE.md, "Memory".

Everything the plan reads is config.json / GGUF metadata (arch.py, through build/source.py
load_arch) and ONNX protobufs (policy/onnx_size.py): no torch, no weights, so an Orin build can be
planned on a laptop.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

from pydantic import BaseModel, ConfigDict

from .. import weight_sizes as sizes
from ..arch import Arch
from ..backends.edgellm.rules import PAGE_TOKENS, edgellm_deployment, kv_capacity
from ..backends.trtllm.rules import Deployment, EngineSetup, format_deployment, trtllm_deployment
from ..errors import OrinError
from ..policy.onnx_size import onnx_initializer_bytes
from ..profile import ModelSpec, Profile
from ..weight_sizes import DTYPE_BYTES
from .source import load_arch, profile_path, resolve_config

GIB = 1024**3

# Bytes per KV element. INT8 KV keeps static scales per layer (and per head at most): a few
# hundred bytes for the whole model, nothing per token, so they are left out of the per-token size.
KV_BYTES = {"int8": 1, "fp16": 2, "bf16": 2, "fp32": 4}


# Activation workspace, when the profile does not state one (device.workspace_gib = 0): per token
# in flight (limits.max_num_tokens tokens in one engine step) the widest point of a Llama layer
# holds the residual and the normed input (2 h), q/k/v (~1.7 h for Llama 3.2 3B), the gate and up
# outputs (2 × 2.67 h) and the SiLU product (2.67 h): about 12.7 h elements. Rounded up to 16 h to
# cover TensorRT's tactic scratch, the logits of the last positions and allocator slack, at the
# compute dtype's width (16 × 2 B = 32 B per hidden unit per token in fp16).
# Llama 3.2 3B: 4096 tokens × 3072 × 32 B = 0.375 GiB; the 1B draft: 0.25 GiB.
ACTIVATION_ELEMENTS_PER_HIDDEN = 16

# A home as the planner sees it: system prompt, the home's rooms, places, objects and devices, and the
# few-shot examples. The plan reports how many homes of this size stay warm in the KV pool, never of more
# than limits.max_input_len tokens: a longer home is a prompt the engine refuses (PromptTooLong; 0.12's
# executor: "Prompt length exceeds maximum input length"), so the plan counts homes of max_input_len then
# and says so.
HOME_TOKENS = 6144

# Loading. What an engine holds for a moment while it loads, on top of what it keeps:
# - torch (a q4_1 target): the tensors as read from the files (runtime/weights.py _read copies them out of
#   the memory map) live next to what they become while the layers are packed, the float32 embedding
#   among them until the int8 head replaces the tied float32 head, and the int8 head's requantization and
#   error check (runtime/head.py _requantize) runs over HEAD_CHECK_ROWS rows at a time with these float64
#   temporaries of rows × hidden alive at once (the rows, their kept values, the difference);
#   runtime/head.py LOAD_ROWS is the same number (tests/build/test_memory.py checks). Counted: the
#   weights once more, the float32 embedding, the check's temporaries; checked against a load of a
#   Llama-3.2-3B-shaped engine (orin_llm/bench/shaped.py), which peaked below this count (lab notes).
# - trtllm: 0.12's executor reads the whole engine file into a host buffer before TensorRT deserializes
#   it (utils::loadEngine, cpp/tensorrt_llm/runtime/utils/sessionUtils.cpp of the 0.11/0.12 series: a
#   std::vector<uint8_t> of the file's size), and on the Orin host and device share one memory: loading
#   an engine holds its file twice for a moment. An engine file is its weights (plus kernels and
#   metadata, which the weights' figure leaves out), so the plan counts the largest model's weights
#   until the engines exist; after `orin-llm build` (and in `orin-llm memory --engine`) the plan takes
#   the engine files' real sizes (`engine_file_sizes`) for both that and each model's resident weights:
#   TensorRT deserializes an engine's weights into device memory, which on the Orin is the same memory.
HEAD_CHECK_ROWS = 4096
HEAD_CHECK_TEMPORARIES = 3


# ------------------------------------------------------------------------------------ weights


def weights_bytes(a: Arch, spec: ModelSpec, backend: str, packed_head: bool = False) -> int:
    """Weight bytes at the quantized size the engine holds in memory.

    - fp32: 4 B/param; fp16, bf16: 2 B/param (every tensor at that width).
    - int8_wo (W8A16): linear weights 1 B/param + one fp16 scale per output channel; embeddings,
      lm_head and norms stay at the compute dtype.
    - q4_1 (torch only): a GGUF's Q4_1 blocks on torch's packed int4 kernel, 0.5 B/param + a bf16
      scale and zero per 32 weights; the lm_head float32, the embedding its GGUF's Q8_0 blocks.
    - int4_wo / int4_awq (W4A16): linear weights 0.5 B/param (two nibbles per byte) + one fp16
      scale per `int4_group_size` input channels per output channel; AWQ also stores a fp16
      pre_quant_scale per input channel of every linear. TensorRT-LLM's plain int4 weight-only is
      per channel, so counting per group over-states it by < 3% of the linears: safe side.
      ModelOpt/TensorRT-LLM AWQ leaves lm_head unquantized (embeddings too), at the compute dtype.
    - The lm_head: a TensorRT-LLM checkpoint stores lm_head as its own tensor even when the HF
      model ties it to the embeddings (Llama 3.2), so it is counted for backend "trtllm"; the torch
      backend shares the embedding matrix, so a tied lm_head is free there, except where it packs
      its float32 linears for oneDNN on a CPU (`packed_head`; kernels/packed.py): the packed lm_head
      is a copy.
    """
    return sizes.weights_bytes(a, spec.weights, spec.dtype, spec.int4_group_size, backend, packed_head)


def activation_bytes(a: Arch, spec: ModelSpec, max_num_tokens: int) -> int:
    return max_num_tokens * a.hidden_size * ACTIVATION_ELEMENTS_PER_HIDDEN * DTYPE_BYTES[spec.dtype]


# ------------------------------------------------------------------------------------- policy


def policy_bytes(profile: Profile, profile_dir: Path | None) -> tuple[int, str]:
    policy = profile.policy
    if policy.measured is not None:  # what the policy runner saw the policy process take: no guess
        from ..policy.measure import read_measurement

        path = profile_path(policy.measured, profile_dir)
        m = read_measurement(path)
        return m.total_bytes, f"measured {path}: {m.describe()}"
    if policy.onnx is not None:
        path = profile_path(policy.onnx, profile_dir)
        init = onnx_initializer_bytes(path)
        return (math.ceil(init * policy.activation_factor),
                f"onnx {path}: {init:,} B of initializers × activation_factor {policy.activation_factor:g}")
    gib = policy.reserve_gib or 0.0
    return round(gib * GIB), f"reserve_gib = {gib:g}"


# --------------------------------------------------------------------------------------- plan


class ModelPlan(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str
    config: str  # the config.json / .gguf the shape came from
    weights: str
    kv_cache: str
    weights_bytes: int
    kv_bytes_per_token: int
    max_kv_tokens: int
    kv_bytes: int
    activation_bytes: int  # derived activation estimate (used when device.workspace_gib = 0)
    weights_source: str = "estimated from the shapes at the quantized size"  # or "measured: ..." (engine files)


class MemoryPlan(BaseModel):
    model_config = ConfigDict(extra="forbid")

    profile: str
    backend: str
    device_bytes: int
    reserved_bytes: int
    num_engines: int
    cuda_context_bytes: int
    policy_bytes: int
    policy_source: str
    target: ModelPlan
    draft: Optional[ModelPlan] = None
    workspace_bytes: int
    workspace_source: str
    fixed_bytes: int  # everything but the KV cache
    budget_bytes: int  # what is left for KV after everything else and the load's moment (negative: over by that much)
    running_kv_tokens: int  # max_batch_size × max_seq_len: the requests in flight
    cached_prefix_tokens: int  # the profile's cached_prefix_tokens: prefixes kept warm between requests
    useful_kv_tokens: int  # running + cached: more KV than this is never asked for
    max_kv_tokens: int  # tokens each engine caches (same for target and draft)
    home_tokens: int  # HOME_TOKENS, at most limits.max_input_len (a home must be a prompt the engine takes)
    warm_homes: int  # homes of home_tokens the KV pool keeps warm next to the running requests
    kv_bytes: int
    total_bytes: int  # everything the plan allocates, KV included
    load_extra_bytes: int  # held for a moment while the engines load (HEAD_CHECK_ROWS comment): kept out of KV
    load_source: str  # how load_extra_bytes was figured
    load_peak_bytes: int  # total + load_extra: the most the plan's allocations reach (while loading)
    headroom_bytes: int  # device - total
    feasible: bool
    problems: list[str]
    notes: list[str]
    deployment: dict  # what the engines get: KV dtype, prefix reuse, chunked context, speculation modes
    measured: list[str] = []  # the figures read from files the build or the policy runner wrote
    estimated: list[str] = []  # the figures computed from shapes and settings (or stated in the profile)

    def as_dict(self) -> dict:
        return self.model_dump(mode="json")


def _gib(n: float) -> str:
    return f"{n / GIB:.2f} GiB"


def packs_on_cpu(profile: Profile, spec: ModelSpec) -> bool:
    """Whether the torch runtime packs this model's float32 linears (and so copies a tied lm_head)."""
    return profile.backend == "torch" and profile.device.name == "cpu" and spec.dtype == "float32"


def _model_plan(profile: Profile, spec: ModelSpec, profile_dir: Path | None, section: str):
    a = load_arch(spec, profile_dir, section=section)
    config = resolve_config(spec, profile_dir, section=section)
    return a, ModelPlan(
        model=spec.model, config=str(config), weights=spec.weights, kv_cache=spec.kv_cache,
        weights_bytes=weights_bytes(a, spec, profile.backend, packed_head=packs_on_cpu(profile, spec)),
        kv_bytes_per_token=a.kv_bytes_per_token(KV_BYTES[spec.kv_cache]),
        max_kv_tokens=0, kv_bytes=0,
        activation_bytes=activation_bytes(a, spec, profile.limits.max_num_tokens),
    )


def torch_deployment(profile: Profile) -> Deployment:
    """The torch runtime reuses cached prefixes (its paged KV pool) whatever the KV dtype, prefills a
    prompt in chunks next to running decodes, and speculates with any drafter it has
    (runtime/engine.py speculation_modes)."""
    models = [(r, s) for r, s in (("draft", profile.draft), ("target", profile.target)) if s is not None]
    engines = tuple(EngineSetup(role=r, kv_cache=s.kv_cache, paged_context_fmha=False, draft_tokens_external=False,
                                block_reuse=True, chunked_context=True) for r, s in models)
    speculation = ("none", "lookup") + (("draft_model", "combined") if profile.draft else ())
    why = [("draft_model, combined", "no [draft] in the profile")] if profile.draft is None else []
    return Deployment(backend=profile.backend, engines=engines, kv_cache=profile.target.kv_cache, prefix_reuse=True,
                      chunked_context=True, speculation=speculation, why_not=tuple(why))


ENGINE_SUFFIX = ".engine"  # Engine.save writes rank{rank}.engine per rank (R≡J tensorrt_llm/builder.py L662-667)


def engine_file_sizes(engine_dir: Path) -> dict[str, int]:
    """The bytes of each model's TensorRT engine files in a trtllm engine directory (role -> bytes, every
    rank's rank<N>.engine summed), for roles that have any; {} for a torch engine or one not built yet."""
    sizes = {}
    for role in ("target", "draft"):
        files = sorted((engine_dir / role).glob(f"rank*{ENGINE_SUFFIX}")) if (engine_dir / role).is_dir() else []
        if files:
            sizes[role] = sum(f.stat().st_size for f in files)
    return sizes


def load_extra_bytes(profile: Profile, models: list[tuple[Arch, ModelPlan]],
                     file_sizes: Optional[dict[str, int]] = None) -> tuple[int, str]:
    """What loading holds for a moment on top of what the engines keep (the HEAD_CHECK_ROWS comment), and
    how it was figured. models: (arch, plan) of the target (first) and the draft. file_sizes: a trtllm
    build's engine files (role -> bytes), else estimated from the weights."""
    if profile.backend in ("trtllm", "edgellm"):  # Edge-LLM: TensorRT deserializes its engine file the same way
        if file_sizes:
            role, size = max(file_sizes.items(), key=lambda kv_: kv_[1])
            return size, f"measured: the {role} engine file ({size:,} B), read whole before it is deserialized"
        biggest = max((m for _, m in models), key=lambda m: m.weights_bytes)
        return biggest.weights_bytes, ("an engine file read whole before it is deserialized: about the largest "
                                       f"model's weights ({biggest.model})")
    checked = [(a, m) for a, m in models if m.weights == "q4_1"]  # the int8 head's load check (runtime/head.py)
    if not checked:
        return 0, f"no load-time temporaries known for {models[0][1].weights} weights"
    a, m = max(checked, key=lambda am: am[0].hidden_size)
    rows = min(HEAD_CHECK_ROWS, a.vocab_size)
    check = HEAD_CHECK_TEMPORARIES * rows * a.hidden_size * 8
    embedding = a.vocab_size * a.hidden_size * 4
    return sum(p.weights_bytes for _, p in checked) + embedding + check, (
        f"the weights as read while they are packed, the float32 embedding and the int8 head's check "
        f"({HEAD_CHECK_TEMPORARIES} float64 temporaries of {rows:,} rows × {a.hidden_size:,}; {m.model})")


def deployment(profile: Profile) -> Deployment:
    if profile.backend == "edgellm":
        return edgellm_deployment(profile)
    return trtllm_deployment(profile) if profile.backend == "trtllm" else torch_deployment(profile)


def plan_memory(profile: Profile, profile_dir: Path | None = None,
                engine_files: Optional[dict[str, int]] = None) -> MemoryPlan:
    """The memory plan of a profile; an infeasible plan is returned (feasible=False), not raised.

    engine_files: a trtllm build's engine file sizes (`engine_file_sizes`): measured figures for each
    model's weights and for what loading holds, in place of the estimates from the shapes.
    Raises OrinError only when an input cannot be read (missing config.json, unreadable ONNX).
    """
    engine_files = engine_files if profile.backend == "trtllm" else None
    dev, lim = profile.device, profile.limits
    target_arch, target = _model_plan(profile, profile.target, profile_dir, "target")
    shaped = [(target_arch, target)]
    draft = None
    if profile.draft:
        draft_arch, draft = _model_plan(profile, profile.draft, profile_dir, "draft")
        shaped.append((draft_arch, draft))
    models = [m for m in (target, draft) if m is not None]
    for role, m in (("target", target), ("draft", draft)):
        if m is not None and engine_files and role in engine_files:
            m.weights_bytes = engine_files[role]
            m.weights_source = f"measured: {role}/rank*{ENGINE_SUFFIX} ({engine_files[role]:,} B)"

    device = round(dev.memory_gib * GIB)
    reserved = round(dev.reserved_gib * GIB)
    engines = len(models)
    cuda = round(dev.cuda_context_gib * GIB) * engines
    policy, policy_source = policy_bytes(profile, profile_dir)
    notes: list[str] = []
    if profile.policy.measured is not None and profile.device.name != "cpu" and "on cpu:" in policy_source:
        notes.append(f"the policy was measured on a CPU (onnxruntime) but this plan is for {dev.name}: "
                     "measure it there with TensorRT (python -m orin_llm.policy.runner) before trusting the plan")
    if dev.workspace_gib > 0:
        workspace = round(dev.workspace_gib * GIB)
        workspace_source = f"device.workspace_gib = {dev.workspace_gib:g}"
    else:
        workspace = sum(m.activation_bytes for m in models)
        workspace_source = (f"derived: max_num_tokens {lim.max_num_tokens} × hidden × "
                            f"{ACTIVATION_ELEMENTS_PER_HIDDEN} elements, per engine")

    items = {"reserved (OS, services)": reserved, "CUDA contexts": cuda, "policy": policy,
             "target weights": target.weights_bytes, "workspace": workspace}
    if draft is not None:
        items["draft weights"] = draft.weights_bytes
    fixed = sum(items.values())
    # The KV cache never takes the room the engines' loading needs for a moment (load_extra_bytes): on a
    # device the policy shares, that moment would push the policy out.
    load_extra, load_source = load_extra_bytes(profile, shaped, engine_files)
    budget = device - fixed - load_extra

    bpt = sum(m.kv_bytes_per_token for m in models)
    running = lim.max_batch_size * lim.max_seq_len
    cached = profile.cached_prefix_tokens
    useful = running + cached
    tokens = min(budget // bpt, useful) if budget > 0 else 0
    if profile.backend == "edgellm" and tokens:  # its pool: FP16 pages of PAGE_TOKENS, capacity per batch slot
        tokens = _edgellm_pool(profile, tokens, budget // bpt, notes)
    for m in models:
        m.max_kv_tokens = tokens
        m.kv_bytes = tokens * m.kv_bytes_per_token
    kv = tokens * bpt
    total = fixed + kv

    problems: list[str] = []
    if budget < 0:
        biggest = sorted(items.items(), key=lambda kv_: -kv_[1])[:3]
        loading = f" and loading holds {_gib(load_extra)} more for a moment ({load_source})" if load_extra else ""
        problems.append(
            f"the fixed allocations need {_gib(fixed)}{loading} but the device has {_gib(device)}: "
            f"over by {_gib(-budget)} before any KV cache (biggest: "
            + ", ".join(f"{k} {_gib(v)}" for k, v in biggest)
            + "); lower policy.reserve_gib or device.reserved_gib, or quantize the weights further")
    elif tokens < lim.max_seq_len:
        problems.append(
            f"the KV budget {_gib(budget)} holds {tokens} tokens per engine "
            f"({bpt:,} B/token for target+draft) but one full sequence needs "
            f"max_seq_len = {lim.max_seq_len}; free {_gib((lim.max_seq_len - tokens) * bpt)} "
            f"or lower limits.max_seq_len, or use kv_cache = \"int8\"")
    elif tokens < useful and cached:
        problems.append(
            f"the KV budget {_gib(budget)} holds {tokens:,} tokens per engine ({bpt:,} B/token for "
            f"target+draft) but max_batch_size × max_seq_len = {running:,} running tokens plus "
            f"cached_prefix_tokens = {cached:,} need {useful:,}; lower cached_prefix_tokens to "
            f"{max(0, tokens - running):,} or free {_gib((useful - tokens) * bpt)}")
    elif tokens < useful:
        notes.append(f"KV holds {tokens} tokens, fewer than max_batch_size × max_seq_len = {useful}: "
                     f"{tokens // lim.max_seq_len} full-length sequences at once")
    home = min(HOME_TOKENS, lim.max_input_len)
    warm = max(0, tokens - running) // home
    dep = deployment(profile)
    if home < HOME_TOKENS and cached:
        notes.append(f"homes are planned at max_input_len = {lim.max_input_len:,} tokens, not {HOME_TOKENS:,}: a "
                     f"longer home is a prompt the engine refuses; raise limits.max_input_len (and max_seq_len) "
                     f"to at least {HOME_TOKENS:,} plus the task to serve {HOME_TOKENS:,}-token homes")
    if budget > 0 and dep.prefix_reuse:  # the KV pool keeps every stored block (both runtimes)
        spare = max(0, budget // bpt - running)
        notes.append(f"the KV budget could keep {spare // home} homes of {home:,} tokens warm "
                     f"(cached_prefix_tokens = {spare // home * home:,}); this profile keeps {warm}")
    figures = {f"{role} weights": m.weights_source for role, m in (("target", target), ("draft", draft)) if m}
    figures.update({"loading": load_source, "policy": policy_source, "workspace": workspace_source})
    measured = [k for k, v in figures.items() if v.startswith("measured")]
    return MemoryPlan(
        measured=measured, estimated=[k for k in figures if k not in measured],
        profile=profile.name, backend=profile.backend, device_bytes=device, reserved_bytes=reserved,
        num_engines=engines, cuda_context_bytes=cuda, policy_bytes=policy, policy_source=policy_source,
        target=target, draft=draft, workspace_bytes=workspace, workspace_source=workspace_source,
        fixed_bytes=fixed, budget_bytes=budget, running_kv_tokens=running, cached_prefix_tokens=cached,
        useful_kv_tokens=useful, max_kv_tokens=tokens, home_tokens=home, warm_homes=warm,
        kv_bytes=kv, total_bytes=total, load_extra_bytes=load_extra, load_source=load_source,
        load_peak_bytes=total + load_extra, headroom_bytes=device - total,
        feasible=not problems, problems=problems, notes=notes, deployment=dep.as_dict(),
    )


def _edgellm_pool(profile: Profile, wanted: int, fits: int, notes: list[str]) -> int:
    """Edge-LLM's KV pool for `wanted` tokens: its builder takes a capacity (--maxKVCacheCapacity, whole pages
    of PAGE_TOKENS) that the plan counts once per batch slot (backends/edgellm/rules.py kv_capacity: the
    docs do not say whether it is per slot or for the pool, so the plan takes the larger reading). The
    context cache keeps homes in the same pages as the running requests."""
    slots = profile.limits.max_batch_size
    capacity = kv_capacity(profile, wanted)
    while capacity * slots > fits and capacity > PAGE_TOKENS:
        capacity -= PAGE_TOKENS
    notes.append(f"Edge-LLM KV pool: FP16 pages of {PAGE_TOKENS} tokens, --maxKVCacheCapacity {capacity:,} counted "
                 f"for each of {slots} batch slot(s) = {capacity * slots:,} tokens; the context cache keeps homes in "
                 "these pages, evicted least-recently-used (nothing pinned)")
    return min(capacity * slots, fits)


def check_feasible(plan: MemoryPlan) -> MemoryPlan:
    """Raise OrinError (one line, with the numbers) when the plan does not fit; else return it."""
    if not plan.feasible:
        raise OrinError(f"memory plan for {plan.profile!r} does not fit: " + "; ".join(plan.problems))
    return plan


def format_plan(plan: MemoryPlan) -> str:
    """A table for the CLI: GiB with 2 decimals, tokens as integers."""
    w = 44
    ctx_each = plan.cuda_context_bytes / plan.num_engines if plan.num_engines else 0

    def row(label: str, n: int, extra: str = "") -> str:
        return f"  {label:<{w}}{n / GIB:>9.2f} GiB" + (f"   {extra}" if extra else "")

    lines = [f"memory plan: {plan.profile} (backend {plan.backend})",
             row("device", plan.device_bytes),
             row("- reserved (OS, services)", plan.reserved_bytes),
             row(f"- CUDA contexts ({plan.num_engines} × {ctx_each / GIB:.2f} GiB)", plan.cuda_context_bytes),
             row("- policy", plan.policy_bytes, plan.policy_source)]
    models = [("target", plan.target)] + ([("draft", plan.draft)] if plan.draft else [])
    for name, m in models:
        source = m.config if m.weights_source.startswith("estimated") else m.weights_source
        lines.append(row(f"- {name} weights ({m.weights})", m.weights_bytes, source))
    lines += [row("- workspace", plan.workspace_bytes, plan.workspace_source),
              row("- kept free for loading", plan.load_extra_bytes, plan.load_source),
              row("= KV budget", plan.budget_bytes)]
    for name, m in models:
        lines.append(row(f"  {name} KV ({m.kv_cache}, {m.kv_bytes_per_token:,} B/token)", m.kv_bytes,
                         f"{m.max_kv_tokens:,} tokens"))
    cached = f" + cached_prefix_tokens {plan.cached_prefix_tokens:,}" if plan.cached_prefix_tokens else ""
    lines.append(f"  {'KV tokens per engine (useful max)':<{w}}{plan.max_kv_tokens:>9,}"
                 f"     of {plan.useful_kv_tokens:,} = max_batch_size × max_seq_len {plan.running_kv_tokens:,}{cached}")
    lines.append(f"  {f'homes of {plan.home_tokens:,} tokens kept warm':<{w}}{plan.warm_homes:>9,}"
                 "     next to the running requests and the policy")
    lines += [row("total allocated", plan.total_bytes),
              row("headroom", plan.headroom_bytes)]
    lines.append("  measured: " + (", ".join(plan.measured) or "nothing yet (orin-llm memory --engine DIR reads a "
                                                          "built engine's files)"))
    lines.append("  estimated: " + (", ".join(plan.estimated) or "nothing"))
    lines.append("  status: " + ("fits" if plan.feasible else "DOES NOT FIT"))
    lines += [f"  problem: {p}" for p in plan.problems]
    lines += [f"  note: {n}" for n in plan.notes]
    lines += format_deployment(plan.deployment)
    return "\n".join(lines)
