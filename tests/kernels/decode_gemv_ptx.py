"""The decode GEMV family compiled for sm_87 and sm_90 with no GPU (as the JIT specializes it at a
Llama-3.2-3B layer's shapes), and what its TTGIR, PTX and ptxas say, one JSON line per configuration.
Run by test_triton_decode_gemv_ptx.py in a process without TRITON_INTERPRET:

    python -m tests.kernels.decode_gemv_ptx 87 90
"""

from __future__ import annotations

import json
import os
import re
import sys

if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
    sys.exit("run without TRITON_INTERPRET: the kernels must be compiled functions")

import torch  # noqa: E402

from orin_llm.kernels.triton import decode_gemv as dg  # noqa: E402
from tests.kernels.compile_kernels import compile_launch, int_to_float, record_launches  # noqa: E402
from tests.kernels.ptx_checks import global_loads, ptxas_usage  # noqa: E402


def launches() -> list:
    """Every candidate at the 3B's qkv (3072 in) and down (8192 in) shapes, bf16 and fp16, the residual once."""
    def run():
        for n, k in ((5120, 3072), (3072, 8192)):
            p = dg.decode_pack(torch.zeros(n, k // 2, dtype=torch.uint8), torch.ones(n, k // 32),
                               torch.zeros(n, k // 32))
            for dtype in (torch.bfloat16, torch.float16):
                x = torch.zeros(9, k, dtype=dtype)
                for cfg in dg.FAMILY_CANDIDATES:
                    dg.decode_gemv(x, p, cfg)
                dg.decode_gemv(x, p, dg.FAMILY_CANDIDATES[0], residual=torch.zeros(9, n, dtype=dtype))
    return record_launches(run)


def _layouts(ttgir: str) -> dict[str, str]:
    return dict(re.findall(r"^(#blocked\d*) = #ttg\.blocked<\{sizePerThread = \[([\d, ]+)\]", ttgir, re.M))


def inspect(ttgir: str, ptx: str, block_n: int, groups: int) -> dict:
    """The loads of the codes and of the scales, the codes' layout conversions, and the PTX's loads."""
    layouts = _layouts(ttgir)
    codes = re.findall(rf"(%\w+) = tt\.load [^\n]*: tensor<{block_n}x{groups}x4x!tt\.ptr<i32>, (#blocked\d*)>", ttgir)
    scales = re.findall(rf"= tt\.load [^\n]*: tensor<{block_n}x{groups}x!tt\.ptr<i32>", ttgir)
    return {"codes_loads": len(codes),
            "codes_per_thread": [layouts.get(layout, "") for _, layout in codes],
            "codes_converted": sum(len(re.findall(rf"ttg\.convert_layout {name}\b", ttgir)) for name, _ in codes),
            "scale_loads": len(scales), "all_loads": len(re.findall(r"= tt\.load ", ttgir)),
            "ptx_loads": dict(global_loads(ptx)), "int_to_float": int_to_float(ptx)}


def main(archs: list[int]) -> int:
    seen = set()
    for fn, args, kw in launches():
        key = (tuple(sorted(kw.items())), args[0].dtype, args[7])
        if key in seen:
            continue
        seen.add(key)
        for arch in archs:
            k = compile_launch(fn, args, kw, arch)
            row = {"arch": arch, "dtype": str(args[0].dtype).removeprefix("torch."), "K": args[7],
                   **{name: kw[name] for name in ("BLOCK_N", "BLOCK_K", "HAS_RES")}, "num_warps": kw.get("num_warps"),
                   **inspect(k.asm["ttgir"], k.asm["ptx"], kw["BLOCK_N"], kw["BLOCK_K"] // 32),
                   **ptxas_usage(k.asm["ptx"], arch)}
            print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main([int(a) for a in sys.argv[1:]] or [87, 90]))
