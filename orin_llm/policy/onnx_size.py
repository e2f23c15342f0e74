"""The policy's memory from its ONNX file: the bytes of every initializer, read from the protobuf
(external data counted from its recorded length, never loaded), so a policy can be planned for on a
machine that cannot run it."""

from __future__ import annotations

import math
from pathlib import Path

from ..errors import OrinError


def _tensor_type_bits() -> dict[int, int]:
    from onnx import TensorProto

    bits = {"FLOAT": 32, "UINT8": 8, "INT8": 8, "UINT16": 16, "INT16": 16, "INT32": 32, "INT64": 64,
            "BOOL": 8, "FLOAT16": 16, "DOUBLE": 64, "UINT32": 32, "UINT64": 64, "COMPLEX64": 64,
            "COMPLEX128": 128, "BFLOAT16": 16, "FLOAT8E4M3FN": 8, "FLOAT8E4M3FNUZ": 8,
            "FLOAT8E5M2": 8, "FLOAT8E5M2FNUZ": 8, "FLOAT8E8M0": 8, "UINT4": 4, "INT4": 4,
            "FLOAT4E2M1": 4, "UINT2": 2, "INT2": 2}
    # Look the enum values up by name: older onnx releases lack the newest types.
    return {getattr(TensorProto, n): b for n, b in bits.items() if hasattr(TensorProto, n)}


def _tensor_bytes(t, bits: dict[int, int], source: Path) -> int:
    from onnx import TensorProto

    if t.data_location == TensorProto.EXTERNAL:
        info = {e.key: e.value for e in t.external_data}
        if "length" in info:  # exactly the bytes the runtime reads from the external file
            return int(info["length"])
    if t.data_type == TensorProto.STRING:
        return sum(len(s) for s in t.string_data)
    if t.data_type not in bits:
        raise OrinError(f"{source}: initializer {t.name!r} has ONNX data type {t.data_type}, "
                        f"which the memory plan cannot size; state policy.reserve_gib instead")
    numel = math.prod(t.dims)  # dims are recorded even when the data lives in an external file
    return math.ceil(numel * bits[t.data_type] / 8)


def _graph_bytes(graph, bits: dict[int, int], source: Path) -> int:
    from onnx import AttributeProto

    total = sum(_tensor_bytes(t, bits, source) for t in graph.initializer)
    for sp in graph.sparse_initializer:
        total += _tensor_bytes(sp.values, bits, source) + _tensor_bytes(sp.indices, bits, source)
    for node in graph.node:  # If / Loop / Scan bodies carry their own initializers
        for attr in node.attribute:
            if attr.type == AttributeProto.GRAPH:
                total += _graph_bytes(attr.g, bits, source)
            elif attr.type == AttributeProto.GRAPHS:
                total += sum(_graph_bytes(g, bits, source) for g in attr.graphs)
    return total


def onnx_initializer_bytes(path: str | Path) -> int:
    """Bytes of all initializers of an ONNX model (external data included, never loaded)."""
    path = Path(path)
    if not path.is_file():
        raise OrinError(f"policy onnx {path} not found; fix policy.onnx or state policy.reserve_gib")
    try:
        import onnx
    except ImportError:
        raise OrinError("sizing policy.onnx needs the onnx package (pip install onnx), "
                        "or state policy.reserve_gib instead") from None
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as e:  # protobuf DecodeError and friends
        raise OrinError(f"policy onnx {path}: not a readable ONNX model ({type(e).__name__}); "
                        f"fix policy.onnx or state policy.reserve_gib") from None
    return _graph_bytes(model.graph, _tensor_type_bits(), path)
