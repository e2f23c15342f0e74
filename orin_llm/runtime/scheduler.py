"""Which requests run in the next engine step (continuous batching).

Requests wait in arrival order and join the running batch between steps while there is room:
at most `max_running` of them, and KV blocks for their prompt's uncached part (the cache tries
that at admission). Each step, every running request that decodes gets its rows first (one token
plus its draft: a decoding request is never stalled behind a prompt), then the prefilling ones get
one chunk of `prefill_chunk_tokens` prompt tokens each, as long as the step's token budget lasts. A
chunk is never cut to fit the budget: its boundaries depend only on where the request's cached
prefix ended, never on the traffic around it, so its numbers are the same as if it had run alone.
The scheduler changes a request's queue state only; the engine admits, preempts and finishes it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Optional

from .generate import Generation


@dataclass(frozen=True)
class SchedulerConfig:
    max_running: int = 8  # requests in the running batch (limits.max_batch_size)
    max_step_tokens: int = 2048  # rows in one forward (limits.max_num_tokens)
    prefill_chunk_tokens: int = 256  # prompt tokens a request computes per step
    block_size: int = 16  # the KV cache's: prompt chunks end on its block boundaries
    draft_len: int = 4  # a decoding request's step holds up to 1 + 2 * draft_len rows (AdaptiveK's k_max)


class Scheduler:
    def __init__(self, config: SchedulerConfig):
        self.config = config
        self.waiting: deque[Generation] = deque()
        self.running: list[Generation] = []

    def __len__(self) -> int:
        return len(self.waiting) + len(self.running)

    def add(self, gen: Generation, front: bool = False) -> None:
        gen.status = "waiting"
        if front:  # a preempted request goes first when room comes back
            self.waiting.appendleft(gen)
        else:
            self.waiting.append(gen)

    def remove(self, gen: Generation) -> None:
        if gen in self.running:
            self.running.remove(gen)
        elif gen in self.waiting:
            self.waiting.remove(gen)

    def admit(self, try_admit: Callable[[Generation], bool]) -> None:
        """Move waiting requests into the batch, in order, while `try_admit` finds them blocks."""
        while self.waiting and len(self.running) < self.config.max_running:
            if not try_admit(self.waiting[0]):
                break  # first come, first served: the next one waits for the same room
            self.running.append(self.waiting.popleft())

    def prefill_rows(self, gen: Generation) -> int:
        """The next prompt chunk of a prefilling request: up to prefill_chunk_tokens tokens, ending on a
        block boundary (or the prompt's end), so that each block's attention runs whole in one step
        (llama.Item)."""
        start, bs = gen.kv.target.length, self.config.block_size
        end = max(start + bs, (start + self.config.prefill_chunk_tokens) // bs * bs)
        return min(end, gen.prefill_end) - start

    def batch(self) -> list[Generation]:
        """This step's requests: the decoding ones, then prefill chunks while the budget lasts."""
        decoding = [g for g in self.running if not g.prefilling]
        budget = self.config.max_step_tokens - len(decoding) * (1 + 2 * self.config.draft_len)
        chosen = list(decoding)
        for g in self.running:
            if g.prefilling:
                rows = self.prefill_rows(g)
                if rows <= budget or not chosen:  # alone, a chunk always runs
                    chosen.append(g)
                    budget -= rows
        return chosen

    def newest_other(self, gen: Generation) -> Optional[Generation]:
        """The request to preempt when `gen` needs blocks: the most recently admitted other one."""
        for g in reversed(self.running):
            if g is not gen:
                return g
        return None
