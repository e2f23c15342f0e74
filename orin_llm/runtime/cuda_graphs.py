"""Decode steps at fixed shapes, captured in CUDA graphs per bucket: the bookkeeping.

A decode step of a small model on a GPU is bound by kernel launches, not by memory: each layer runs
a dozen or more small ops. Replaying a captured CUDA graph launches them all at once, but a graph
replays fixed shapes and fixed addresses. So a decode step (model_runner.py: a request's last token,
its draft, or catch-up rows) runs here in a fixed shape:

- B sequences, B the smallest batch bucket that holds the step's requests (1, 2, 4, 8, ... up to the
  engine's max_batch_size); missing sequences are padding;
- W rows each: the exact decode width (KernelPlan.decode_width: 2·draft_len + 1), whatever the draft:
  a plain step and a verify step of the same request then run the same kernels at the same shapes,
  which is what keeps greedy speculation identical to plain decoding; padding rows past a sequence's
  own rows. Where every row's numbers are its own whatever the row count (`narrow`: the linear
  kernels probed row-independent at load, packed.rows_independent, and attention per query, the
  Triton kernel's), a step whose sequences have one row each runs 1 row wide instead: the same
  numbers, without computing W - 1 rows of padding per sequence at every plain decode step;
- N keys each: the block table padded to the smallest block bucket (powers of two up to the longest
  sequence's blocks), each query masked to the keys up to its own position.

Its inputs live in static device tensors (`StaticInputs`), filled by one host-to-device copy per
step: token ids, positions, the slot each row's K/V is written to, the block tables ([B, blocks]) and
each row's key count. Padding rows write into the pool's scratch block (kv_pool.py), and table entries
past a sequence's blocks point at it (masked out). A graph per (B, blocks) bucket is captured on its
first use, after warm-up runs, and replayed after; all of a model's graphs share one memory pool
(they never run at once). The head's logits are computed in the graph too, over all B·W rows.

On a CPU the same fixed-shape step runs eagerly (capture=False), which is how the tests check the
bookkeeping and its numbers without a GPU.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Optional

import torch

log = logging.getLogger(__name__)

WARMUP_RUNS = 2  # eager runs on a side stream before a capture (torch's allocator and lazy inits settle)


def batch_buckets(max_batch: int) -> tuple[int, ...]:
    """1, 2, 4, ... up to max_batch, and max_batch itself."""
    if max_batch < 1:
        raise ValueError(f"max_batch {max_batch}: give at least 1")
    out, b = [], 1
    while b < max_batch:
        out.append(b)
        b *= 2
    return (*out, max_batch)


def block_buckets(max_blocks: int, smallest: int = 4, step: int = 64) -> tuple[int, ...]:
    """Block-table widths: powers of two from `smallest` up to `step`, then multiples of `step`, and
    max_blocks itself: a long sequence's table is at most step blocks wider than it needs (the SDPA
    path reads every key of the table), for max_blocks / step graphs more per batch bucket."""
    if max_blocks < 1:
        raise ValueError(f"max_blocks {max_blocks}: give at least 1")
    out, b = [], min(smallest, max_blocks)
    while b < max_blocks:
        out.append(b)
        b = b * 2 if b < step else b + step
    return (*out, max_blocks)


def bucket(n: int, buckets: tuple[int, ...]) -> int:
    """The smallest bucket that holds n."""
    for b in buckets:
        if n <= b:
            return b
    raise ValueError(f"{n} is past the largest bucket ({buckets[-1]})")


@dataclass(frozen=True)
class Row:
    """One sequence of a fixed-shape step, as the host sees it: its new tokens, where they start, its
    block table, and how many of its last rows need logits."""
    ids: list[int]
    pos: int
    blocks: list[int]
    num_logits: int


@dataclass
class Layout:
    """The host side of one fixed-shape step: every static input as a flat list, in StaticInputs' order."""
    batch: int  # B (the bucket)
    width: int  # W
    blocks: int  # the table's width (the bucket)
    ids: list[int]
    positions: list[int]
    slots: list[int]
    limits: list[int]
    table: list[int]
    logit_rows: list[tuple[int, int]]  # per real sequence, its [start, end) rows of the B·W outputs

    def flat(self) -> list[int]:
        return self.ids + self.positions + self.slots + self.limits + self.table


