"""A small ONNX graph builder: the transformer pieces the stand-in policy is made of.

Written with `onnx.helper` directly rather than exported from torch: the graph is the same on
every machine (no exporter version in the loop: torch's exporter changed its default between the
torch on the Orin and the one on our CPUs), and it uses only operators that onnxruntime and
TensorRT 10.3's ONNX parser both import at opset 17 (MatMul, Add, Mul, Sigmoid, Softmax, Reshape,
Transpose, Concat, Gather, LayerNormalization). Every shape is static: TensorRT then builds one
engine profile with no optimization-profile setup, and the memory it needs is fixed.
"""

from __future__ import annotations

import itertools
from typing import Optional

import numpy as np

OPSET = 17  # LayerNormalization is an ONNX operator from opset 17 on


class GraphBuilder:
    """Nodes and random initializers for one graph; `dtype` is the float type of every tensor."""

    def __init__(self, dtype: str, seed: int):
        from onnx import TensorProto

        self.np_dtype = np.dtype(dtype)
        self.onnx_dtype = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16}[dtype]
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        self.initializers: list = []
        self.params = 0
        self._weights: set[str] = set()
        self._ids = itertools.count()

    def _name(self, prefix: str) -> str:
        return f"{prefix}_{next(self._ids)}"

    # -- tensors --------------------------------------------------------------------------

    def weight(self, name: str, shape: tuple[int, ...], std: Optional[float] = None,
               fill: Optional[float] = None) -> str:
        """A random initializer (normal, std 1/sqrt(fan_in) unless given): keeps activations O(1)
        through many layers, so fp16 neither overflows nor underflows where the real policy would not.
        A name made before is that same tensor again: layers built twice share their weights."""
        from onnx import numpy_helper

        if name in self._weights:
            return name
        self._weights.add(name)
        if fill is not None:
            arr = np.full(shape, fill, dtype=self.np_dtype)
        else:
            scale = std if std is not None else 1.0 / np.sqrt(shape[0])
            arr = (self.rng.standard_normal(shape, dtype=np.float32) * scale).astype(self.np_dtype)
        self.initializers.append(numpy_helper.from_array(arr, name))
        self.params += arr.size
        return name

    def const_i64(self, values: list[int]) -> str:
        from onnx import numpy_helper

        name = self._name("shape")
        self.initializers.append(numpy_helper.from_array(np.array(values, dtype=np.int64), name))
        return name

    def scalar(self, value: float) -> str:
        from onnx import numpy_helper

        name = self._name("scalar")
        self.initializers.append(numpy_helper.from_array(np.array(value, dtype=self.np_dtype), name))
        return name

    def op(self, op_type: str, inputs: list[str], out: Optional[str] = None, **attrs) -> str:
        from onnx import helper

        out = out or self._name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=out, **attrs))
        return out

    # -- layers ---------------------------------------------------------------------------

    def linear(self, x: str, d_in: int, d_out: int, name: str, bias: bool = False) -> str:
        y = self.op("MatMul", [x, self.weight(f"{name}.weight", (d_in, d_out))])
        return self.op("Add", [y, self.weight(f"{name}.bias", (d_out,), fill=0.0)]) if bias else y

    def layer_norm(self, x: str, dim: int, name: str) -> str:
        scale = self.weight(f"{name}.weight", (dim,), fill=1.0)
        bias = self.weight(f"{name}.bias", (dim,), fill=0.0)
        return self.op("LayerNormalization", [x, scale, bias], axis=-1, epsilon=1e-5)

    def _heads(self, x: str, batch: int, seq: int, heads: int, head_dim: int) -> str:
        x = self.op("Reshape", [x, self.const_i64([batch, seq, heads, head_dim])])
        return self.op("Transpose", [x], perm=[0, 2, 1, 3])  # [batch, heads, seq, head_dim]

    def attention(self, x: str, kv: str, batch: int, seq: int, kv_seq: int, dim: int, heads: int, name: str,
                  kv_dim: Optional[int] = None) -> str:
        """Multi-head attention of `x` [batch, seq, dim] over `kv` [batch, kv_seq, kv_dim] (itself for
        self-attention); no mask: every token sees every token, as in a policy's encoder and in the
        flow-matching action expert."""
        head_dim = dim // heads
        kv_dim = kv_dim or dim
        q = self._heads(self.linear(x, dim, dim, f"{name}.q"), batch, seq, heads, head_dim)
        k = self._heads(self.linear(kv, kv_dim, dim, f"{name}.k"), batch, kv_seq, heads, head_dim)
        v = self._heads(self.linear(kv, kv_dim, dim, f"{name}.v"), batch, kv_seq, heads, head_dim)
        scores = self.op("MatMul", [q, self.op("Transpose", [k], perm=[0, 1, 3, 2])])
        probs = self.op("Softmax", [self.op("Mul", [scores, self.scalar(head_dim ** -0.5)])], axis=-1)
        out = self.op("Transpose", [self.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])
        out = self.op("Reshape", [out, self.const_i64([batch, seq, dim])])
        return self.linear(out, dim, dim, f"{name}.o")

    def mlp(self, x: str, dim: int, hidden: int, name: str, gated: bool) -> str:
        """SiLU-gated (Llama-style language layers) or plain with a sigmoid GELU (vision layers)."""
        up = self.linear(x, dim, hidden, f"{name}.up")
        if gated:
            gate = self.linear(x, dim, hidden, f"{name}.gate")
            act = self.op("Mul", [self.op("Mul", [gate, self.op("Sigmoid", [gate])]), up])
        else:  # x·sigmoid(1.702x): the GELU approximation without Erf or opset-20 Gelu
            act = self.op("Mul", [up, self.op("Sigmoid", [self.op("Mul", [up, self.scalar(1.702)])])])
        return self.linear(act, hidden, dim, f"{name}.down")

    def block(self, x: str, batch: int, seq: int, dim: int, heads: int, ffn: int, name: str, gated: bool,
              context: Optional[tuple[str, int]] = None) -> str:
        """A pre-norm transformer layer. With `context` (a tensor and its length), attention runs over
        the context followed by the layer's own tokens: the action expert attending to the observation."""
        h = self.layer_norm(x, dim, f"{name}.ln1")
        kv, kv_seq = (self.op("Concat", [context[0], h], axis=1), context[1] + seq) if context else (h, seq)
        x = self.op("Add", [x, self.attention(h, kv, batch, seq, kv_seq, dim, heads, f"{name}.attn")])
        return self.op("Add", [x, self.mlp(self.layer_norm(x, dim, f"{name}.ln2"), dim, ffn, f"{name}.mlp", gated)])
