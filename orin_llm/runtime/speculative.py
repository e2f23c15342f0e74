"""Speculative decoding: drafters propose, the target verifies k+1 positions in one forward.

Lossless (docs/ARCHITECTURE.md, invariant 1): greedy output equals plain greedy output; sampled output follows
the target's distribution (Leviathan et al. 2022): accept draft token d with min(1, p(d)/q(d)),
else emit a sample of norm(max(0, p − q)); after a full accept, a bonus token from p.

Cache discipline: a cache holds K/V for a prefix of the true context. After verification both
caches are cropped to what is still true, and whatever the context has beyond a cache's length is
fed on the next forward (so the bonus-token step costs the draft nothing extra).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Optional, Protocol

import torch

from .constraint import apply_mask
from .llama import Llama
from .sampling import SamplingParams, probs


class Drafter(Protocol):
    name: str

    def begin(self, context: list[int]) -> None: ...

    def propose(self, context: list[int], k: int, params: SamplingParams,
                gen: Optional[torch.Generator]) -> tuple[list[int], Optional[torch.Tensor]]:
        """Up to k tokens continuing `context`, and the draft's distributions for them
        ([m, vocab]) or None for a deterministic drafter (q is one-hot)."""
        ...

    def rollback(self, valid: int) -> None:
        """Only the first `valid` tokens of the context are known to be right."""
        ...

    def finish(self, output: list[int]) -> None: ...


# ---------------------------------------------------------------- verification


def verify(logits: torch.Tensor, draft: list[int], q: Optional[torch.Tensor], params: SamplingParams,
           gen: Optional[torch.Generator]) -> tuple[int, int]:
    """logits: the target's [m+1, vocab] over [last, d_1..d_m]. Returns (accepted, next token):
    the first `accepted` drafts stand, followed by `next` (a correction, or the bonus)."""
    if params.greedy:
        target = logits.argmax(-1).tolist()
        n = 0
        while n < len(draft) and draft[n] == target[n]:
            n += 1
        return n, target[n]
    p = probs(logits, params)
    for i, d in enumerate(draft):
        q_d = 1.0 if q is None else float(q[i, d])
        u = torch.rand((), generator=gen, device=gen.device if gen is not None else None)  # (gen: the request's device)
        if u.item() * q_d < float(p[i, d]):  # accept w.p. min(1, p/q)
            continue
        residual = p[i].clone()
        if q is None:
            residual[d] = 0.0
        else:
            residual = torch.clamp(residual - q[i], min=0.0)
        if residual.sum() <= 0:  # p == q up to rounding: any sample of p is right
            residual = p[i]
        return i, int(torch.multinomial(residual / residual.sum(), 1, generator=gen))
    return len(draft), int(torch.multinomial(p[len(draft)], 1, generator=gen))


# ---------------------------------------------------------------- drafters


class LookupHistory:
    """Earlier outputs the lookup drafter continues from (plans repeat their shape from call to
    call), shared by every request of an engine: an n-gram index over a bounded token list."""

    def __init__(self, ngrams: tuple[int, ...] = (4, 3, 2), max_tokens: int = 50_000,
                 seed: Sequence[list[int]] = ()):
        self.ngrams, self.max_tokens = ngrams, max_tokens
        self.tokens: list[int] = []
        self.index: dict[tuple[int, ...], int] = {}
        for output in seed:  # earlier outputs it starts with (the engine's lookup_seed.json)
            self.add(list(output))

    def __len__(self) -> int:
        return len(self.tokens)

    def add(self, output: list[int]) -> None:
        if not output:
            return
        if len(self.tokens) + len(output) + 1 > self.max_tokens:
            self.tokens, self.index = [], {}  # simple bound: start over
        start = len(self.tokens)
        self.tokens.extend(output + [-1])  # -1 separates outputs: no match runs across them
        index_ngrams(self.tokens, self.index, start, len(self.tokens), self.ngrams)

    def outputs(self) -> list[list[int]]:
        """The outputs it holds, oldest first (what persisting it stores)."""
        out, cur = [], []
        for t in self.tokens:
            if t < 0:
                out.append(cur)
                cur = []
            else:
                cur.append(t)
        return out


def index_ngrams(seq: list[int], index: dict[tuple[int, ...], int], start: int, end: int,
                 ngrams: tuple[int, ...]) -> None:
    """Register the n-grams ending at positions [start, end): the latest occurrence wins."""
    for i in range(start, end):
        for n in ngrams:
            if i + 1 >= n:
                index[tuple(seq[i + 1 - n:i + 1])] = i


class LookupDrafter:
    """Model-free: continue the longest recent n-gram match, from this request's prompt (the
    environment lists every object and action) and output, or from the engine's history of earlier
    outputs. Costs microseconds per proposal. One per request; the history is shared."""

    name = "lookup"

    def __init__(self, history: Optional[LookupHistory] = None, seed: Sequence[list[int]] = ()):
        self.history = history if history is not None else LookupHistory(seed=seed)
        self.ngrams = self.history.ngrams
        self._ctx_index: dict[tuple[int, ...], int] = {}
        self._indexed = 0

    def begin(self, context: list[int]) -> None:
        self._ctx_index = {}
        self._indexed = 0

    def propose(self, context, k, params, gen):
        # index everything but the last position, so the current suffix never matches itself
        index_ngrams(context, self._ctx_index, self._indexed, len(context) - 1, self.ngrams)
        self._indexed = max(self._indexed, len(context) - 1)
        for n in self.ngrams:
            key = tuple(context[-n:])
            for seq, index in ((context, self._ctx_index), (self.history.tokens, self.history.index)):
                j = index.get(key)
                if j is not None:
                    cont = [t for t in seq[j + 1:j + 1 + k] if t >= 0]
                    if cont:
                        return cont, None
        return [], None

    def rollback(self, valid: int) -> None:
        self._indexed = min(self._indexed, max(0, valid - 1))

    def finish(self, output: list[int]) -> None:
        self.history.add(output)


class DraftModelDrafter:
    """The engine's quantized draft model, on its own K/V for this request (`cache`: a PagedView of
    the draft's pool, or a contiguous KVCache). With a grammar constraint it drafts from the masked
    distribution, so every draft token is one the grammar allows (and q is what it sampled from)."""

    name = "draft_model"

    def __init__(self, model: Llama, cache=None, constraint=None):
        self.model, self.cache, self.constraint = model, cache, constraint  # cache: set at admission

    def begin(self, context: list[int]) -> None:
        pass

    def propose(self, context, k, params, gen):
        device = self.cache.device
        feed = context[self.cache.length:]  # what it has not seen: its catch-up, then the last token
        out: list[int] = []
        dists = []
        c = self.constraint
        for _ in range(k):
            if self.cache.length + len(feed) > self.cache.capacity:
                break
            if c is not None and c.finished:
                break
            logits = self.model(torch.tensor(feed, device=device), self.cache)[-1]
            if c is not None:
                logits = apply_mask(logits, c.allowed())
            if params.greedy:
                tok = int(logits.argmax())
            else:
                dist = probs(logits, params)
                dists.append(dist)
                tok = int(torch.multinomial(dist, 1, generator=gen))
            out.append(tok)
            if c is not None:
                c.accept(tok)
            feed = [tok]
        if c is not None and out:
            c.rollback(len(out))
        return out, (torch.stack(dists) if dists else None)

    def rollback(self, valid: int) -> None:
        self.cache.length = min(self.cache.length, valid)  # later writes overwrite the rest

    def finish(self, output: list[int]) -> None:
        pass


class CombinedDrafter:
    """Lookup when it has a match (free), else the draft model."""

    name = "combined"

    def __init__(self, lookup: LookupDrafter, model: DraftModelDrafter):
        self.lookup, self.model = lookup, model

    def begin(self, context):
        self.lookup.begin(context)
        self.model.begin(context)

    def propose(self, context, k, params, gen):
        draft, q = self.lookup.propose(context, k, params, gen)
        return (draft, q) if draft else self.model.propose(context, k, params, gen)

    def rollback(self, valid):
        self.lookup.rollback(valid)
        self.model.rollback(valid)

    def finish(self, output):
        self.lookup.finish(output)


# ---------------------------------------------------------------- draft length


@dataclass
class AdaptiveK:
    """+2 after a full accept, −1 otherwise, within [1, k_max]. While acceptance (a moving
    average) is too low to pay for the drafting, pause for a few steps and then try again."""

    k: int
    k_max: int
    min_acceptance: float = 0.25
    pause_steps: int = 8
    ema: float = 1.0
    paused: int = 0
    history: list[int] = field(default_factory=list)

    def next_k(self) -> int:
        if self.paused:
            self.paused -= 1
            return 0
        return self.k

    def update(self, drafted: int, accepted: int) -> None:
        if drafted == 0:
            return
        self.k = min(self.k_max, self.k + 2) if accepted == drafted else max(1, self.k - 1)
        self.ema = 0.7 * self.ema + 0.3 * (accepted / drafted)
        if self.ema < self.min_acceptance:
            self.paused, self.ema = self.pause_steps, self.min_acceptance  # probe again afterwards
