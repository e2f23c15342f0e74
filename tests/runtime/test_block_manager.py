"""The block manager alone (no model): sharing by hash chain, whole blocks only, LRU eviction of
what nobody holds, pins never evicted, and a full pool refused with the numbers."""

import pytest

from orin_llm.runtime.block_manager import ROOT, BlockManager, NoBlocks

BS = 4


def run(bm: BlockManager, tokens: list[int]) -> list[int]:
    """A sequence as the cache runs one: share what matches, allocate the rest, commit full blocks,
    release at the end. Returns its block ids."""
    m = bm.match(tokens)
    bm.acquire(m.shared)
    need = -(-len(tokens) // BS) - len(m.shared)
    ids = m.shared + bm.allocate(need)
    parent = ROOT
    for i, bid in enumerate(ids):
        chunk = tuple(tokens[i * BS:(i + 1) * BS])
        if len(chunk) == BS:
            parent = bm.commit(bid, parent, chunk)
    bm.release(ids)
    return ids


def test_a_prefix_is_shared_by_whole_blocks_and_its_chain():
    bm = BlockManager(8, BS)
    first = run(bm, list(range(10)))  # 2 full blocks + a partial one
    assert bm.match(list(range(10))).tokens(BS) == 8  # the partial block is never shared
    assert bm.match(list(range(8)) + [99, 98, 97, 96]).shared == first[:2]
    # the same tokens after another first block are another chain: no match past the first block
    assert bm.match([50, 51, 52, 53] + list(range(4, 8))).shared == []
    assert bm.match(list(range(3))).shared == []  # under one block


def test_lru_evicts_the_oldest_unheld_block_first():
    bm = BlockManager(4, BS)
    a = run(bm, [1] * 4)
    b = run(bm, [2] * 4)
    run(bm, [1] * 4)  # a is used again: b is now the oldest
    assert bm.stats()["cached"] == 2
    held = bm.allocate(3)  # 2 blank, then one eviction: b's block
    assert b[0] in held and a[0] not in held and bm.evictions == 1
    assert bm.match([2] * 4).shared == [] and bm.match([1] * 4).shared == a


def test_pinned_blocks_are_never_evicted_and_a_full_pool_says_so():
    bm = BlockManager(3, BS)
    home = run(bm, [7] * 8)
    bm.pin(home)
    run(bm, [3] * 4)
    assert bm.allocate(1)  # the [3] block goes; the pinned two stay
    with pytest.raises(NoBlocks, match="the KV pool has 0 of 3 blocks free or evictable, 1 needed"):
        bm.allocate(1)
    assert bm.match([7] * 8).shared == home and bm.stats()["pinned"] == 2
    bm.unpin(home)  # unpinned, they are cached: evictable again, still shareable until then
    assert bm.available == 2 and bm.match([7] * 8).shared == home


def test_bookkeeping_errors_are_loud():
    bm = BlockManager(2, BS)
    (bid,) = bm.allocate(1)
    bm.commit(bid, ROOT, (1, 2, 3, 4))
    with pytest.raises(RuntimeError, match="committed with other tokens"):
        bm.commit(bid, ROOT, (4, 3, 2, 1))
    with pytest.raises(ValueError, match="only full blocks"):
        bm.commit(bid, ROOT, (1, 2))
    bm.release([bid])
    with pytest.raises(RuntimeError, match="released more often than held"):
        bm.release([bid])
    assert bm.evict_all() == 1 and bm.match([1, 2, 3, 4]).shared == []
