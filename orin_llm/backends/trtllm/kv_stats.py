"""The target executor's KV cache as it reports it: its KvCacheStats, read from its iteration stats
(`KvStats`), and the KV figures /health and /metrics show (`kv_usage`). Citations as in
backends/trtllm/engine.py.

0.12's `KvCacheStats.reused_blocks` is cumulative: the BlockManager's `mReusedBlocks` starts at 0 and only
grows, once per block matched when a request is added (loadOrAllocateBlocks in the code index's copy
of kvCacheManager.cpp of that series), and the iteration stats copy it as it is (first open
trtGptModelInflightBatching.cpp, getCurrentIterationStats); get_latest_iteration_stats() returns the
iterations since its last call (J executor.h); docs/trtllm-0.12-jetson.md §4, §7. Its growth over a
request is what the cache served it (backends/trtllm/prefix_reuse.py).

KV figures (`kv_usage`): the target executor's own KvCacheStats as last read from its iteration stats
(max/free/used blocks, reused_blocks), not the plan's budget; the engine's thread reads them
(get_latest_iteration_stats drains them, so only the engine calls it) at most every `STATS_EVERY_S`
while requests run, and a scrape reads the copy.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Optional

from ...manifest import Manifest

log = logging.getLogger(__name__)

STATS_EVERY_S = 0.5  # how often a busy engine refreshes its KV figures from the executor's stats


class KvStats:
    """The target executor's KvCacheStats as last read (module doc)."""

    def __init__(self, executor: Any):
        self.executor = executor
        # The cumulative KvCacheStats.reused_blocks as last read, whether a target request ran since,
        # and whether its iteration stats carry KV stats at all.
        self.reused_blocks = 0
        self.unread = False
        self.available = True
        self.latest: Optional[Any] = None  # the KvCacheStats as last read
        self.read_at = 0.0

    def due(self) -> bool:
        """Whether a busy engine should read them again (STATS_EVERY_S)."""
        return time.monotonic() - self.read_at > STATS_EVERY_S

    def reused(self, read: bool = False) -> Optional[int]:
        """The cumulative KvCacheStats.reused_blocks, read from the iteration stats when a request ran
        since the last read (or `read`); None when the stats carry no KV stats. Reading drains the
        executor's stats: only the engine reads them."""
        if read or self.unread:
            self.unread = False
            self.read_at = time.monotonic()
            # get_latest_iteration_stats() -> list[IterationStats], the iterations since the last call
            # (J executor.h); IterationStats.kv_cache_stats is Optional[KvCacheStats] whose reused_blocks
            # is an int (R≡J bindings.cpp L88-132; tensorrtllm_backend v0.12.0 model.py L893-901 reads them
            # the same way).
            for stats in reversed(list(self.executor.get_latest_iteration_stats())):
                kv = stats.kv_cache_stats
                if kv is None:
                    if self.available:
                        log.warning("TensorRT-LLM iteration stats carry no kv_cache_stats: cached prompt tokens "
                                    "cannot be measured and are reported as 0")
                    self.available = False
                    break
                self.reused_blocks = int(kv.reused_blocks)
                self.latest = kv
                break
        return self.reused_blocks if self.available else None


def kv_usage(manifest: Manifest, kv: Optional[Any], tpb: int, pins: list[tuple[int, ...]], batch: int) -> dict:
    """The target executor's KV pool as its KvCacheStats `kv` last said (module doc): tokens held by
    running requests, the pool's capacity, block counts and the tokens served from stored blocks so far;
    `bytes` is the plan's KV allocation (what KvCacheConfig(max_tokens) sized). Before any stats were
    read, the plan's capacity and no blocks. `tpb`: the engine's tokens per block."""
    plan = manifest.memory_plan or {}
    target = plan.get("target") or {}
    planned = int(target.get("max_kv_tokens") or plan.get("max_kv_tokens") or 0)
    pool = {"blocks": 0, "used": 0, "free": 0, "hit_tokens": 0, "pinned": 0, "cached": 0, "evictions": 0}
    if kv is not None:
        pool.update(blocks=int(kv.max_num_blocks), used=int(kv.used_num_blocks), free=int(kv.free_num_blocks),
                    hit_tokens=int(kv.reused_blocks) * tpb)
    return {"device": "cuda (TensorRT-LLM)", "source": "executor" if kv is not None else "plan",
            "tokens": pool["used"] * tpb, "capacity_tokens": pool["blocks"] * tpb if kv is not None else planned,
            "bytes": int(target.get("kv_bytes") or 0), "pinned_tokens": sum(len(p) for p in set(pins)),
            "pool": pool, "batch": batch}
