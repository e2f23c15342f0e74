"""KV blocks: who holds which block, which blocks hold which tokens, and what to evict.

The KV pool (kv_pool.py) is cut into blocks of `block_size` token slots. A full block is
*committed* once its tokens' K/V are computed: it is then keyed by its tokens and the key of the
block before it (a hash chain, so a key stands for everything before it too, as in vLLM's
automatic prefix caching). A new sequence reuses, by reference, the longest chain of committed
blocks that its tokens start with. Only whole blocks are shared: a partly filled block is
recomputed by the next sequence (at most block_size - 1 tokens, about the cost of one row), which
keeps every shared block's K/V exactly what the sequence would have computed itself (llama.Item).

Reference counts decide the rest: a running sequence and a pin each hold a reference on the
blocks they use; a committed block that nobody holds stays in the cache and is evicted least
recently used when a new block is needed. A pinned block is never evicted.

Pure bookkeeping: no tensors here.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Optional

from ..errors import OrinError

ROOT = 0x6F72696E  # the parent key of a sequence's first block


class NoBlocks(OrinError):
    """The pool has no free or evictable block left for a request."""


@dataclass
class Block:
    id: int
    ref: int = 0  # running sequences and pins holding it
    key: Optional[int] = None  # set once committed: hash(parent key, tokens)
    tokens: tuple[int, ...] = ()  # the committed tokens
    draft: bool = False  # the draft model's K/V for these tokens is in the pool too
    pins: int = 0


@dataclass
class Match:
    """What a token sequence finds in the cache: committed blocks to share, in order."""

    shared: list[int] = field(default_factory=list)
    parent: int = ROOT  # key of the last shared block

    def tokens(self, block_size: int) -> int:
        return len(self.shared) * block_size


def block_key(parent: int, tokens: tuple[int, ...]) -> int:
    return hash((parent, tokens))


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int):
        if num_blocks < 1 or block_size < 1:
            raise ValueError("num_blocks and block_size must be positive")
        self.block_size = block_size
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.free: list[int] = list(range(num_blocks - 1, -1, -1))  # blank; pop() takes the lowest id
        self.lru: OrderedDict[int, None] = OrderedDict()  # committed, ref 0: evictable, oldest first
        self.full: dict[int, int] = {}  # key -> block id of a committed block
        self.evictions = 0

    # ------------------------------------------------------------------ state

    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    @property
    def available(self) -> int:
        """Blocks a request can get now: blank ones plus evictable cached ones."""
        return len(self.free) + len(self.lru)

    def stats(self) -> dict[str, int]:
        pinned = sum(1 for b in self.blocks if b.pins)
        used = sum(1 for b in self.blocks if b.ref)
        return {"blocks": self.num_blocks, "block_size": self.block_size, "used": used, "pinned": pinned,
                "cached": len(self.lru), "free": len(self.free), "evictions": self.evictions}

    # ------------------------------------------------------------------ lookup

    def match(self, tokens: list[int], limit: Optional[int] = None) -> Match:
        """The longest cached prefix of `tokens[:limit]`, in whole blocks."""
        n = len(tokens) if limit is None else min(limit, len(tokens))
        bs, m = self.block_size, Match()
        while (len(m.shared) + 1) * bs <= n:
            start = len(m.shared) * bs
            chunk = tuple(tokens[start:start + bs])
            key = block_key(m.parent, chunk)
            bid = self.full.get(key)
            if bid is None or self.blocks[bid].tokens != chunk:  # (a hash collision is a miss)
                break
            m.shared.append(bid)
            m.parent = key
        return m

    # ------------------------------------------------------------------ references

    def allocate(self, n: int) -> list[int]:
        """n blocks for a sequence to write into (ref 1 each): blank ones first, then evicted ones."""
        if n > self.available:
            raise NoBlocks(f"the KV pool has {self.available} of {self.num_blocks} blocks free or evictable, "
                           f"{n} needed")
        out = []
        for _ in range(n):
            if self.free:
                bid = self.free.pop()
            else:
                bid, _ = self.lru.popitem(last=False)
                self._forget(bid)
                self.evictions += 1
            self.blocks[bid].ref = 1
            out.append(bid)
        return out

    def acquire(self, ids: list[int]) -> None:
        for bid in ids:
            b = self.blocks[bid]
            if b.ref == 0:
                self.lru.pop(bid, None)
            b.ref += 1

    def release(self, ids: list[int]) -> None:
        """Drop one reference each; a block nobody holds is cached (committed) or blank again."""
        for bid in ids:
            b = self.blocks[bid]
            if b.ref <= 0:
                raise RuntimeError(f"block {bid} released more often than held")
            b.ref -= 1
            if b.ref == 0:
                if b.key is not None:
                    self.lru[bid] = None  # most recently used at the end
                else:
                    self.free.append(bid)

    def evict_all(self) -> int:
        """Forget every cached block nobody holds; returns how many."""
        n = len(self.lru)
        while self.lru:
            bid, _ = self.lru.popitem(last=False)
            self._forget(bid)
            self.free.append(bid)
        return n

    # ------------------------------------------------------------------ content

    def commit(self, bid: int, parent: int, tokens: tuple[int, ...], draft: bool = False) -> int:
        """Record that block `bid` holds the K/V of `tokens` (a full block) after the chain `parent`;
        returns its key. From now on other sequences can share it."""
        if len(tokens) != self.block_size:
            raise ValueError(f"only full blocks ({self.block_size} tokens) are committed, not {len(tokens)}")
        b = self.blocks[bid]
        key = block_key(parent, tokens)
        if b.key is not None:
            if b.key != key or b.tokens != tokens:
                raise RuntimeError(f"block {bid} is committed with other tokens")
            b.draft = b.draft or draft
            return key
        b.key, b.tokens, b.draft = key, tokens, draft
        self.full.setdefault(key, bid)  # computed twice (two requests at once): the first one serves
        return key

    def mark_draft(self, bid: int) -> None:
        self.blocks[bid].draft = True

    def _forget(self, bid: int) -> None:
        b = self.blocks[bid]
        if b.key is not None and self.full.get(b.key) == bid:
            del self.full[b.key]
        b.key, b.tokens, b.draft = None, (), False

    # ------------------------------------------------------------------ pins

    def pin(self, ids: list[int]) -> None:
        self.acquire(ids)
        for bid in ids:
            self.blocks[bid].pins += 1

    def unpin(self, ids: list[int]) -> None:
        for bid in ids:
            self.blocks[bid].pins -= 1
        self.release(ids)

    @property
    def pinned_blocks(self) -> int:
        return sum(1 for b in self.blocks if b.pins)

