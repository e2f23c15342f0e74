"""Prefix reuse on TensorRT-LLM 0.12: the pin request that stores a prefix's KV blocks (`TrtllmPin`), and
the measurement of what the cache really served a request (`CachedTokens`). Citations as in
backends/trtllm/engine.py.

`pin(ids)` runs the prefix once (max_new_tokens=1) so its KV blocks are stored; a later prompt that starts
with the same tokens reuses them, in whole blocks of `tokens_per_block` (the engine's `--tokens_per_block`,
build/trtllm.py), never its last token. The engine's `cached_prefix()` is what the pinned prefix *can*
serve. What a request was really served is measured: `cached_prompt_tokens` is the growth of the target
executor's `KvCacheStats.reused_blocks` (a cumulative counter: backends/trtllm/kv_stats.py) over the request
× tokens_per_block (capped at the prompt length − 1), when no other target request was enqueued meanwhile
(else what the pins can serve). Without reuse nothing is stored and every request prefills its whole
prompt.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Optional

from ...runtime.generate import Timings
from .responses import follow
from .stepped import EngineView, Stepped


class TrtllmPin(Stepped):
    """A pin request: runs the prefix once on each engine (max_new_tokens=1, the draft re-reads the
    context every step too) so that its KV blocks are stored for reuse (this module's doc:
    whole blocks only), then records it in the engine's `pins`; its `pin` is the handle `unpin` takes.
    Without block reuse there is nothing to keep: the ids are only recorded."""

    def __init__(self, engine: EngineView, ids: list[int]):
        super().__init__(engine, ids)
        self.timings = Timings(prompt_tokens=len(self.prompt_ids), computed_prompt_tokens=len(self.prompt_ids))

    def _steps(self) -> Iterator[str]:
        engine, ids = self.engine, self.prompt_ids
        t0 = self.started if self.started is not None else time.perf_counter()
        if ids and engine.block_reuse:
            for executor in engine.executors:
                request = engine.request(ids, 1, streaming=False, sampling=engine.greedy_config())
                for _ in follow(engine.mailbox(executor), engine.enqueue(executor, request)):
                    pass
                yield ""
        self.pin = tuple(ids)
        engine.pins.append(self.pin)
        self.timings.total_s = time.perf_counter() - t0


class CachedTokens:
    """What the cache served a generation's prompt, measured around its first target request (module doc)."""

    def __init__(self, engine: EngineView, prompt_ids: list[int], timings: Timings):
        self.engine, self.prompt_ids, self.timings = engine, prompt_ids, timings
        self.measured = False
        self._reused_before: Optional[int] = None  # the target's reused_blocks before the first request
        self._enqueues_before = 0

    def before(self) -> None:
        """The counters before the generation's first target request is enqueued."""
        engine = self.engine
        if engine.block_reuse:
            self._reused_before = engine.reused_blocks()
            self._enqueues_before = engine.target_enqueues

    def measure(self) -> None:
        """timings.cached_prompt_tokens = the blocks the target reused for the first request, in tokens
        (module doc): the growth of the executor's cumulative counter, which belongs to this
        request only when no other target request was enqueued meanwhile. When others were (requests
        batched in flight), it is what the pinned prefixes can serve (engine.cached_prefix), the figure
        a pinned home is planned for. A matched block counts whole even when it is a stored partial
        block, so the figure is capped at the prompt length - 1: the last prompt token is never served
        from the cache."""
        self.measured = True
        engine = self.engine
        if not engine.block_reuse or self._reused_before is None:
            return
        after = engine.reused_blocks(read=True)
        if after is None:
            return
        alone = engine.target_enqueues == self._enqueues_before + 1
        if alone:
            cached = max(0, after - self._reused_before) * engine.tokens_per_block
        else:
            cached = engine.cached_prefix(self.prompt_ids)
        self.timings.cached_prompt_tokens = min(cached, len(self.prompt_ids) - 1)
        # the executor computes the rest of the prompt (its own prefill; no per-chunk count at 0.12)
        self.timings.computed_prompt_tokens = len(self.prompt_ids) - self.timings.cached_prompt_tokens
