"""One request's decode loop, stepped by the engine together with the other requests.

Each engine step asks every running Generation for its rows (`prepare`): a chunk of its prompt
while it prefills, else its last token plus this step's draft. The engine runs all rows in one
forward pass and hands each Generation its logits (`advance`), which picks the tokens (greedy or
sampled, masked by a grammar if it has one), verifies the draft, and streams text through the stop
checks. The uncached part of the prompt is all that is computed: the cache (cache.py) gave the
sequence every token it already held.

Iterating a Generation yields its text deltas, stepping the engine while it waits; a server
worker drives the engine itself and takes the deltas with `take()`.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Optional

import torch

from ..errors import OrinError
from .constraint import Constraint, apply_mask
from .llama import Item
from .sampling import SamplingParams, make_generator
from .speculative import AdaptiveK, Drafter, verify
from .text import TextStream

if TYPE_CHECKING:
    from .cache import SeqKV
    from .engine import Engine


@dataclass
class Timings:
    """The engine's own figures: ttft and total count from when the engine took the request (its
    admission into the running batch). `queue_s` is the wait before that, from when the request
    began (`Generation.started`: the planner sets it before it renders and tokenizes the prompt; else
    when it was submitted). The daemon adds its own queue in front of that."""

    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0  # prompt tokens whose K/V came from the cache: not computed here
    computed_prompt_tokens: int = 0  # prompt tokens this request fed through prefill (the engine's count)
    completion_tokens: int = 0
    forced_tokens: int = 0  # completion tokens the grammar forced: emitted without a model step
    ttft_s: float = 0.0
    total_s: float = 0.0
    queue_s: float = 0.0

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
            "computed_prompt_tokens": self.computed_prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "forced_tokens": self.forced_tokens,
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
    """One request: a prompt in, text deltas out, as the engine steps it with the others.

    With a drafter, each decode step drafts up to k tokens and the target checks them in one
    forward over k+1 positions (runtime/speculative.py); without one, k is 0 and this is plain
    decoding. Either way tokens are emitted one at a time through the same stop checks. With a
    constraint (constraint.py) every token, drafted or sampled, is one the grammar allows.
    """

    def __init__(self, engine: Engine, prompt_ids: list[int], params: SamplingParams,
                 drafter: Optional[Drafter] = None, constraint: Optional[Constraint] = None,
                 draft_len: int = 4, draft_len_max: int = 8, prefill_only: bool = False):
        if not prompt_ids:
            raise OrinError("empty prompt")
        self.engine, self.params = engine, params
        self.prompt_ids = list(prompt_ids)
        self.stream = TextStream(engine.tokenizer, params.stop)
        self.stop_ids = engine.eos_ids | set(params.stop_token_ids)
        self.drafter, self.constraint = drafter, constraint
        self.adapt = AdaptiveK(draft_len, draft_len_max) if drafter else None
        self.prefill_only = prefill_only  # compute the prompt's K/V and stop (pinning a prefix)
        self.pin = None  # the engine's Pin, once a prefill_only request is done
        self.context = list(prompt_ids)  # prompt + output: what the model has seen or will see next
        self.out: list[int] = []
        self.kv: Optional[SeqKV] = None  # set by the engine at admission
        self.status: Literal["new", "waiting", "running", "done"] = "new"
        self.finish_reason: Literal["stop", "length"] = "length"
        self.error: Optional[BaseException] = None
        self.pending: deque[str] = deque()
        self.result: Optional[Result] = None
        self.on_done: Optional[Callable[[], None]] = None  # called once the request is over
        self.started: Optional[float] = None  # perf_counter() when the request began
        self.admitted: Optional[float] = None
        self.timings = Timings(prompt_tokens=len(self.prompt_ids))
        self.stats = SpecStats(drafter=drafter.name if drafter else "none")
        self.sampler = make_generator(params, engine.device)
        self._prefill_end = len(self.prompt_ids)  # prefill covers the prompt, context[:_prefill_end]
        self._draft: list[int] = []
        self._q: Optional[torch.Tensor] = None
        self._masks: Optional[torch.Tensor] = None
        self._kind: Literal["prefill", "catch-up", "decode"] = "prefill"

    @property
    def cached(self) -> int:
        return self.timings.cached_prompt_tokens

    @property
    def done(self) -> bool:
        return self.status == "done"

    @property
    def prefilling(self) -> bool:
        return self.kv is not None and self.kv.target.length < self._prefill_end

    # ------------------------------------------------------------------ the engine's side

    def admitted_with(self, kv: SeqKV) -> None:
        """The engine gave it blocks: `kv.cached` tokens of its context are already computed."""
        self.kv = kv
        if self.admitted is None:  # first admission (a preempted request comes back here too)
            self.admitted = time.perf_counter()
            self.timings.queue_s = self.admitted - (self.started or self.admitted)
            self.timings.cached_prompt_tokens = kv.cached
            if self.drafter:
                self.drafter.begin(self.context)
        self.status = "running"

    def preempted(self) -> None:
        """The engine took its blocks back (pool full). Readmitted, it computes again what it had: the
        prompt as prompt chunks, and the tokens it had emitted as decode rows ("catch-up" steps), each
        as its decode step computed it (exact, row-independent: llama.py), so the K/V it recomputes,
        and the answer, are bit for bit those it would have had without the preemption."""
        self.kv = None
        self.status = "waiting"

    def prefill_rows(self) -> int:
        """The next prompt chunk: up to prefill_chunk_tokens tokens, ending on a block boundary (or the
        prompt's end), so that each block's attention runs whole in one step (llama.Item)."""
        start, bs = self.kv.target.length, self.engine.cache.block_size
        end = max(start + bs, (start + self.engine.prefill_chunk_tokens) // bs * bs)
        return min(end, self._prefill_end) - start

    def prepare(self) -> Item:
        """This step's rows: the next prompt chunk, or the last token(s) plus a draft."""
        kv = self.kv
        start = kv.target.length
        if start < self._prefill_end:
            end = start + self.prefill_rows()
            self.engine.cache.grow(kv, end)
            last = end == self._prefill_end and not self.prefill_only and not self.out
            self._kind = "prefill"
            if end <= len(self.prompt_ids):
                self.timings.computed_prompt_tokens += end - start  # (a preempted request's output: not prompt)
            else:
                self.timings.computed_prompt_tokens += max(0, len(self.prompt_ids) - start)
            # the first token's mask, known now: the head makes the argmax over it exact (llama.Item)
            self._masks = self.constraint.allowed()[None] if last and self.constraint is not None else None
            return Item(self._tensor(self.context[start:end]), kv.target, 1 if last else 0,
                        block=self.engine.cache.block_size, greedy=self.params.greedy, allowed=self._masks)
        behind = len(self.context) - 1 - start  # emitted before a preemption, K/V not computed again yet
        if behind > 0:
            n = min(behind, self.engine.decode_rows)
            self.engine.cache.grow(kv, start + n)
            self._kind = "catch-up"
            return Item(self._tensor(self.context[start:start + n]), kv.target, 0, decode=True)
        draft, q, masks = self._propose()
        feed = self.context[start:] + draft
        self.engine.cache.grow(kv, start + len(feed))
        self._draft, self._q, self._masks = draft, q, masks
        self._kind = "decode"
        return Item(self._tensor(feed), kv.target, len(draft) + 1, decode=True, greedy=self.params.greedy,
                    allowed=masks)

    def _propose(self) -> tuple[list[int], Optional[torch.Tensor], Optional[torch.Tensor]]:
        c, params = self.constraint, self.params
        if not self.drafter or not self.adapt:
            return [], None, (c.masks([]) if c else None)
        # room: max_tokens (the last emitted token is the target's own), the sequence's max length, and
        # the decode step's width (its rows: tokens not yet computed, the draft) that exactness covers
        pending = len(self.context) - self.kv.target.length
        room = min(params.max_tokens - len(self.out) - 1, self.engine.max_seq_len - len(self.context) - 1,
                   self.engine.decode_rows - pending)
        k = min(self.adapt.next_k(), room)
        draft, q = [], None
        if k > 0:
            try:  # the draft model writes K/V up to the draft's end: room in the blocks first
                self.engine.cache.grow(self.kv, len(self.context) + k)
                draft, q = self.drafter.propose(self.context, k, params, self.sampler)
            except OrinError:  # no blocks left for drafting: decode plainly this step
                draft, q = [], None
            draft = draft[:max(0, k)]
        if c is not None and draft:
            draft = draft[:c.valid_prefix(draft)]  # a forbidden token is never verified
        if q is not None:  # the draft model's distributions (masked by the grammar, if any)
            q = q[:len(draft)]
        return draft, q, (c.masks(draft) if c else None)

    def advance(self, logits: torch.Tensor) -> None:
        """Take this step's logits ([num_logits, vocab]) and emit the tokens they decide."""
        if self.status != "running":
            return
        kv = self.kv
        if self._kind == "catch-up":
            return  # tokens it had emitted: nothing new to decide
        if self._kind == "prefill":
            if kv.target.length < self._prefill_end or self.out:
                return  # more chunks to come, or (readmitted) its first token is out already
            if self.prefill_only:
                self._finish("stop")
                return
            row = logits[-1:]  # the last prompt token's logits: the first new token
            if self.constraint is not None:
                row = apply_mask(row, self._masks)
            self._masks = None
            self._emit([verify(row, [], None, self.params, self.sampler)[1]])
            return
        draft = self._draft
        base = kv.target.length - len(draft)  # = len(context): the model appended feed's K/V
        rows = logits if self._masks is None else apply_mask(logits, self._masks)
        n, nxt = verify(rows, draft, self._q, self.params, self.sampler)
        kv.target.length = base + n  # the rejected drafts' K/V are overwritten later
        if self.drafter:
            self.drafter.rollback(base + n)
            self.adapt.update(len(draft), n)
        self.stats.drafted += len(draft)
        self.stats.accepted += n
        self.stats.steps += 1
        self._draft, self._q, self._masks = [], None, None
        self._emit(draft[:n] + [nxt])

    def _emit(self, tokens: list[int]) -> None:
        for tok in tokens:
            if self._take(tok):
                return
        c = self.constraint
        while c is not None and self.status == "running":  # jump-forward: tokens the grammar forces
            if len(self.context) - self.kv.target.length >= self.engine.decode_rows:
                break  # the next step is full: its logits force the rest (one allowed token)
            tok = c.forced()
            if tok is None:
                break
            self.timings.forced_tokens += 1
            if self._take(tok):
                return

    def _take(self, tok: int) -> bool:
        """One decided token through the stop checks; True when the request is over."""
        if not self.out:
            self.timings.ttft_s = time.perf_counter() - self._t0
        if tok in self.stop_ids:
            self._finish("stop")
            return True
        self.out.append(tok)
        self.context.append(tok)
        if self.constraint is not None:
            self.constraint.accept(tok)
        delta, stopped = self.stream.push(tok)
        if delta:
            self.pending.append(delta)
        if stopped:
            self._finish("stop")
            return True
        if len(self.out) >= self.params.max_tokens or len(self.context) >= self.engine.max_seq_len:
            self._finish("length")
            return True
        return False

    def _finish(self, reason: Literal["stop", "length"]) -> None:
        self.finish_reason = reason
        tail = self.stream.flush()
        if tail:
            self.pending.append(tail)
        self.status = "done"

    def _tensor(self, ids: list[int]) -> torch.Tensor:
        return torch.tensor(ids, dtype=torch.long, device=self.engine.device)

    @property
    def _t0(self) -> float:
        return self.admitted if self.admitted is not None else time.perf_counter()

    def close_out(self) -> None:
        """Build the result (a finished request) and tell whoever waits; the engine calls it once
        the request's blocks are back in the cache."""
        if self.drafter:
            self.drafter.finish(self.out)
        t = self.timings
        t.completion_tokens = len(self.out)
        t.total_s = time.perf_counter() - self._t0
        if self.error is None and self.status == "done":
            self.result = Result(self.stream.text, self.out, self.finish_reason, t, self.stats)
        if self.on_done is not None:
            self.on_done()

    # ------------------------------------------------------------------ the caller's side

    def take(self) -> list[str]:
        """The text deltas decided since the last call."""
        out = list(self.pending)
        self.pending.clear()
        return out

    def __iter__(self) -> Iterator[str]:
        engine = self.engine
        if self.status == "new":
            engine.submit(self)
        try:
            while True:
                while self.pending:
                    yield self.pending.popleft()
                if self.status == "done":
                    break
                if self.error is not None:
                    raise self.error
                engine.step()
            if self.error is not None:
                raise self.error
        finally:
            if self.status != "done" or self.kv is not None:
                engine.abort(self)  # closed early (a client that went away): its blocks go back

    def run(self) -> Result:
        for _ in self:
            pass
        assert self.result is not None
        return self.result
