"""The decode loop: prefill the uncached suffix, then one token per step, streamed as text.

The cache may already hold a prefix (the pinned environment); only what follows it is
computed. At the end the cache is cropped back to where it started, so the prefix stays.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal, Optional

import torch

from ..errors import OrinError
from .kv_cache import KVCache
from .llama import Llama
from .sampling import SamplingParams, make_generator, sample
from .speculative import AdaptiveK, Drafter, verify
from .text import TextStream


@dataclass
class Timings:
    """ttft and total count from when the request began: `Generation.started` when the caller sets
    it (the planner does, before it renders and tokenizes the prompt), else the first iteration.

    cached_prompt_tokens counts only prompt tokens this request did not compute. When the planner had
    to prefill the environment's prefix again inside the request (another prompt had evicted it),
    those tokens are prefill: repinned_prefix_tokens says how many, and none of them is cached."""

    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    completion_tokens: int = 0
    ttft_s: float = 0.0
    total_s: float = 0.0
    repinned_prefix_tokens: int = 0

    @classmethod
    def begin(cls, prompt_tokens: int, cached: int, repinned: int) -> Timings:
        """cached: prompt tokens in the cache when decoding began; repinned: prefix tokens prefilled
        for this request before that (Generation.repinned), so not cached."""
        return cls(prompt_tokens=prompt_tokens, cached_prompt_tokens=0 if repinned else cached,
                   repinned_prefix_tokens=repinned)

    @property
    def decode_tokens_per_s(self) -> float:
        decode_s = self.total_s - self.ttft_s
        return (self.completion_tokens - 1) / decode_s if self.completion_tokens > 1 and decode_s > 0 else 0.0

    def as_dict(self) -> dict:
        return {
            "ttft_ms": round(self.ttft_s * 1e3, 3),
            "total_ms": round(self.total_s * 1e3, 3),
            "decode_tokens_per_s": round(self.decode_tokens_per_s, 2),
            "prompt_tokens": self.prompt_tokens,
            "cached_prompt_tokens": self.cached_prompt_tokens,
            "repinned_prefix_tokens": self.repinned_prefix_tokens,
            "completion_tokens": self.completion_tokens,
        }


@dataclass
class SpecStats:
    """Speculative decoding counters for one request (drafter "none": plain decoding)."""

    drafter: str = "none"
    drafted: int = 0  # draft tokens proposed
    accepted: int = 0  # draft tokens the target agreed with
    steps: int = 0  # target forward passes in the decode phase

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_accepted_length(self) -> float:
        """Tokens emitted per target step (accepted drafts + the target's own token)."""
        return (self.accepted + self.steps) / self.steps if self.steps else 0.0

    def as_dict(self) -> dict:
        return {"drafter": self.drafter, "drafted": self.drafted, "accepted": self.accepted,
                "acceptance_rate": round(self.acceptance_rate, 4),
                "mean_accepted_length": round(self.mean_accepted_length, 3)}


@dataclass
class Result:
    text: str
    token_ids: list[int]
    finish_reason: Literal["stop", "length"]
    timings: Timings
    speculation: SpecStats


class Generation:
    """Iterate for text deltas as they are decided; `.result` once exhausted.

    With a drafter, each decode step drafts up to k tokens and the target checks them in one
    forward over k+1 positions (runtime/speculative.py); without one, k is 0 and this is plain
    decoding. Either way tokens are emitted one at a time through the same stop checks.
    """

    def __init__(self, model: Llama, cache: KVCache, stream: TextStream, prompt_ids: list[int],
                 params: SamplingParams, eos_ids: set[int], cached: int = 0,
                 on_done: Optional[Callable[[], None]] = None, drafter: Optional[Drafter] = None,
                 draft_len: int = 4, draft_len_max: int = 8):
        if not prompt_ids:
            raise OrinError("empty prompt")
        if cached >= len(prompt_ids):
            raise OrinError("the prompt must extend past the cached prefix by at least one token")
        self.model, self.cache, self.stream, self.params = model, cache, stream, params
        self.prompt_ids, self.cached = prompt_ids, cached
        self.stop_ids = eos_ids | set(params.stop_token_ids)
        self.drafter, self.draft_len, self.draft_len_max = drafter, draft_len, draft_len_max
        self.result: Optional[Result] = None
        self.on_done = on_done  # called once the cache is back to its prefix (done or abandoned)
        self.started: Optional[float] = None  # perf_counter() when the request began, if before __iter__
        self.repinned = 0  # prefix tokens the planner prefilled again for this request (Timings.begin)

    def __iter__(self) -> Iterator[str]:
        params, cache, model, drafter = self.params, self.cache, self.model, self.drafter
        t0 = time.perf_counter() if self.started is None else self.started
        start = cache.length
        if start != self.cached:
            raise RuntimeError(f"cache holds {start} tokens, caller says {self.cached} are cached")
        timings = Timings.begin(len(self.prompt_ids), self.cached, self.repinned)
        stats = SpecStats(drafter=drafter.name if drafter else "none")
        adapt = AdaptiveK(self.draft_len, self.draft_len_max) if drafter else None
        device = model.embed_tokens.weight.device
        gen = make_generator(params, device)
        context = list(self.prompt_ids)
        out: list[int] = []
        finish: Literal["stop", "length"] = "length"
        try:
            if drafter:
                drafter.begin(context)
            logits = model(torch.tensor(context[start:], device=device), cache)  # prefill the suffix
            new = [sample(logits, params, gen)]
            while True:
                done = False
                for tok in new:
                    if not out:
                        timings.ttft_s = time.perf_counter() - t0
                    if tok in self.stop_ids:
                        finish, done = "stop", True
                        break
                    out.append(tok)
                    context.append(tok)
                    delta, stopped = self.stream.push(tok)
                    if delta:
                        yield delta
                    if stopped:
                        finish, done = "stop", True
                        break
                    if len(out) >= params.max_tokens:
                        done = True
                        break
                if done:
                    break
                # cache holds context[:-1]; feed the last token plus this step's drafts
                room = min(params.max_tokens - len(out) - 1, cache.capacity - len(context) - 1)
                k = min(adapt.next_k(), room) if adapt else 0
                draft, q = drafter.propose(context, k, params, gen) if drafter and k > 0 else ([], None)
                draft = draft[:max(0, k)]
                if q is not None:
                    q = q[:len(draft)]
                feed = context[cache.length:] + draft
                logits = model(torch.tensor(feed, device=device), cache, num_logits=len(draft) + 1)
                n, nxt = verify(logits, draft, q, params, gen)
                cache.crop(len(context) + n)  # drop rejected positions: no copy, later writes overwrite
                if drafter:
                    drafter.rollback(len(context) + n)
                    adapt.update(len(draft), n)
                stats.drafted += len(draft)
                stats.accepted += n
                stats.steps += 1
                new = draft[:n] + [nxt]
            tail = self.stream.flush()
            if tail:
                yield tail
        finally:
            cache.crop(start)  # keep the prefix, drop this request's tokens (even on cancel)
            if drafter:
                drafter.rollback(start)
                drafter.finish(out)
            if self.on_done is not None:
                self.on_done()
        timings.completion_tokens = len(out)
        timings.total_s = time.perf_counter() - t0
        self.result = Result(self.stream.text, out, finish, timings, stats)

    def run(self) -> Result:
        for _ in self:
            pass
        assert self.result is not None
        return self.result