def layout(rows: list[Row], width: int, block_size: int, scratch_block: int,
           batches: tuple[int, ...], blocks: tuple[int, ...]) -> Layout:
    """The static inputs of a step over `rows` (model_runner's decode items), padded to its buckets."""
    if not rows:
        raise ValueError("a step with no sequences")
    b = bucket(len(rows), batches)
    need = max(-(-(r.pos + len(r.ids)) // block_size) for r in rows)
    nb = bucket(need, blocks)
    ids, positions, slots, limits, table, logit_rows = [], [], [], [], [], []
    scratch = scratch_block * block_size
    for i in range(b):
        r = rows[i] if i < len(rows) else None
        t = len(r.ids) if r is not None else 0
        if t > width:
            raise ValueError(f"a sequence with {t} rows in a step {width} wide")
        for j in range(width):
            if j < t:
                p = r.pos + j
                ids.append(r.ids[j])
                positions.append(p)
                slots.append(r.blocks[p // block_size] * block_size + p % block_size)
                limits.append(p + 1)  # query p sees keys 0 .. p
            else:  # padding: position 0, its K/V into the scratch block, one key in view
                ids.append(0)
                positions.append(0)
                slots.append(scratch)
                limits.append(1)
        own = r.blocks[:nb] if r is not None else []
        table += own + [scratch_block] * (nb - len(own))
        if r is not None:
            logit_rows.append((i * width + t - r.num_logits, i * width + t))
    return Layout(b, width, nb, ids, positions, slots, limits, table, logit_rows)


class StaticInputs:
    """One bucket's static device tensors, all views of one int64 buffer filled by one copy."""

    def __init__(self, batch: int, width: int, blocks: int, device: torch.device | str):
        r = batch * width
        self.batch, self.width, self.blocks = batch, width, blocks
        self.buffer = torch.zeros(4 * r + batch * blocks, dtype=torch.long, device=device)
        self.ids, self.positions, self.slots, self.limits = (self.buffer[i * r:(i + 1) * r] for i in range(4))
        self.table = self.buffer[4 * r:].view(batch, blocks)
        pin = torch.device(device).type == "cuda"
        self.host = torch.zeros(self.buffer.shape, dtype=torch.long, pin_memory=pin)

    def fill(self, lay: Layout) -> None:
        if (lay.batch, lay.width, lay.blocks) != (self.batch, self.width, self.blocks):
            raise ValueError(f"a ({lay.batch}, {lay.width}, {lay.blocks}) step into "
                             f"({self.batch}, {self.width}, {self.blocks}) buffers")
        self.host.copy_(torch.tensor(lay.flat(), dtype=torch.long))
        self.buffer.copy_(self.host, non_blocking=self.buffer.is_cuda)


@dataclass
class Entry:
    """One bucket: its static inputs, and once captured, its graph and output."""
    inputs: StaticInputs
    graph: Optional[object] = None  # torch.cuda.CUDAGraph once captured
    output: Optional[torch.Tensor] = None  # the graph's logits [B·W, vocab] (a static tensor)
    replays: int = 0
    eager_runs: int = 0
    capture_s: float = 0.0


@dataclass
class GraphStats:
    captures: int = 0
    replays: int = 0
    eager_runs: int = 0
    capture_s: float = 0.0
    buckets: dict = field(default_factory=dict)  # "BxN" (W wide; "BxNw1": 1 row each) -> replays + eager runs


class DecodeGraphs:
    """A model's fixed-shape decode steps, one Entry per (batch, width, blocks) bucket.

    step: the fixed-shape forward (Llama.static_step), (StaticInputs) -> logits [B·W, vocab] float32.
    capture: capture CUDA graphs (a CUDA device); False runs the same fixed-shape step eagerly.
    narrow: steps of one row per sequence run 1 row wide (the module doc says when that is exact)."""

    def __init__(self, step: Callable[[StaticInputs], torch.Tensor], width: int, block_size: int,
                 scratch_block: int, max_batch: int, max_blocks: int, device: torch.device | str,
                 capture: bool = True, smallest_blocks: int = 4, narrow: bool = False):
        self.step, self.width, self.block_size, self.scratch_block = step, width, block_size, scratch_block
        self.batches, self.blocks = batch_buckets(max_batch), block_buckets(max_blocks, smallest_blocks)
        self.widths = (1, width) if narrow and width > 1 else (width,)
        self.device, self.capture = torch.device(device), capture
        self.entries: dict[tuple[int, int, int], Entry] = {}
        self.stats = GraphStats()
        self._pool = None  # the graphs' shared memory pool (torch.cuda.graph_pool_handle), on first capture

    def fits(self, rows: list[Row]) -> bool:
        """Whether a step over `rows` has a bucket (else it runs the eager path)."""
        return (0 < len(rows) <= self.batches[-1] and all(len(r.ids) <= self.width for r in rows)
                and max(-(-(r.pos + len(r.ids)) // self.block_size) for r in rows) <= self.blocks[-1])

    def run(self, rows: list[Row]) -> list[torch.Tensor]:
        """Each sequence's logits ([num_logits, vocab] float32), in order."""
        width = bucket(max(len(r.ids) for r in rows), self.widths)
        lay = layout(rows, width, self.block_size, self.scratch_block, self.batches, self.blocks)
        key = (lay.batch, width, lay.blocks)
        entry = self.entries.get(key)
        if entry is None:
            entry = self.entries[key] = Entry(StaticInputs(lay.batch, width, lay.blocks, self.device))
        entry.inputs.fill(lay)
        name = f"{lay.batch}x{lay.blocks}" + ("" if width == self.width else f"w{width}")
        self.stats.buckets[name] = self.stats.buckets.get(name, 0) + 1
        if not self.capture:
            out = self.step(entry.inputs)
            entry.eager_runs += 1
            self.stats.eager_runs += 1
        else:
            if entry.graph is None:
                self._capture(entry)
            entry.graph.replay()
            entry.replays += 1
            self.stats.replays += 1
            out = entry.output
        # copies: the next replay of this graph (or another sharing its pool) overwrites its output
        return [out[a:b].clone() for a, b in lay.logit_rows]

    def _capture(self, entry: Entry) -> None:
        started = time.perf_counter()
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):  # warm-up: rewrites the K/V the step writes with the same values
            for _ in range(WARMUP_RUNS):
                self.step(entry.inputs)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):
            entry.output = self.step(entry.inputs)
        entry.graph = graph
        entry.capture_s = time.perf_counter() - started
        self.stats.captures += 1
        self.stats.capture_s += entry.capture_s
        log.info("CUDA graph captured for %d sequences x %d rows, %d blocks, in %.2f s", entry.inputs.batch,
                 entry.inputs.width, entry.inputs.blocks, entry.capture_s)

    def report(self) -> dict:
        s = self.stats
        return {"captured": s.captures, "replays": s.replays, "eager_runs": s.eager_runs,
                "capture_s": round(s.capture_s, 3), "batch_buckets": list(self.batches),
                "block_buckets": list(self.blocks), "width": self.width, "widths": list(self.widths),
                "steps_by_bucket": dict(s.buckets)}
