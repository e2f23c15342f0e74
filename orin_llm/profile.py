"""Build profiles: a TOML file that says what to build, for which device, next to what.

Validated with pydantic; an unknown key or impossible value is an OrinError naming the key.
The embedded default profile ships inside the package (`orin_llm/profiles/embedded.toml`).
"""

from __future__ import annotations

import sys
from importlib import resources
from pathlib import Path
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .errors import OrinError

if sys.version_info >= (3, 11):
    import tomllib
else:  # JetPack 6 ships Python 3.10
    import tomli as tomllib

# int4_gptq: a GPTQ checkpoint, converted as it is (TensorRT-LLM only: build/trtllm.py)
Weights = Literal["fp32", "fp16", "bf16", "int8_wo", "int4_wo", "int4_awq", "int4_gptq", "q4_1"]
KvDtype = Literal["fp32", "fp16", "bf16", "int8"]
Backend = Literal["torch", "trtllm", "edgellm"]  # edgellm: TensorRT Edge-LLM 0.11 (JetPack 7)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DeviceSpec(_Strict):
    name: str = "cpu"
    memory_gib: float = Field(gt=0)
    reserved_gib: float = Field(default=0.0, ge=0)  # OS, desktop, ROS 2 graph, services
    cuda_context_gib: float = Field(default=0.0, ge=0)  # per CUDA context (one per engine process)
    workspace_gib: float = Field(default=0.0, ge=0)  # activations / TensorRT scratch


class PolicySpec(_Strict):
    """The policy model that shares memory with the planner: a stated reservation, its ONNX file, or
    what the policy runner measured it to take (the JSON `python -m orin_llm.policy.runner
    --measurement-out` writes)."""

    reserve_gib: Optional[float] = Field(default=None, ge=0)
    onnx: Optional[str] = None
    activation_factor: float = Field(default=1.5, ge=1.0)
    measured: Optional[str] = None

    @model_validator(mode="after")
    def _one_of(self) -> PolicySpec:
        given = [k for k in ("reserve_gib", "onnx", "measured") if getattr(self, k) is not None]
        if len(given) > 1:
            raise ValueError(f"give one of reserve_gib, onnx or measured, not {' and '.join(given)}")
        return self


class ModelSpec(_Strict):
    # An HF model dir, a .gguf file, or `package:<module>/<file>` for a file shipped in a package.
    model: str
    # config.json to plan memory from when `model` is not on this machine (e.g. planning an Orin
    # build on a laptop); relative to the profile. Default: <model>/config.json.
    config: Optional[str] = None
    # The Hugging Face repository `model` is downloaded from: first contact's checks print the download
    # command for a checkpoint that is not there yet (doctor/first_checks.py).
    hf_repo: Optional[str] = None
    weights: Weights = "fp16"
    kv_cache: KvDtype = "fp16"
    dtype: Literal["float32", "float16", "bfloat16"] = "float16"  # compute dtype
    int4_group_size: int = Field(default=128, gt=0)


class Limits(_Strict):
    max_input_len: int = Field(default=2048, gt=0)
    max_seq_len: int = Field(default=4096, gt=0)
    max_batch_size: int = Field(default=1, gt=0)
    max_num_tokens: int = Field(default=2048, gt=0)
    draft_len: int = Field(default=4, ge=1, le=16)

    @model_validator(mode="after")
    def _ordered(self) -> Limits:
        if self.max_input_len > self.max_seq_len:
            raise ValueError(f"max_input_len ({self.max_input_len}) > max_seq_len ({self.max_seq_len})")
        return self


class Profile(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    backend: Backend = "torch"
    device: DeviceSpec = DeviceSpec(memory_gib=16)
    policy: PolicySpec = PolicySpec(reserve_gib=0.0)
    target: ModelSpec
    draft: Optional[ModelSpec] = None
    limits: Limits = Limits()
    calibration: Literal["none", "calib"] = "none"  # which calibration split derives KV scales
    calibration_size: Optional[int] = Field(default=None, gt=0)  # items used (None: the whole split)
    lookup_seed: Literal["none", "calib"] = "none"  # reference plans that seed the lookup drafter's history
    # Keep the environment prefix's K/V across requests. TensorRT-LLM 0.12 does this with paged
    # context FMHA + block reuse, which its builder refuses together with an INT8 KV cache
    # (orin_llm/backends/trtllm/rules.py has every such rule).
    prefix_reuse: bool = True
    # Prefill long prompts in chunks of blocks, interleaved with decoding (TensorRT-LLM's
    # ExecutorConfig(enable_chunked_context=True); it needs paged context FMHA too). Default off: a
    # profile or manifest without the key keeps the behaviour it was built with.
    chunked_context: bool = False
    # Prefix tokens to keep cached beyond the running sequences: with prefix reuse, the KV pool is also
    # where homes and conversations stay warm between requests, so the plan sizes it for both.
    cached_prefix_tokens: int = Field(default=0, ge=0)
    # TensorRT-LLM: requests in flight and no response for this long means the executor hangs (0.12's cancel
    # race); the daemon fails them, restarts the executor and goes on (backends/trtllm/watchdog.py). Well
    # above a step's time: the longest is a whole prompt of max_num_tokens prefilled at once.
    executor_stall_s: float = Field(default=30.0, gt=0)
    # TensorRT-LLM: ExecutorConfig(extended_runtime_perf_knob_config=ExtendedRuntimePerfKnobConfig(
    # multi_block_mode=True)) (R cpp/tensorrt_llm/pybind/executor/bindings.cpp L451-458, executor.h L468: off by
    # default at 0.12, on from 0.13): attention of a long context split over more thread blocks. Off until the
    # Orin's bench says it pays.
    multi_block_mode: bool = False

    @model_validator(mode="after")
    def _cached_needs_reuse(self) -> Profile:
        if self.cached_prefix_tokens and not self.prefix_reuse:
            raise ValueError(f"cached_prefix_tokens = {self.cached_prefix_tokens} keeps prefixes cached, "
                             "which needs prefix_reuse = true; set cached_prefix_tokens = 0 or prefix_reuse = true")
        return self


def _where(loc: tuple) -> str:
    return ".".join(str(p) for p in loc) or "<root>"


def parse_profile(data: dict, source: str) -> Profile:
    try:
        return Profile.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        more = f" (+{len(e.errors()) - 1} more)" if len(e.errors()) > 1 else ""
        msg = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
        raise OrinError(f"{source}: {_where(err['loc'])}: {msg}{more}") from None


def load_profile(path: str | Path) -> Profile:
    path = Path(path)
    if not path.is_file():
        raise OrinError(f"profile not found: {path}")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise OrinError(f"{path}: not valid TOML: {e}") from None
    return parse_profile(data, str(path))


EMBEDDED = "embedded.toml"


def embedded_profile() -> Profile:
    text = resources.files("orin_llm").joinpath("profiles", EMBEDDED).read_text()
    return parse_profile(tomllib.loads(text), f"<package>/profiles/{EMBEDDED}")
