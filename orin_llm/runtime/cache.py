"""The engine's paged KV cache: the target's pool, the draft's pool (same block ids), the block
manager, and what a sequence does with them: admit (reuse the longest cached prefix), grow,
commit what it computed, release, and pin.

A `SeqKV` is one sequence's part: its block table, a PagedView per model, and how far it has
committed. The draft's K/V live in the same blocks as the target's (a parallel pool), so a cached
block may hold the target's K/V and, if the draft model ever ran over it, the draft's too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

from ..errors import OrinError
from .block_manager import ROOT, BlockManager, Match, NoBlocks
from .kv_pool import KVPool, PagedView


class PinTooLarge(OrinError):
    """A pin that would not leave room for one full-length request (the daemon answers 507)."""


@dataclass
class SeqKV:
    blocks: list[int] = field(default_factory=list)  # the block table (owned: one reference each)
    target: Optional[PagedView] = None
    draft: Optional[PagedView] = None
    committed: int = 0  # leading full blocks committed
    parent: int = ROOT  # key of the last committed full block
    cached: int = 0  # tokens served from the cache at admission (never computed for this sequence)


@dataclass
class Pin:
    """A pinned token sequence: its blocks are held (never evicted) until unpinned."""

    ids: tuple[int, ...]
    blocks: list[int]


class PagedCache:
    def __init__(self, target: KVPool, draft: Optional[KVPool] = None):
        self.target_pool, self.draft_pool = target, draft
        self.block_size = target.block_size
        self.blocks = BlockManager(target.num_blocks, target.block_size)
        self.hit_tokens = 0  # prompt tokens served from the cache, all requests
        self.pins: list[Pin] = []

    # ------------------------------------------------------------------ sizing

    def blocks_for(self, tokens: int) -> int:
        return math.ceil(tokens / self.block_size)

    @property
    def capacity_tokens(self) -> int:
        return self.blocks.num_blocks * self.block_size

    def stats(self) -> dict[str, int]:
        s = self.blocks.stats()
        s["hit_tokens"] = self.hit_tokens
        s["pinned_tokens"] = sum(len(p.ids) for p in self.pins)
        return s

    # ------------------------------------------------------------------ sequences

    def lookup(self, tokens: list[int]) -> Match:
        """What `tokens` would find cached; at least the last token is always left to compute
        (its logits start the answer)."""
        return self.blocks.match(tokens, limit=len(tokens) - 1)

    def admit(self, tokens: list[int], total: int) -> SeqKV:
        """Blocks for a new sequence: the cached blocks its tokens start with (shared), and room for
        `total` tokens in all. NoBlocks if the pool cannot hold that now."""
        m = self.lookup(tokens)
        self.blocks.acquire(m.shared)  # first: a cached block we reuse must not be the one evicted
        need = self.blocks_for(total) - len(m.shared)
        if need > self.blocks.available:
            self.blocks.release(m.shared)
            raise NoBlocks(f"the KV pool has {self.blocks.available} blocks free or evictable, {need} needed")
        cached = m.tokens(self.block_size)
        seq = SeqKV(blocks=list(m.shared), committed=len(m.shared), parent=m.parent, cached=cached)
        seq.blocks += self.blocks.allocate(max(0, need))
        seq.target = PagedView(self.target_pool, seq.blocks, cached)
        if self.draft_pool is not None:
            seq.draft = PagedView(self.draft_pool, seq.blocks, self._draft_prefix(m.shared))
        self.hit_tokens += cached
        return seq

    def _draft_prefix(self, shared: list[int]) -> int:
        """Leading tokens of the shared blocks whose draft K/V is in the pool too."""
        n = 0
        for bid in shared:
            if not self.blocks.blocks[bid].draft:
                break
            n += self.block_size
        return n

    def grow(self, seq: SeqKV, tokens: int) -> None:
        """Room for `tokens` tokens in all (NoBlocks if the pool has none left)."""
        need = self.blocks_for(tokens) - len(seq.blocks)
        if need > 0:
            seq.blocks += self.blocks.allocate(need)

    def commit(self, seq: SeqKV, tokens: list[int], final: bool = False) -> None:
        """Commit the full blocks whose K/V is computed (`seq.target.length`): other sequences can
        share them from now on. `final`: the sequence is done; record which blocks the draft model
        has caught up on since they were committed."""
        # a request that stopped inside an accepted draft has K/V past its last token: not its own
        bs, done = self.block_size, min(seq.target.length, len(tokens))
        draft_done = min(seq.draft.length, done) if seq.draft is not None else 0
        while (seq.committed + 1) * bs <= done:
            i = seq.committed
            chunk = tuple(tokens[i * bs:(i + 1) * bs])
            seq.parent = self.blocks.commit(seq.blocks[i], seq.parent, chunk, draft=draft_done >= (i + 1) * bs)
            seq.committed += 1
        if final:
            for i in range(min(seq.committed, draft_done // bs)):
                self.blocks.mark_draft(seq.blocks[i])

    def release(self, seq: SeqKV) -> None:
        self.blocks.release(seq.blocks)
        seq.blocks.clear()

    # ------------------------------------------------------------------ pins

    def pin(self, seq: SeqKV, ids: list[int]) -> Pin:
        """Pin the blocks a finished prefill of `ids` committed (before `release`)."""
        blocks = seq.blocks[:self.blocks_for(len(ids))]
        self.blocks.pin(blocks)
        pin = Pin(tuple(ids), blocks)
        self.pins.append(pin)
        return pin

    def unpin(self, pin: Pin) -> None:
        if pin in self.pins:
            self.pins.remove(pin)
            self.blocks.unpin(pin.blocks)

    def check_pin(self, tokens: int, reserve_tokens: int) -> None:
        """Refuse a pin that would leave less than `reserve_tokens` (one full-length request) of the
        pool for requests, with the numbers."""
        need = self.blocks_for(tokens)
        pinned = self.blocks.pinned_blocks
        room = self.blocks.num_blocks - pinned - self.blocks_for(reserve_tokens)
        if need > room:
            bs = self.block_size
            raise PinTooLarge(
                f"pinning {tokens} tokens needs {need} KV blocks of {bs} tokens, but the pool has "
                f"{self.blocks.num_blocks} blocks ({self.capacity_tokens} tokens): {pinned} are pinned "
                f"already and {self.blocks_for(reserve_tokens)} stay free for one request of max_seq_len "
                f"= {reserve_tokens}; unpin an environment, or build the engine with a larger "
                f"cache (the profile's limits)")

