"""The kernel plan (runtime/kernel_plan.py): which kernel runs each step kind and cache dtype, decided
once from the switches, the CPU's features and the engine, with a reason for every kernel not used;
and the model's steps following it. Most cases need no build: the features are written out."""

from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch

from orin_llm.arch import Arch
from orin_llm.kernels.attention import MIN_KEYS
from orin_llm.runtime.kernel_plan import (
    CUDA_KERNELS,
    FUSED,
    INT8_DECODE,
    INT8_PROMPT,
    PROBE_ROWS,
    Q8_DOT,
    SWITCH_VARIABLES,
    CpuFeatures,
    KernelSwitches,
    plan_kernels,
)
from orin_llm.runtime.llama import Llama
from tests.conftest import tiny_fixture

tiny_engine = tiny_fixture("engine")  # random weights do here (tests/conftest.py)
tiny_engine_dir = tiny_fixture("engine_dir")

OPS = (Q8_DOT, INT8_DECODE, INT8_PROMPT, FUSED)
FULL = CpuFeatures(cpu=True, bf16_dot=True, onednn=True, torch_int8=True, ops=tuple((op, None) for op in OPS))
BARE = CpuFeatures(cpu=True)  # a CPU where nothing of ours built, without bf16 dot products or oneDNN


def _arch(head_dim: int = 64) -> Arch:
    return Arch(num_layers=2, hidden_size=128, intermediate_size=256, num_heads=2, num_kv_heads=1,
                head_dim=head_dim, vocab_size=64, tie_word_embeddings=True, max_position_embeddings=2048,
                rms_norm_eps=1e-5, rope_theta=10000.0)


CUDA_SWITCHES = ("int4_cuda", "cuda_graphs", "triton_attention", "triton_head", "fused_step", "triton_prefill")


def _plan(features=FULL, switches=KernelSwitches(), weights="q4_1", device="cpu", head_dim=64, dtype=torch.float32):
    return plan_kernels(features, _arch(head_dim), "int8", device, switches, weights, dtype)


def test_the_switches_are_the_environment_variables_docs_name():
    env = {var: "1" for var in SWITCH_VARIABLES.values()}
    assert KernelSwitches.from_environment(env) == KernelSwitches() == KernelSwitches.from_environment({})
    for name, var in SWITCH_VARIABLES.items():
        off = KernelSwitches.from_environment({**env, var: "0"})
        assert not getattr(off, name) and off.off(name) == f"turned off ({var}=0)"
        assert all(getattr(off, other) for other in SWITCH_VARIABLES if other != name)


def test_a_cpu_with_everything_runs_every_kernel_and_the_report_says_where():
    plan = _plan()
    assert plan.q8_dot and plan.int8_decode and plan.int8_prompt and plan.bf16_prompt and plan.fused_decode
    assert plan.onednn_pack and plan.why_not == ()
    report = plan.report()
    assert all(report[op] is True for op in OPS)
    int8, fp = report["steps"]["int8"], report["steps"]["float"]
    assert int8["decode"]["attention"] == "INT8 decode op" and int8["decode"]["layers"].startswith("fused decode_layer")
    assert int8["prompt"]["attention"].startswith("INT8 prompt op")
    # a float cache runs none of the INT8 ops: SDPA, torch's ops around q8_dot's linears
    assert fp["decode"]["attention"] == "SDPA" and fp["prompt"]["attention"] == "SDPA per block"
    assert fp["decode"]["layers"].startswith("q8_dot")


def test_a_cpu_without_the_features_runs_torchs_kernels_and_says_why():
    plan = _plan(BARE)
    assert not (plan.q8_dot or plan.int8_decode or plan.int8_prompt or plan.bf16_prompt or plan.fused_decode)
    assert not plan.onednn_pack
    why = dict(plan.why_not)
    assert why[Q8_DOT] == why[INT8_DECODE] == "not built for this engine"
    assert "no bf16 dot products" in why["bf16_prompt_attention"] and "no bf16 prompt attention" in why[INT8_PROMPT]
    assert "not on q8_dot" in why[FUSED]
    assert "oneDNN" in why["onednn_packing"]
    # a build that failed says how (the reason the native module kept)
    failed = replace(FULL, ops=((Q8_DOT, "CalledProcessError: ninja failed"), *FULL.ops[1:]))
    assert dict(_plan(failed).why_not)[Q8_DOT] == "CalledProcessError: ninja failed"
    # bf16 dot products without the prompt op: the bf16 GEMMs run the long prompt blocks
    plan = _plan(replace(FULL, ops=((INT8_PROMPT, "this CPU has no AVX-512 VNNI and BF16"),) + FULL.ops[:1]))
    assert plan.bf16_prompt and not plan.int8_prompt
    assert plan.report()["steps"]["int8"]["prompt"]["attention"].startswith("bf16 GEMMs")


