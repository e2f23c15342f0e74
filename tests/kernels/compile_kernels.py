"""Compile every kernel launch the Triton wrappers make, for the Orin's sm_87 and the bench GPUs' sm_90,
with no GPU: triton ships ptxas, and `triton.compile` takes a target. Catches what Triton's interpreter
lets through but its compiler refuses. Run by test_triton_compile.py in a process of its own, without
TRITON_INTERPRET (the kernels must be defined as compiled functions):

    python -m tests.kernels.compile_kernels 87 90

Prints one line per kernel configuration and architecture ("ok ..." or "FAIL ..."); exits 1 on a failure.
A configuration that reads codes by their bits fails if its PTX holds any int-to-float conversion.
"""

from __future__ import annotations

import os
import re
import sys

if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
    sys.exit("run without TRITON_INTERPRET: the kernels must be compiled functions")

import torch  # noqa: E402
import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402
from triton.runtime.jit import JITFunction  # noqa: E402

# keywords of a launch that are options, not constexprs
LAUNCH_OPTIONS = ("num_warps", "num_stages", "enable_fp_fusion")
TYPES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32", torch.int8: "i8",
         torch.uint8: "u8", torch.int32: "i32", torch.int64: "i64"}


def record_launches(run) -> list:
    """The (kernel, args, constexprs) of every launch `run()` makes; nothing is launched."""
    launches = []
    original = JITFunction.__getitem__
    JITFunction.__getitem__ = lambda self, grid: lambda *args, **kw: launches.append((self, args, kw))
    try:
        run()
    finally:
        JITFunction.__getitem__ = original
    return launches


def signature(fn, args, constexprs) -> dict:
    sig = {}
    for name, a in zip(fn.arg_names, args, strict=False):  # (the constexprs come as keywords)
        if isinstance(a, torch.Tensor):
            sig[name] = "*" + TYPES[a.dtype]
        elif isinstance(a, bool):
            sig[name] = "i1"
        elif isinstance(a, int):
            sig[name] = "i32" if -2 ** 31 <= a < 2 ** 31 else "i64"
        elif isinstance(a, float):
            sig[name] = "fp32"
        else:
            raise TypeError(f"{fn.__name__}: argument {name} = {a!r}")
    sig.update({name: "constexpr" for name in constexprs})
    return {n: sig[n] for n in fn.arg_names}


def specialized(fn, args, constexprs: dict) -> tuple[dict, dict, dict]:
    """The signature, constexprs and attributes Triton's JIT compiles this launch with: its own
    specialization of each argument (a 16-byte aligned pointer and an int divisible by 16 marked so, an
    int of 1 made a constant; none where the kernel says do_not_specialize), so that what compiles here
    is what runs (vector loads depend on the alignment it knows)."""
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.compiler import BaseBackend

    sig, consts, attrs = signature(fn, args, constexprs), dict(constexprs), {}
    for i, (kp, a) in enumerate(zip(fn.params, args, strict=False)):
        kind, attr = native_specialize_impl(BaseBackend, a, kp.is_const, not kp.do_not_specialize,
                                            not kp.do_not_specialize_on_alignment)
        if kind == "constexpr":
            sig[kp.name], consts[kp.name] = "constexpr", attr
        elif isinstance(attr, str) and attr:
            attrs[(i,)] = BaseBackend.parse_attr(attr)
    return sig, consts, attrs


def compile_launch(fn, args, kwargs: dict, arch: int, sig: dict | None = None):
    """One recorded launch compiled for sm_`arch` as the JIT would (specialized); `sig`: another signature."""
    options = {k: kwargs[k] for k in LAUNCH_OPTIONS if k in kwargs}
    spec_sig, consts, attrs = specialized(fn, args, {k: v for k, v in kwargs.items() if k not in LAUNCH_OPTIONS})
    return triton.compile(ASTSource(fn, sig or spec_sig, consts, attrs), target=GPUTarget("cuda", arch, 32),
                          options=options)


def int_to_float(ptx: str) -> int:
    """How many int-to-float conversions (cvt.rn.f16/bf16/f32 from s/u 8-32) the PTX holds."""
    return len(re.findall(r"cvt\.rn\.(?:f16|bf16|f32)(?:x2)?\.[su](?:8|16|32)\b", ptx))


def by_bits(constexprs: dict) -> bool:
    """Whether this configuration reads its codes as 16-bit floats by their bits (the kernels' docs):
    then its PTX must hold no int-to-float conversion at all."""
    return constexprs.get("MAGIC", 0) != 0 or constexprs.get("FAST") is True or constexprs.get("DOT") == 3 \
        or "HAS_RES" in constexprs  # (the decode family: always by bits)


