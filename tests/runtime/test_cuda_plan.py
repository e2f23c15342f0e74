"""The kernel plan's CUDA choices (runtime/kernel_plan.py), decided without a GPU: a plan is made for a
device by name. What runs on a GPU is tests/runtime/test_cuda.py's."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from orin_llm.runtime.kernel_plan import (
    COMPILE,
    CUDA_KERNELS,
    GRAPHS,
    INT4_CUDA,
    OPT_IN,
    SWITCH_VARIABLES,
    TRITON_ATTN,
    TRITON_HEAD,
    TRITON_LINEAR,
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
    assert plan.int4_cuda and plan.cuda_graphs and plan.triton_attention and plan.triton_head
    assert not (plan.torch_compile or plan.triton_linear)  # opt-in
    assert not (plan.q8_dot or plan.int8_decode or plan.fused_decode or plan.onednn_pack or plan.torch_int8)
    why = dict(plan.why_not)
    assert why["q8_dot"] == "not a CPU (cuda)" and "ORIN_LLM_COMPILE=1" in why[COMPILE]
    assert "ORIN_LLM_TRITON_LINEAR=1" in why[TRITON_LINEAR]
    report = plan.report()
    assert report[INT4_CUDA] is True and report[GRAPHS] is True and report[TRITON_ATTN] is True
    assert report["steps"]["int8"]["decode"]["attention"].startswith("Triton paged decode attention")
    assert "torch's CUDA int4 kernel" in report["steps"]["int8"]["decode"]["layers"]


@pytest.mark.parametrize("name", ["int4_cuda", "cuda_graphs", "triton_attention", "triton_head"])
def test_a_cuda_switch_turns_its_kernel_off_and_those_that_need_it(name):
    plan = _cuda(replace(KernelSwitches(), **{name: False}))
    why = dict(plan.why_not)
    off = f"turned off ({SWITCH_VARIABLES[name]}=0)"
    kernel = {"int4_cuda": INT4_CUDA, "cuda_graphs": GRAPHS, "triton_attention": TRITON_ATTN,
              "triton_head": TRITON_HEAD}[name]
    assert why[kernel] == off and not getattr(plan, name)
    needs = {"int4_cuda": [TRITON_LINEAR], "cuda_graphs": [TRITON_ATTN, COMPILE]}.get(name, [])
    for other in needs:
        assert off in why[other]
    assert KernelSwitches.from_environment({SWITCH_VARIABLES[name]: "0"}) == replace(KernelSwitches(), **{name: False})


def test_opt_in_kernels_run_when_asked_for():
    switches = KernelSwitches.from_environment({var: "1" for var in OPT_IN.values()})
    assert switches.torch_compile and switches.triton_linear
    plan = _cuda(switches)
    assert plan.torch_compile and plan.triton_linear and plan.int4_cuda
    assert "Triton int4 kernel" in plan.linear
    # settled without exact decode steps: no graphs, so nothing that runs inside them
    settled = plan.settled(True, None, 0, "head")
    assert not (settled.cuda_graphs or settled.torch_compile or settled.triton_attention)
    assert "exact=False" in dict(settled.why_not)[GRAPHS]
    # a layer the int4 kernel refused: the plan says which and why
    refused = plan.settled(True, None, 9, "head", int4_cuda="layers.0.mlp: shape")
    assert not refused.int4_cuda and dict(refused.why_not)[TRITON_LINEAR] == "layers.0.mlp: shape"


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