@pytest.mark.parametrize("name", [n for n in SWITCH_VARIABLES if n not in CUDA_SWITCHES])  # (CUDA's: test_cuda_plan.py)
def test_a_switch_turns_its_kernel_off_and_the_kernels_that_need_it(name):
    plan = _plan(switches=replace(KernelSwitches(), **{name: False}))
    why = dict(plan.why_not)
    off = f"turned off ({SWITCH_VARIABLES[name]}=0)"
    kernel = {"q8_dot": Q8_DOT, "int8_attention": INT8_DECODE, "prefill_attention": INT8_PROMPT,
              "fused_decode": FUSED, "bf16_attention": "bf16_prompt_attention", "pack": "onednn_packing"}[name]
    assert why[kernel] == off
    needs = {"q8_dot": [FUSED], "int8_attention": [FUSED], "bf16_attention": [INT8_PROMPT]}.get(name, [])
    assert set(why) == {kernel, *needs}, why
    for other in needs:
        assert off in why[other]


def test_fp_weights_an_fp16_model_and_unknown_head_sizes():
    fp = _plan(weights="fp32")
    assert not fp.q8_dot and not fp.fused_decode and fp.int8_decode and fp.onednn_pack
    assert dict(fp.why_not)[Q8_DOT] == "no quantized layers (fp32 weights)"
    assert fp.linear == "oneDNN packed float32"
    half = _plan(dtype=torch.float16)
    assert not half.onednn_pack and not half.fused_decode and half.q8_dot
    odd = _plan(head_dim=96)  # (the ops are compiled for 64 and 128)
    assert not odd.int8_decode and not odd.int8_prompt and not odd.fused_decode
    assert "head size 96" in dict(odd.why_not)[INT8_DECODE] and "head size 96" in dict(odd.why_not)[INT8_PROMPT]
    assert odd.bf16_prompt  # the bf16 GEMMs take any head size


def test_a_cuda_device_runs_none_of_the_cpu_kernels():
    plan = _plan(CpuFeatures(cpu=False), device="cuda")
    assert not (plan.q8_dot or plan.onednn_pack or plan.bf16_prompt or plan.int8_decode or plan.fused_decode)
    # (the CUDA path's own kernels: tests/runtime/test_cuda_plan.py)
    assert plan.why_not and all("not a CPU (cuda)" in why for k, why in plan.why_not if k not in CUDA_KERNELS)
    assert plan.linear.startswith("torch's CUDA int4 kernel")
    off = _plan(CpuFeatures(cpu=False), device="cuda", switches=KernelSwitches(int4_cuda=False))
    assert off.linear.startswith("dequantized")
    # and probing a non-CPU device builds nothing
    assert CpuFeatures.probe("meta", KernelSwitches(), quantized=True) == CpuFeatures(cpu=False)


def test_probing_with_every_switch_off_builds_nothing():
    off = KernelSwitches(**{name: False for name in SWITCH_VARIABLES})
    features = CpuFeatures.probe("cpu", off, quantized=True)
    assert dict(features.ops) == {INT8_DECODE: "turned off (ORIN_LLM_INT8_ATTN=0)",
                                  INT8_PROMPT: "turned off (ORIN_LLM_PREFILL_ATTN=0)",
                                  Q8_DOT: "turned off (ORIN_LLM_Q8_DOT=0)",
                                  FUSED: "turned off (ORIN_LLM_FUSED_DECODE=0)"}


