"""The kernel plan's CUDA choices (runtime/kernel_plan.py), decided without a GPU: a plan is made for a
device by name. What runs on a GPU is tests/runtime/test_cuda.py's."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from orin_llm.runtime.kernel_plan import (
    COMPILE,
    CUDA_KERNELS,
    FUSED_STEP,
    GRAPHS,
    INT4_CUDA,
    INT4_KERNEL_VARIABLE,
    OPT_IN,
    SWITCH_VARIABLES,
    TRITON_ATTN,
    TRITON_HEAD,
    TRITON_LINEAR,
    TRITON_PREFILL,
    CpuFeatures,
    KernelSwitches,
    compute_dtype,
    plan_kernels,
)
from tests.runtime.test_kernel_plan import FULL, _arch

TRITON = pytest.importorskip("triton", reason="the Triton kernels' plan needs triton importable") is not None


def _cuda(switches=KernelSwitches(), weights="q4_1"):
    return plan_kernels(CpuFeatures(cpu=False), _arch(), "int8", "cuda", switches, weights, torch.bfloat16)


def test_a_q4_1_engine_on_cuda_runs_the_cuda_path_and_none_of_our_cpu_ops():
    plan = _cuda()
    assert plan.int4_cuda and plan.cuda_graphs and plan.triton_attention and plan.triton_head and plan.fused_step_ops
    assert not plan.torch_compile  # opt-in
    # the int4 kernel is chosen per layer shape at load: torch's or the Triton GEMV, whichever is faster
    assert plan.triton_linear and plan.int4_kernel == "auto"
    assert not (plan.q8_dot or plan.int8_decode or plan.fused_decode or plan.onednn_pack or plan.torch_int8)
    why = dict(plan.why_not)
    assert why["q8_dot"] == "not a CPU (cuda)" and "ORIN_LLM_COMPILE=1" in why[COMPILE]
    report = plan.report()
    assert report[INT4_CUDA] is True and report[GRAPHS] is True and report[TRITON_ATTN] is True
    assert report["steps"]["int8"]["decode"]["attention"].startswith("Triton paged decode attention")
    assert "fastest at load" in report["steps"]["int8"]["decode"]["layers"]
    assert "RoPE + K/V write" in report["steps"]["int8"]["decode"]["layers"]
    assert "RoPE" not in report["steps"]["int8"]["prompt"]["layers"]  # prompt chunks run eagerly, unfused
    assert plan.triton_prefill and report["steps"]["int8"]["prompt"]["attention"].startswith("Triton paged prefill")


def test_the_int4_kernel_switch_and_what_the_settled_plan_says():
    assert KernelSwitches.from_environment({}).int4_kernel == "auto"
    assert KernelSwitches.from_environment({INT4_KERNEL_VARIABLE: "GEMV"}).int4_kernel == "gemv"
    with pytest.raises(ValueError, match="ORIN_LLM_INT4_KERNEL='fast'.*auto, int4pack, gemv, tiled"):
        KernelSwitches.from_environment({INT4_KERNEL_VARIABLE: "fast"})
    torch_only = _cuda(KernelSwitches(int4_kernel="int4pack"))
    assert not torch_only.triton_linear and "ORIN_LLM_INT4_KERNEL=int4pack" in dict(torch_only.why_not)[TRITON_LINEAR]
    assert "torch's CUDA int4 kernel" in torch_only.linear
    assert "Triton int4 GEMV" in _cuda(KernelSwitches(int4_kernel="gemv")).linear
    assert "Triton decode GEMV family" in _cuda(KernelSwitches(int4_kernel="family")).linear
    # settled with the per-shape choices (weights.py hands them over from cuda_linear.choose_int4)
    plan = _cuda()
    mixed = plan.settled(True, None, 9, "head", int4_layers=(
        ("5120x3072", "gemv", "Triton GEMV n64_r128_w4_s3 (timed at load: ...)"),
        ("3072x8192", "int4pack", "torch's int4 kernel (timed at load: ...)"),
        ("16384x3072", "family", "Triton decode family n8_k512_w4 (timed at load: ...)")))
    assert mixed.triton_linear and mixed.report()["int4_layers"]["3072x8192"].startswith("torch's int4 kernel")
    assert "per layer shape" in mixed.linear
    for kernel in ("torch's CUDA int4 kernel", "the Triton int4 GEMV", "the Triton decode GEMV family"):
        assert kernel in mixed.linear
    slower = plan.settled(True, None, 9, "head", int4_layers=(("5120x3072", "int4pack", "torch's int4 kernel (x)"),))
    assert not slower.triton_linear and "faster at every layer shape" in dict(slower.why_not)[TRITON_LINEAR]
    assert slower.linear.startswith("torch's CUDA int4 kernel")


@pytest.mark.parametrize("name", ["int4_cuda", "cuda_graphs", "triton_attention", "triton_head", "fused_step",
                                  "triton_prefill"])
def test_a_cuda_switch_turns_its_kernel_off_and_those_that_need_it(name):
    plan = _cuda(replace(KernelSwitches(), **{name: False}))
    why = dict(plan.why_not)
    off = f"turned off ({SWITCH_VARIABLES[name]}=0)"
    kernel = {"int4_cuda": INT4_CUDA, "cuda_graphs": GRAPHS, "triton_attention": TRITON_ATTN,
              "triton_head": TRITON_HEAD, "fused_step": FUSED_STEP, "triton_prefill": TRITON_PREFILL}[name]
    assert why[kernel] == off and not getattr(plan, {"fused_step": "fused_step_ops"}.get(name, name))
    needs = {"int4_cuda": [TRITON_LINEAR], "cuda_graphs": [TRITON_ATTN, COMPILE, FUSED_STEP]}.get(name, [])
    for other in needs:
        assert off in why[other]
    assert KernelSwitches.from_environment({SWITCH_VARIABLES[name]: "0"}) == replace(KernelSwitches(), **{name: False})


def test_opt_in_kernels_run_when_asked_for():
    switches = KernelSwitches.from_environment({var: "1" for var in OPT_IN.values()})
    assert switches.torch_compile
    plan = _cuda(replace(switches, int4_kernel="tiled"))
    assert plan.torch_compile and plan.triton_linear and plan.int4_cuda
    assert "Triton tiled int4 kernel" in plan.linear
    # settled without exact decode steps: no graphs, so nothing that runs inside them
    settled = plan.settled(True, None, 0, "head")
    assert not (settled.cuda_graphs or settled.torch_compile or settled.triton_attention or settled.fused_step_ops)
    assert "exact=False" in dict(settled.why_not)[GRAPHS]
    # a layer the int4 kernel refused: the plan says which and why
    refused = plan.settled(True, None, 9, "head", int4_cuda="layers.0.mlp: shape")
    assert not refused.int4_cuda and dict(refused.why_not)[INT4_CUDA] == "layers.0.mlp: shape"
    assert not refused.triton_linear and "no CUDA int4 layers" in dict(refused.why_not)[TRITON_LINEAR]


def test_on_a_cpu_the_cuda_kernels_are_not_applicable_and_compute_stays_as_built():
    plan = plan_kernels(FULL, _arch(), "int8", "cpu", KernelSwitches(), "q4_1")
    assert not any(k in dict(plan.why_not) for k in CUDA_KERNELS)
    assert plan.report()[GRAPHS] == "not applicable to this engine or device"
    assert compute_dtype("cpu", "q4_1", torch.float32) == torch.float32
    assert compute_dtype("cuda", "q4_1", torch.float32) == torch.bfloat16
    assert compute_dtype("cuda", "fp32", torch.float32) == torch.float32  # the reference stays float32
    assert compute_dtype("cuda", "q4_1", torch.float16) == torch.float16
    fp = _cuda(weights="fp32")
    assert not fp.int4_cuda and "no int4 layers" in dict(fp.why_not)[INT4_CUDA]
    assert "no Q8_0 head" in dict(fp.why_not)[TRITON_HEAD]
