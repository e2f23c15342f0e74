"""Quantized weights times integer-quantized activations, in integer dot products (our C++ ops: csrc/ops.cpp,
kernels in csrc/kernels/), on CPUs.

Why: torch's weight-only kernels (`_weight_int4pack_mm_for_cpu`, `_weight_int8pack_mm`) convert every
weight to float before multiplying; on one core that conversion, not the memory, sets their pace (a
q4_1 decode step's linear layers and lm_head were 12 of its 19 ms, at about an eighth of the read
bandwidth: docs/notes/benchmarks-lab-notes.md). llama.cpp quantizes each row of activations to int8 in blocks of 32
and takes integer dot products with the 4- or 8-bit codes as stored. This does the same, for:

- Q4_1 layers (`q4_1_linear`): scale·code + min per block of 32, the GGUF's own values; a symmetric
  int4 draft layer is the same with min = -8·scale. Their activations are 16-bit codes per block of
  32 (d = amax/SPLIT_QMAX) held as two byte planes, q = 256·hi + lo, so that the byte dot products
  (AVX2's maddubs, VNNI's dpbusd, NEON's sdot) take both and the sums combine exactly. llama.cpp's
  Q8_1 (int8 activations), which ran here first, rounds coarsely enough to turn a small model's
  close greedy choices (the README's "capital of France" answered "L'Étoile ..." on every CPU
  kind); the 16-bit codes round below the bf16 inputs torch's int4 kernel takes, for twice the byte
  dot products (`orin-llm bench --scenario kernels`, docs/BENCHMARKS.md);
- int8 per-row matrices (`q8_linear`): an int8 draft's layers and the q4_1 target's lm_head candidate
  pass, on int16 activations: head.py bounds that pass's error, activation rounding included, and
  int8 activations made the bound so wide that hundreds of tokens a row needed exact logits.

Outputs are float32. Each output is computed in one fixed order from its
own row of x, so rows are bit for bit independent of the batch (runtime/packed.rows_independent
probes it at load, as for every kernel). Weights are laid out once at load in tiles of output rows
(`pack_q4_1`, `pack_q8`), which the kernel reads as one stream. Built at install (native.py): x86
AVX2 (VNNI where the CPU has it) and ARM NEON with the dot-product instructions; where the module is
not built, or has only the plain loops, or with ORIN_LLM_Q8_DOT=0, torch's kernels run as before.

Prefill runs the same kernel. A bf16 GEMM over the tiles dequantized per call was 1.5-3× faster for
chunks of 32+ rows, but its rows differ from the decode kernel's by rounding, and with prefix caching
a token's K/V then depends on whether it was computed in a prefill chunk or a decode step: greedy
speculation stopped matching plain decoding (tests/runtime/test_speculative.py). One kernel for every
row keeps a token's values independent of how it was batched.
"""

from __future__ import annotations

from typing import Optional

import torch

from . import native
from .native import NativeLib

# What pack_* lay out for (the module's own constants are checked against these at load: native.py)
BLOCK = 32  # activations (and weights) per scale
ROWS = 8  # output rows per tile of an int8 matrix (pack_q8): one lane of a vector each
QROWS = 8  # output rows per tile of a Q4_1 layer (pack_q4_1): the same
SPLIT_QMAX = 127 * 256 + 127  # a Q4_1 layer's activation codes: 16-bit, held as two bytes (csrc/kernels/common.h)


def _plain_loops_only(module) -> Optional[str]:
    """A build without a SIMD path runs plain loops, slower than torch's kernels: not used, unless the
    reference family was asked for (native.FAMILY_VARIABLE), to measure those loops' numbers."""
    if module.simd() == "generic" and native.family() != "reference":
        return "no SIMD path for this CPU (x86 AVX2, or ARM NEON with the dot-product instructions)"
    return None


_lib = NativeLib("q8_dot", "the int8 dot-product kernels",
                 "quantized layers run torch's weight-only kernels (slower on one core)", refuse=_plain_loops_only,
                 expects={"BLOCK": BLOCK, "ROWS": ROWS, "QROWS": QROWS, "SPLIT_QMAX": SPLIT_QMAX})