def test_settling_records_what_only_the_loaded_weights_tell():
    plan = _plan()
    kept = plan.settled(True, None, 9, "head")
    assert kept.fused_decode and kept.rows_independent and kept.decode_width == 9 and kept.lm_head == "head"
    dependent = plan.settled(False, None, 9, "head")
    assert not dependent.fused_decode and not dependent.rows_independent
    assert dict(dependent.why_not)[FUSED] == "the linear kernels are not row-independent here"
    odd = plan.settled(True, "a layer does not run on q8_dot's kernels", 9, "head")
    assert not odd.fused_decode and dict(odd.why_not)[FUSED] == "a layer does not run on q8_dot's kernels"
    # exact steps wider than the probe: padded, while the fused layer keeps running (its rows are independent)
    wide = plan.settled(True, None, PROBE_ROWS + 1, "head")
    assert wide.fused_decode and not wide.rows_independent
    assert plan.report()["exact_decode_width"] == 0 and kept.report()["exact_decode_width"] == 9


def _cache(dtype):
    ns = SimpleNamespace(dtype=dtype, device=torch.device("cpu"))
    if dtype == torch.int8:
        ns.int8_layer = lambda layer: None
    return ns


def test_the_models_steps_follow_its_plan():
    """Per step kind and cache dtype, the Step a forward makes: the INT8 ops only over an INT8 cache and
    only where the plan runs them; exact steps only with a decode width."""
    plan = _plan().settled(True, None, 9, "head")
    model = Llama(_arch(), 64, plan)
    int8, fp = _cache(torch.int8), _cache(torch.float32)
    decode = model._step(100, 1, 0, int8, decode=True)
    assert decode.int8_op and decode.exact and model._fusable(SimpleNamespace(ids=torch.zeros(1), cache=int8, block=0))
    assert not model._step(100, 1, 0, fp, decode=True).int8_op
    prompt = model._step(MIN_KEYS, 32, 0, int8, block=16)
    assert prompt.bf16 and prompt.prompt_op
    short = model._step(0, 32, 0, int8, block=16)  # its blocks end before MIN_KEYS keys: SDPA
    assert not short.bf16 and not short.prompt_op
    fp_prompt = model._step(MIN_KEYS, 32, 0, fp, block=16)
    assert not fp_prompt.bf16 and not fp_prompt.prompt_op
    model.plan = replace(plan, int8_decode=False, int8_prompt=False, fused_decode=False, decode_width=0)
    decode = model._step(100, 1, 0, int8, decode=True)
    assert not decode.int8_op and not decode.exact
    prompt = model._step(MIN_KEYS, 32, 0, int8, block=16)
    assert prompt.bf16 and not prompt.prompt_op  # the bf16 GEMMs
    assert not model._fusable(SimpleNamespace(ids=torch.zeros(1), cache=int8, block=0))


def test_the_engine_reports_its_plan_and_takes_the_switches_the_edge_read(engine, engine_dir, monkeypatch):
    from orin_llm.runtime.engine import Engine
    from orin_llm.runtime.engine_config import EngineConfig

    report = engine.kernels()
    assert report["threads"] >= 1 and report["device"] == "cpu" and report["kv_cache"] == "int8"
    for name in OPS:  # each true, or why not in words (/health: tests/server/test_cancel.py)
        assert report[name] is True or (isinstance(report[name], str) and report[name]), name
    assert report["steps"] == engine.model.plan.report()["steps"]
    assert (engine.model.fused_args is not None) == engine.model.plan.fused_decode
    assert engine.model.plan.decode_width == engine.decode_rows  # an exact engine (the default)
    monkeypatch.setenv("ORIN_LLM_INT8_ATTN", "0")
    off = Engine.load(engine_dir, EngineConfig.at_edge(device="cpu", draft=False))
    monkeypatch.delenv("ORIN_LLM_INT8_ATTN")  # read once, at the edge: the loaded engine keeps its plan
    kernels = off.kernels()
    assert kernels["int8_decode_attention"] == "turned off (ORIN_LLM_INT8_ATTN=0)"
    assert kernels["fused_decode_layer"] is not True and off.model.fused_args is None
    assert kernels["steps"]["int8"]["decode"]["attention"] != "INT8 decode op"
    cache = off.contiguous_cache(32)
    assert not off.model._step(0, 1, 0, cache, decode=True).int8_op
