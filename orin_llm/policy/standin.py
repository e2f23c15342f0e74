"""The stand-in policy: an ONNX visuomotor policy of a realistic shape with RANDOM weights.

No policy weights can be downloaded here, so the co-run benchmark runs a policy of the right shape
and size instead: image tokens, the task's token ids, the robot's state and flow-matching noise in;
an action chunk out. Its time per tick and its memory are honest (same operators, same sizes as the
real thing); its actions are noise. Every artifact says so: the ONNX file's doc string and metadata
(`orin_llm.stand_in = true`), the runner's measurement JSON (`stand_in: true`), the benchmark's
report and the memory plan's policy line.

Two shapes ship:

* `smolvla` — the Orin default, SmolVLA-class (~0.45 B parameters; SmolVLA: a SigLIP-style vision
  encoder, pixel shuffle to 64 tokens per camera, the first 16 layers of a 960-wide SmolLM2 language
  model, and a 0.75×-wide action expert that denoises a 50-step action chunk by flow matching in 10
  Euler steps). Exported in float16 for TensorRT.
* `cpu` — a small one for CPUs and CI: the same graph at a size onnxruntime runs in a few ms on one
  core, float32.

    python -m orin_llm.policy.standin --shape cpu --out policies/stand-in-cpu.onnx
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

from ..errors import OrinError
from .onnx_graph import OPSET, GraphBuilder

STAND_IN_NOTE = ("STAND-IN policy: random weights in a realistic shape. Honest for timing and memory, "
                 "never for behaviour: its actions are noise.")
STAND_IN_KEY = "orin_llm.stand_in"  # ONNX metadata_props key; "true" on every stand-in


@dataclass(frozen=True)
class StandInShape:
    name: str
    dtype: str  # float32 | float16: every weight and float input
    cameras: int
    patches: int  # image tokens per camera (patch embeddings from the camera encoder's stem)
    vision_dim: int
    vision_layers: int
    vision_heads: int
    vision_ffn: int
    shuffle: int  # pixel shuffle: this many image tokens become one wider token
    dim: int  # the language trunk
    layers: int
    heads: int
    ffn: int
    vocab: int
    task_tokens: int
    state_dim: int
    expert_dim: int  # the flow-matching action expert
    expert_layers: int
    expert_heads: int
    expert_ffn: int
    flow_steps: int  # Euler steps per tick: the expert runs this many times (shared weights)
    chunk: int  # actions per chunk
    action_dim: int

    @property
    def prefix_tokens(self) -> int:
        return self.cameras * self.patches // self.shuffle + self.task_tokens + 1


SHAPES = {
    "smolvla": StandInShape(
        name="smolvla", dtype="float16", cameras=2, patches=256, vision_dim=768, vision_layers=12,
        vision_heads=12, vision_ffn=3072, shuffle=4, dim=960, layers=16, heads=15, ffn=2560, vocab=49152,
        task_tokens=48, state_dim=32, expert_dim=720, expert_layers=16, expert_heads=12, expert_ffn=2048,
        flow_steps=10, chunk=50, action_dim=32),
    "cpu": StandInShape(
        name="cpu", dtype="float32", cameras=2, patches=64, vision_dim=96, vision_layers=2, vision_heads=4,
        vision_ffn=384, shuffle=4, dim=192, layers=3, heads=4, ffn=512, vocab=2048, task_tokens=16,
        state_dim=14, expert_dim=128, expert_layers=2, expert_heads=4, expert_ffn=384, flow_steps=10,
        chunk=50, action_dim=14),
}


def _graph(s: StandInShape, seed: int):
    from onnx import TensorProto, helper

    g = GraphBuilder(s.dtype, seed)
    image = "image_tokens"
    x = g.op("Reshape", [image, g.const_i64([s.cameras, s.patches, s.vision_dim])])  # one image per batch row
    for i in range(s.vision_layers):
        x = g.block(x, s.cameras, s.patches, s.vision_dim, s.vision_heads, s.vision_ffn, f"vision.{i}", gated=False)
    x = g.layer_norm(x, s.vision_dim, "vision.norm")
    visual = s.cameras * s.patches // s.shuffle
    x = g.op("Reshape", [x, g.const_i64([1, visual, s.vision_dim * s.shuffle])])  # pixel shuffle (token merge)
    x = g.linear(x, s.vision_dim * s.shuffle, s.dim, "connector")
    text = g.op("Gather", [g.weight("embed_tokens", (s.vocab, s.dim), std=0.02), "task_ids"], axis=0)
    state = g.op("Reshape", [g.linear("state", s.state_dim, s.dim, "state_proj"), g.const_i64([1, 1, s.dim])])
    x = g.op("Concat", [x, text, state], axis=1)
    n = s.prefix_tokens
    for i in range(s.layers):
        x = g.block(x, 1, n, s.dim, s.heads, s.ffn, f"trunk.{i}", gated=True)
    context = g.linear(g.layer_norm(x, s.dim, "trunk.norm"), s.dim, s.expert_dim, "expert.context")

    # Flow matching: integrate the velocity the expert predicts from the noise (t = 1) to the action
    # chunk (t = 0) in flow_steps Euler steps. The steps share the expert's weights, as in SmolVLA.
    actions = "noise"
    w_in = g.weight("expert.action_in.weight", (s.action_dim, s.expert_dim))
    w_time = g.weight("expert.time.weight", (s.expert_dim,), std=1.0)
    w_out = g.weight("expert.action_out.weight", (s.expert_dim, s.action_dim))
    dt = g.scalar(-1.0 / s.flow_steps)
    for step in range(s.flow_steps):
        t = 1.0 - step / s.flow_steps
        h = g.op("Add", [g.op("MatMul", [actions, w_in]), g.op("Mul", [w_time, g.scalar(t)])])
        for i in range(s.expert_layers):  # the same weight names every step: the same tensors
            h = g.block(h, 1, s.chunk, s.expert_dim, s.expert_heads, s.expert_ffn, f"expert.{i}", gated=True,
                        context=(context, s.prefix_tokens))
        velocity = g.op("MatMul", [g.layer_norm(h, s.expert_dim, "expert.norm"), w_out])
        last = step == s.flow_steps - 1
        actions = g.op("Add", [actions, g.op("Mul", [velocity, dt])], out="actions" if last else None)
    f = g.onnx_dtype
    inputs = [helper.make_tensor_value_info("image_tokens", f, [1, s.cameras * s.patches, s.vision_dim]),
              helper.make_tensor_value_info("task_ids", TensorProto.INT64, [1, s.task_tokens]),
              helper.make_tensor_value_info("state", f, [1, s.state_dim]),
              helper.make_tensor_value_info("noise", f, [1, s.chunk, s.action_dim])]
    outputs = [helper.make_tensor_value_info("actions", f, [1, s.chunk, s.action_dim])]
    return helper.make_graph(g.nodes, f"stand_in_{s.name}", inputs, outputs, g.initializers,
                             doc_string=STAND_IN_NOTE), g.params


def parameter_count(shape: StandInShape) -> int:
    """Parameters of a stand-in, counted from the shape alone (no graph built)."""
    s = shape

    def block(d: int, ffn: int, gated: bool) -> int:
        return 4 * d * d + (3 if gated else 2) * d * ffn + 4 * d  # q k v o, the MLP, two LayerNorms

    vision = s.vision_layers * block(s.vision_dim, s.vision_ffn, False) + 2 * s.vision_dim
    trunk = s.layers * block(s.dim, s.ffn, True) + 2 * s.dim
    embed = s.vocab * s.dim + s.state_dim * s.dim + s.vision_dim * s.shuffle * s.dim
    expert = (s.expert_layers * block(s.expert_dim, s.expert_ffn, True) + s.dim * s.expert_dim
              + 2 * s.action_dim * s.expert_dim + 3 * s.expert_dim)  # in/out, the time vector, its norm
    return vision + trunk + embed + expert


def export_stand_in(shape: str | StandInShape, out: str | Path, seed: int = 0, dtype: Optional[str] = None) -> Path:
    """Write the stand-in ONNX to `out` (weights in `<out>.data` beside it: models over 2 GB do not fit
    one protobuf, and TensorRT's parser reads external data relative to the model file)."""
    import onnx
    from onnx import helper

    if isinstance(shape, str):
        if shape not in SHAPES:
            raise OrinError(f"unknown stand-in shape {shape!r}; choose from {', '.join(SHAPES)}")
        shape = SHAPES[shape]
    if dtype is not None:
        if dtype not in ("float32", "float16"):
            raise OrinError(f"stand-in dtype {dtype!r}: choose float32 or float16")
        shape = StandInShape(**{**asdict(shape), "dtype": dtype})
    out = Path(out)
    if out.suffix != ".onnx":
        raise OrinError(f"{out}: the stand-in policy file must end in .onnx")
    out.parent.mkdir(parents=True, exist_ok=True)
    graph, params = _graph(shape, seed)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="orin-llm stand-in policy", doc_string=STAND_IN_NOTE)
    model.ir_version = 8  # onnxruntime ≥ 1.14 and TensorRT 10.3's parser (onnx 1.16) read IR 8
    meta = {STAND_IN_KEY: "true", "orin_llm.note": STAND_IN_NOTE, "orin_llm.shape": shape.name,
            "orin_llm.dtype": shape.dtype, "orin_llm.parameters": str(params), "orin_llm.seed": str(seed)}
    helper.set_model_props(model, meta)
    data = out.with_name(out.name + ".data")
    data.unlink(missing_ok=True)  # onnx appends to an existing data file
    onnx.save_model(model, str(out), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=data.name, size_threshold=1024)
    return out


def is_stand_in(path: str | Path) -> bool:
    """Whether an ONNX file is one of ours (metadata only; the weights are not read)."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    return any(p.key == STAND_IN_KEY and p.value == "true" for p in model.metadata_props)


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m orin_llm.policy.standin", description=__doc__.split("\n")[0])
    p.add_argument("--shape", default="cpu", choices=sorted(SHAPES), help="smolvla (Orin) or cpu (CPUs, CI)")
    p.add_argument("--out", required=True, help="the .onnx file to write (weights go to <out>.data)")
    p.add_argument("--dtype", choices=["float32", "float16"], help="override the shape's dtype")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    try:
        path = export_stand_in(a.shape, a.out, a.seed, a.dtype)
    except OrinError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{path}  ({parameter_count(SHAPES[a.shape]):,} parameters; {STAND_IN_NOTE})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
