"""A step's logits into a request's tokens: pick them (greedy or sampled, masked by the request's
grammar if it has one), verify its draft, and stream them through the stop checks into its text.
What the rows were is on the request (the model runner recorded it: model_runner.py)."""

from __future__ import annotations

import time
from typing import Literal

import torch

from .constraint import apply_mask
from .generate import Generation, Result
from .speculative import verify


class Decider:
    def __init__(self, decode_rows: int, max_seq_len: int):
        """decode_rows: rows of one decode step (forced tokens stop filling it there); max_seq_len: a
        request's context ends there ("length")."""
        self.decode_rows, self.max_seq_len = decode_rows, max_seq_len

    def advance(self, gen: Generation, logits: torch.Tensor) -> None:
        """Take this step's logits ([num_logits, vocab]) and emit the tokens they decide."""
        if gen.status != "running":
            return
        kv = gen.kv
        if gen.step_kind == "catch-up":
            return  # tokens it had emitted: nothing new to decide
        if gen.step_kind == "prefill":
            if kv.target.length < gen.prefill_end or gen.out:
                return  # more chunks to come, or (readmitted) its first token is out already
            if gen.prefill_only:
                self._finish(gen, "stop")
                return
            row = logits[-1:]  # the last prompt token's logits: the first new token
            if gen.constraint is not None:
                row = apply_mask(row, gen.masks)
            gen.masks = None
            self._emit(gen, [verify(row, [], None, gen.params, gen.sampler)[1]])
            return
        draft = gen.draft
        base = kv.target.length - len(draft)  # = len(context): the model appended feed's K/V
        rows = logits if gen.masks is None else apply_mask(logits, gen.masks)
        n, nxt = verify(rows, draft, gen.draft_q, gen.params, gen.sampler)
        kv.target.length = base + n  # the rejected drafts' K/V are overwritten later
        if gen.drafter:
            gen.drafter.rollback(base + n)
            gen.adapt.update(len(draft), n)
        gen.stats.drafted += len(draft)
        gen.stats.accepted += n
        gen.stats.steps += 1
        gen.draft, gen.draft_q, gen.masks = [], None, None
        self._emit(gen, draft[:n] + [nxt])

    def _emit(self, gen: Generation, tokens: list[int]) -> None:
        for tok in tokens:
            if self._take(gen, tok):
                return
        c = gen.constraint
        while c is not None and gen.status == "running":  # jump-forward: tokens the grammar forces
            if len(gen.context) - gen.kv.target.length >= self.decode_rows:
                break  # the next step is full: its logits force the rest (one allowed token)
            tok = c.forced()
            if tok is None:
                break
            gen.timings.forced_tokens += 1
            if self._take(gen, tok):
                return

    def _take(self, gen: Generation, tok: int) -> bool:
        """One decided token through the stop checks; True when the request is over."""
        if not gen.out:
            gen.timings.ttft_s = time.perf_counter() - gen.t0
        if tok in gen.stop_ids:
            self._finish(gen, "stop")
            return True
        gen.out.append(tok)
        gen.context.append(tok)
        if gen.constraint is not None:
            gen.constraint.accept(tok)
        delta, stopped = gen.stream.push(tok)
        if delta:
            gen.pending.append(delta)
        if stopped:
            self._finish(gen, "stop")
            return True
        if len(gen.out) >= gen.params.max_tokens or len(gen.context) >= self.max_seq_len:
            self._finish(gen, "length")
            return True
        return False

    @staticmethod
    def _finish(gen: Generation, reason: Literal["stop", "length"]) -> None:
        gen.finish_reason = reason
        tail = gen.stream.flush()
        if tail:
            gen.pending.append(tail)
        gen.status = "done"

    @staticmethod
    def close_out(gen: Generation) -> None:
        """Build the result of a request that is over (done, failed or aborted) and tell whoever waits;
        the engine calls it once the request's blocks are back in the cache."""
        if gen.drafter:
            gen.drafter.finish(gen.out)
        t = gen.timings
        t.completion_tokens = len(gen.out)
        c = gen.constraint
        if c is not None:
            t.feasibility_s = getattr(c, "narrow_s", 0.0)
            t.mask_s, t.masks = c.mask_s + t.feasibility_s, c.masks_computed
        t.total_s = time.perf_counter() - gen.t0
        if gen.error is None and gen.status == "done":
            gen.result = Result(gen.stream.text, gen.out, gen.finish_reason, t, gen.stats)
