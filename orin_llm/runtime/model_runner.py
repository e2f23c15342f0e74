"""A step's forward: each scheduled request's rows (`prepare`), one `forward_batch` over all of them
(`forward`), the logits handed back in the same order.

A request's rows are the next chunk of its prompt while it prefills (the scheduler sized it), else
the tokens it emitted before a preemption and has not computed again ("catch-up"), else its last
token plus this step's draft. Its blocks grow to hold them here; what the rows were is recorded on
the request (`step_kind`, `draft`, `draft_q`, `masks`), for the decider (decider.py) to read the
logits by. The uncached part of the prompt is all that is computed: the cache (cache.py) gave the
sequence every token it already held.

Where the kernel plan runs decode steps at fixed shapes (CUDA graphs: cuda_graphs.py), the runner holds
them (`attach_graphs`) and sends each step that fits one there; the model (llama.py) only makes the
fixed-shape step.
"""

from __future__ import annotations

from typing import Optional

import torch

from ..errors import OrinError
from .cache import PagedCache
from .cuda_graphs import DecodeGraphs, Row
from .generate import Generation
from .llama import Item, Llama


class ModelRunner:
    def __init__(self, model: Llama, cache: PagedCache, decode_rows: int, max_seq_len: int):
        """decode_rows: rows of one request's decode step (its pending tokens and draft), the width the
        target's exactness covers (llama.py)."""
        self.model, self.cache = model, cache
        self.decode_rows, self.max_seq_len = decode_rows, max_seq_len
        self.device = cache.target_pool.device
        self.graphs: Optional[DecodeGraphs] = None  # decode steps at fixed shapes, where the plan runs them
        self.graph_pool = None

    def forward(self, items: list[Item]) -> list[torch.Tensor]:
        if self.graphs is None:
            return self.model.forward_batch(items)
        if self._graphable(items):
            return self._graphed(items)
        if len(items) > 1 and not self.model.plan.rows_independent:
            # the model runs such a batch one sequence at a time (padded exactness, llama.py): each may fit
            return [self.forward([it])[0] for it in items]
        return self.model.forward_batch(items)

    def attach_graphs(self, pool, max_batch: int, max_positions: int, capture: Optional[bool] = None) -> DecodeGraphs:
        """Run the model's decode steps over `pool` (a KVPool) at fixed shapes (cuda_graphs.py), in CUDA
        graphs where `capture` (default: on a CUDA device), eagerly otherwise."""
        step = self.model.fixed_step(pool)  # settles the step's attention kernel (model.triton_attention)
        capture = pool.device.type == "cuda" if capture is None else capture
        blocks = -(-max_positions // pool.block_size)
        triton = bool(self.model.triton_attention)
        # the Triton kernel splits a table of more than 16 blocks into ranges merged in order: every
        # table at least 32 wide takes that one path, so a row's numbers do not depend on the bucket.
        # Plain steps run 1 row wide where that computes the same numbers as W wide (cuda_graphs.py): linear
        # kernels probed row-independent at load, and attention per query row (the Triton kernel; SDPA's
        # kernels over W queries are not promised to give each row the numbers it gets alone)
        self.graphs = DecodeGraphs(step, self.model.plan.decode_width, pool.block_size, pool.scratch, max_batch,
                                   blocks, pool.device, capture, smallest_blocks=32 if triton else 4,
                                   narrow=bool(self.model.plan.rows_independent and triton))
        self.graph_pool = pool
        return self.graphs

    def _graphable(self, items: list[Item]) -> bool:
        return all(it.decode and not it.block and getattr(it.cache, "pool", None) is self.graph_pool
                   for it in items) and self.graphs.fits(
            [Row([0] * it.ids.shape[0], it.cache.length, it.cache.blocks, it.num_logits) for it in items])

    def _graphed(self, items: list[Item]) -> list[torch.Tensor]:
        rows = []
        for it in items:
            t = it.ids.shape[0]
            rows.append(Row(it.ids.tolist(), it.cache.reserve(t), it.cache.blocks, it.num_logits))
        outs = self.graphs.run(rows)
        for it, r in zip(items, rows, strict=True):
            it.cache.length = r.pos + len(r.ids)
        return self.model.fixed_logits(outs, items)

    def prepare(self, gen: Generation, chunk: int) -> Item:
        """This step's rows of `gen`: the next prompt chunk (`chunk` tokens: Scheduler.prefill_rows),
        or the last token(s) plus a draft."""
        kv = gen.kv
        start = kv.target.length
        if start < gen.prefill_end:
            end = start + chunk
            self.cache.grow(kv, end)
            last = end == gen.prefill_end and not gen.prefill_only and not gen.out
            gen.step_kind = "prefill"
            if end <= len(gen.prompt_ids):
                gen.timings.computed_prompt_tokens += end - start  # (a preempted request's output: not prompt)
            else:
                gen.timings.computed_prompt_tokens += max(0, len(gen.prompt_ids) - start)
            # the first token's mask, known now: the head makes the argmax over it exact (llama.Item)
            gen.masks = gen.constraint.allowed()[None] if last and gen.constraint is not None else None
            return Item(self._tensor(gen.context[start:end]), kv.target, 1 if last else 0,
                        block=self.cache.block_size, greedy=gen.params.greedy, allowed=gen.masks)
        behind = len(gen.context) - 1 - start  # emitted before a preemption, K/V not computed again yet
        if behind > 0:
            n = min(behind, self.decode_rows)
            self.cache.grow(kv, start + n)
            gen.step_kind = "catch-up"
            return Item(self._tensor(gen.context[start:start + n]), kv.target, 0, decode=True)
        draft, q, masks = self._propose(gen)
        feed = gen.context[start:] + draft
        self.cache.grow(kv, start + len(feed))
        gen.draft, gen.draft_q, gen.masks = draft, q, masks
        gen.step_kind = "decode"
        return Item(self._tensor(feed), kv.target, len(draft) + 1, decode=True, greedy=gen.params.greedy,
                    allowed=masks)

    def _propose(self, gen: Generation) -> tuple[list[int], Optional[torch.Tensor], Optional[torch.Tensor]]:
        c, params = gen.constraint, gen.params
        if not gen.drafter or not gen.adapt:
            return [], None, (c.masks([]) if c else None)
        # room: max_tokens (the last emitted token is the target's own), the sequence's max length, and
        # the decode step's width (its rows: tokens not yet computed, the draft) that exactness covers
        pending = len(gen.context) - gen.kv.target.length
        room = min(params.max_tokens - len(gen.out) - 1, self.max_seq_len - len(gen.context) - 1,
                   self.decode_rows - pending)
        k = min(gen.adapt.next_k(), room)
        draft, q = [], None
        if k > 0:
            try:  # the draft model writes K/V up to the draft's end: room in the blocks first
                self.cache.grow(gen.kv, len(gen.context) + k)
                draft, q = gen.drafter.propose(gen.context, k, params, gen.sampler)
            except OrinError:  # no blocks left for drafting: decode plainly this step
                draft, q = [], None
            draft = draft[:max(0, k)]
        if c is not None and draft:
            draft = draft[:c.valid_prefix(draft)]  # a forbidden token is never verified
        if q is not None:  # the draft model's distributions (masked by the grammar, if any)
            q = q[:len(draft)]
        return draft, q, (c.masks(draft) if c else None)

    def _tensor(self, ids: list[int]) -> torch.Tensor:
        return torch.tensor(ids, dtype=torch.long, device=self.device)