def op():
    """The compiled module (q4_1_linear, q8_linear, quantize_activations); None where it is not
    built, or where it would run only its plain loops (slower than torch's kernels)."""
    return _lib.get()


def unavailable() -> Optional[str]:
    """Why the kernels are not used here (None: they are, or have not been asked for yet)."""
    return _lib.error


def fits(out_features: int, in_features: int, pairs: bool) -> bool:
    """The shapes the kernels take: Q4_1 (pairs) output rows in tiles of 8 and input in pairs of blocks
    of 32; int8 output rows in tiles of 8 and input in blocks of 32."""
    if pairs:
        return out_features % QROWS == 0 and in_features % (2 * BLOCK) == 0
    return out_features % ROWS == 0 and in_features % BLOCK == 0


def pack_q4_1(codes: torch.Tensor, scales: torch.Tensor, mins: torch.Tensor):
    """Codes [N, K] (0..15, one per weight), scales and mins [N, K/32] → the kernel's tiles of 8 output
    rows, with the rows in the lanes of a vector (csrc/kernels/x86.h tile_q4_1): codes [N/8, K/64, 8, 32]
    uint8, per pair of blocks 8 groups of 4 codes of each row (byte 4r+i of group g: code 4g+i of row
    r's first block in the low nibble, of its second block in the high one); scales and mins
    [N/8, K/32, 8], float16 where every one of them is exact in it (a GGUF's Q4_1 blocks hold them as
    fp16: 13 MB less for the embedded model's layers), else float32 (a symmetric int4 draft's scales).
    The kernel converts either to float32: the same values, the same results."""
    n, k = codes.shape
    c = codes.to(torch.uint8).view(n // QROWS, QROWS, k // (2 * BLOCK), 2, 8, 4)  # [tile, r, pair, block, g, i]
    tiles = (c[:, :, :, 0] | (c[:, :, :, 1] << 4)).permute(0, 2, 3, 1, 4).reshape(n // QROWS, k // (2 * BLOCK), 8, 32)

    def per_tile(a: torch.Tensor) -> torch.Tensor:
        return a.float().view(n // QROWS, QROWS, -1).permute(0, 2, 1).contiguous()

    s, m = per_tile(scales), per_tile(mins)
    hs, hm = s.half(), m.half()
    if torch.equal(hs.float(), s) and torch.equal(hm.float(), m):
        return tiles, hs, hm
    return tiles, s, m


def pack_q8(codes: torch.Tensor) -> torch.Tensor:
    """int8 codes [N, K] → the kernel's tiles of 8 output rows with the rows in the lanes of a vector
    (csrc/kernels/x86.h tile_q8): [N/8, K/32, 16, 16], per block 16 groups of 2 codes of each row (byte
    2r+i of group c: code 2c+i of row r)."""
    n, k = codes.shape
    c = codes.view(n // ROWS, ROWS, k // BLOCK, BLOCK // 2, 2)  # [tile, r, block, c, i]
    return c.permute(0, 2, 3, 1, 4).reshape(n // ROWS, k // BLOCK, BLOCK // 2, 2 * ROWS).contiguous()


def unpack_q8_rows(tiles: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Rows `ids` of the [N, K] int8 matrix that pack_q8 tiled (an int8 draft's embedding lookups)."""
    t = tiles.view(tiles.shape[0], tiles.shape[1], BLOCK // 2, ROWS, 2)
    rows = t[ids // ROWS, :, :, ids % ROWS]  # [..., K/32, 16, 2]
    return rows.reshape(*ids.shape, -1)


def activation_error(x: torch.Tensor) -> torch.Tensor:
    """[M] float32: Σ|x - x~| per row, x~ being x as q8_linear quantizes it (head.py's error bound)."""
    q, d = op().quantize_activations(x.float().contiguous(), 16)
    xq = q.view(x.shape[0], -1, BLOCK).double() * d.double()[..., None]
    return (x.double() - xq.view_as(x)).abs().sum(dim=1).float()