def every_launch() -> None:
    """The wrappers at a Llama-3.2-3B layer's shapes, in each configuration the runtime may use."""
    from orin_llm.kernels import triton as kt

    h, kv, d, bs = 24, 8, 128, 16
    tables, lens = torch.zeros(4, 40, dtype=torch.int32), torch.ones(4, dtype=torch.int32)
    q_start = torch.arange(5, dtype=torch.int32)
    int8_cache = torch.zeros(kv, 64 * bs, d, dtype=torch.int8)
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        q = torch.zeros(4, h, d, dtype=dtype)
        float_cache = torch.zeros(kv, 64 * bs, d, dtype=dtype)
        scales = torch.ones(kv, dtype=dtype)
        for split_blocks in (16, 64):  # several splits and their merge; one split
            kt.paged_decode_attention(q, int8_cache, int8_cache, tables, lens, bs, scales, scales,
                                      split_blocks=split_blocks)
            kt.paged_decode_attention(q, float_cache, float_cache, tables, lens, bs, split_blocks=split_blocks)
        kt.paged_prefill_attention(q, int8_cache, int8_cache, tables, lens, q_start, bs, scales, scales, max_q_len=1)
        kt.paged_prefill_attention(q, float_cache, float_cache, tables, lens, q_start, bs, max_q_len=1)
        packed = kt.q4_repack(torch.zeros(256, 512, dtype=torch.uint8), torch.ones(256, 32), torch.zeros(256, 32))
        x = torch.zeros(3, 1024, dtype=dtype)
        kt.int4_linear(x, packed)
        kt.int4_linear(x, packed, split_k=4)
        kt.int4_linear(x, packed, block_m=64, block_n=128, num_warps=8, num_stages=4)
        if dtype == torch.bfloat16:  # scales in x's type: the dequantization by bits
            kt.int4_linear(x, kt.q4_repack(torch.zeros(256, 512, dtype=torch.uint8), torch.ones(256, 32),
                                           torch.zeros(256, 32), dtype=dtype))
        from orin_llm.kernels.triton.int4_gemv import CANDIDATES

        for cfg in CANDIDATES:  # the decode GEMV's tiles the load-time choice times, by bits where x's type fits
            kt.q4_gemv(x, packed, cfg, split_k=4)
            if dtype != torch.float32:
                kt.q4_gemv(x, kt.q4_repack(torch.zeros(256, 512, dtype=torch.uint8), torch.ones(256, 32),
                                           torch.zeros(256, 32), dtype=dtype), cfg, split_k=1)
        from orin_llm.kernels.triton import decode_gemv as dg

        if dtype != torch.float32:  # the decode family at decode's bf16/fp16 rows, every tile it may time
            family = dg.decode_pack(torch.zeros(256, 512, dtype=torch.uint8), torch.ones(256, 32),
                                    torch.zeros(256, 32))
            for cfg in dg.FAMILY_CANDIDATES:
                dg.decode_gemv(x, family, cfg)
            dg.decode_gemv(x, family, dg.FAMILY_CANDIDATES[0], residual=torch.zeros(3, 256, dtype=dtype))
        from orin_llm.kernels.triton import step_ops

        hidden = torch.zeros(3, 3072, dtype=dtype)
        step_ops.add_rms_norm(hidden, torch.ones(3072, dtype=dtype), 1e-5)
        step_ops.add_rms_norm(hidden, torch.ones(3072, dtype=dtype), 1e-5, hidden.clone())
        step_ops.silu_mul(torch.zeros(3, 2 * 8192, dtype=dtype))
        qkv, pos = torch.zeros(3, (h + 2 * kv) * d, dtype=dtype), torch.zeros(3, dtype=torch.long)
        cos = torch.zeros(64, 1, d)
        step_ops.rope_write(qkv, pos, cos, cos, int8_cache, int8_cache, pos, h, kv, torch.ones(kv), torch.ones(kv))
        step_ops.rope_write(qkv, pos, cos, cos, float_cache, float_cache, pos, h, kv)
        codes = torch.zeros(100, 1024, dtype=torch.int8)
        kt.int8_head(x, codes, torch.ones(100))
        kt.int8_head(x, codes, torch.ones(100, 32, dtype=torch.float16))


def main(archs: list[int]) -> int:
    failed, seen = 0, set()
    for fn, args, kwargs in record_launches(every_launch):
        options = {k: kwargs[k] for k in LAUNCH_OPTIONS if k in kwargs}
        constexprs = {k: v for k, v in kwargs.items() if k not in LAUNCH_OPTIONS}
        sig, constexprs, _ = specialized(fn, args, constexprs)
        key = (fn.__name__, tuple(sig.items()), tuple(sorted(constexprs.items())), tuple(sorted(options.items())))
        if key in seen:
            continue
        seen.add(key)
        # torch.compile's inductor passes a Python float as fp64: each kernel with one compiles so too (once)
        wide = {n: "fp64" if t == "fp32" and isinstance(a, float) else t
                for (n, t), a in zip(sig.items(), [*args, *[None] * len(sig)], strict=False)}
        variants = [(arch, sig) for arch in archs] + ([(archs[-1], wide)] if wide != sig else [])
        for arch, sig in variants:
            types = ",".join(v for v in sig.values() if v != "constexpr")
            try:
                kernel = compile_launch(fn, args, kwargs, arch, sig)
                converts = int_to_float(kernel.asm["ptx"])
                if converts and by_bits(constexprs):
                    raise AssertionError(f"{converts} int-to-float conversions where codes are read by their bits")
                print(f"ok sm_{arch} {fn.__name__} {constexprs} {options} ({types})")
            except Exception as e:  # noqa: BLE001  (any compiler error is the finding)
                failed += 1
                print(f"FAIL sm_{arch} {fn.__name__} {constexprs} ({types}): {type(e).__name__}: {e}")
    print(f"{len(seen)} configurations, {len(archs)} architectures, {failed} failed (triton {triton.__version__})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main([int(a) for a in sys.argv[1:]] or [87, 90]))
