"""A step's forward: each scheduled request's rows (`prepare`), one `forward_batch` over all of them
(`forward`), the logits handed back in the same order.

A request's rows are the next chunk of its prompt while it prefills (the scheduler sized it), else
the tokens it emitted before a preemption and has not computed again ("catch-up"), else its last
token plus this step's draft. Its blocks grow to hold them here; what the rows were is recorded on
the request (`step_kind`, `draft`, `draft_q`, `masks`), for the decider (decider.py) to read the
logits by. The uncached part of the prompt is all that is computed: the cache (cache.py) gave the
sequence every token it already held.
"""

from __future__ import annotations

from typing import Optional

import torch

from ..errors import OrinError
from .cache import PagedCache
from .generate import Generation
from .llama import Item, Llama


class ModelRunner:
    def __init__(self, model: Llama, cache: PagedCache, decode_rows: int, max_seq_len: int):
        """decode_rows: rows of one request's decode step (its pending tokens and draft), the width the
        target's exactness covers (llama.py)."""
        self.model, self.cache = model, cache
        self.decode_rows, self.max_seq_len = decode_rows, max_seq_len
        self.device = cache.target_pool.device

    def forward(self, items: list[Item]) -> list[torch.Tensor]:
        return self.model.forward_batch(items)

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
