"""A decode step's (or a prompt chunk's) decoder layer in one C++ call (csrc/ops.cpp decode_layer), on
CPUs with q8_dot's kernels.

Why: with the weights on q8_dot's kernels and attention on the INT8 op, a decode step of the embedded
model still spent half its time between them: RMSNorm, RoPE, the K/V write, SiLU·up and the residual
adds are about 150 torch op calls a layer, each a few microseconds of dispatch for a few hundred floats
of work (docs/notes/benchmarks-lab-notes.md, the step breakdown). The op runs the same kernels and does the small
work in place on the rows: one call per layer.

Used for the steps the INT8 attention op serves (decode, verify and catch-up steps of at most
PROBE_ROWS tokens per sequence, over an INT8 cache), on a model whose every layer runs on q8_dot's
kernels (a q4_1 target; an int8 or int4 draft). Prompt chunks over an INT8 cache take it too where
the INT8 prompt attention op runs (prefill_attention.py): their rows in blocks that end at or past
MIN_KEYS keys attend with that op, the rows before with the decode op (about 8 % off a warm request's
time to first token on a 4k home: torch's ops between the kernels were ~150 calls a layer there too).
The small ops round differently from torch's, so a model takes this path for all of those steps
or for none (loaded once; ORIN_LLM_FUSED_DECODE=0 turns it off for A/B measurements): rows stay
independent of the batch, and greedy speculation stays exactly lossless (tests/runtime/test_decode_layer.py).

The op takes a layer's weights as one `LayerWeights` (made once at load: `layer_args`) and names its
arguments: op()(x, layer, cos, sin, heads, kv_heads, caches, pos, rows, prompt_from), `caches` holding
per sequence its cache layer's K, V, K scale, V scale and slots (llama.py _fused_layers).
"""

from __future__ import annotations

from typing import Optional

import torch

from .int8_attention import HEAD_DIMS
from .native import NativeLib
from .quant import QuantLinear

_lib = NativeLib("decode_layer", "the fused decode layer",
                 "decode steps run each layer as torch ops around the same kernels (slower, same results to rounding)",
                 expects={"HEAD_DIMS": HEAD_DIMS})


def op():
    """The compiled op; None where it is not available (the reason: `unavailable()`)."""
    lib = _lib.get()
    return None if lib is None else lib.decode_layer


def unavailable() -> Optional[str]:
    return _lib.error


def layer_args(block) -> Optional[tuple]:
    """The op's weight argument for one Block (llama.py), `(LayerWeights,)`, or None where a part of it
    does not run on q8_dot's kernels (a float export, a CUDA model, a CPU without them) or the op is
    not available."""
    lib = _lib.get()
    if lib is None:
        return None
    attn, mlp = block.self_attn, block.mlp
    linears = (attn.qkv_proj, attn.o_proj, mlp.gate_up_proj, mlp.down_proj)
    if not all(isinstance(m, QuantLinear) and m.q8 is not None for m in linears):
        return None
    n1, n2 = block.input_layernorm, block.post_attention_layernorm
    if n1.weight.dtype != torch.float32 or n1.eps != n2.eps:
        return None
    qkv, o, gate_up, down = (list(m.q8) for m in linears)
    return (lib.LayerWeights(norm1=n1.weight.detach().contiguous(), norm2=n2.weight.detach().contiguous(),
                             eps=float(n1.eps), qkv=qkv, o=o, gate_up=gate_up, down=down),)

