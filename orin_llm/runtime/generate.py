"""One request: its prompt, what it has decided so far, and where it stands (nano-vllm's `Sequence`).

A Generation is passive: it holds its state and calls nothing outside itself. The engine
(engine.py) admits, preempts, aborts and finishes it, the scheduler (scheduler.py) queues it and
picks its step's rows, the model runner (model_runner.py) turns it into a forward's rows, and the
decider (decider.py) turns that forward's logits into its tokens and text. The caller reads it:
`take()` the text deltas decided since the last call, `done`, `error`, `result`, `timings`; a caller
that steps the engine itself iterates `engine.deltas(gen)` or calls `engine.run(gen)`.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Optional

import torch

from ..errors import OrinError
from .constraint import Constraint
from .sampling import SamplingParams, make_generator
from .speculative import AdaptiveK, Drafter
from .text import TextStream

if TYPE_CHECKING:
    from .cache import Pin, SeqKV


@dataclass
class Timings:
    """The engine's own figures: ttft and total count from when the engine took the request (its
    admission into the running batch). `queue_s` is the wait before that, from when the request
    began (`Generation.started`: the planner sets it before it renders and tokenizes the prompt, less
    the time a goal "infer" took to read; else when it was submitted). The daemon adds its own queue in
    front of that."""

    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0  # prompt tokens whose K/V came from the cache: not computed here
    computed_prompt_tokens: int = 0  # prompt tokens this request fed through prefill (the engine's count)
    completion_tokens: int = 0
    forced_tokens: int = 0  # completion tokens the grammar forced: emitted without a model step
    mask_s: float = 0.0  # computing the constraint's masks: the grammar's and the state's narrowing
    feasibility_s: float = 0.0  # of which narrowing by the simulated state (planning/feasibility.py)
    masks: int = 0  # masks computed (one per sampled position, verify rows included)
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
            "mask_ms": round(self.mask_s * 1e3, 3),
            "feasibility_ms": round(self.feasibility_s * 1e3, 3),
            "masks": self.masks,
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

    Every field is declared here; the engine's parts change them (module doc), the caller reads them
    and may set `started` before it submits the request. Nothing of the caller rides on it: a plan's
    conversation, world and goal stay with its task (planning/goal_search.py PlanRun).
    """

    def __init__(self, prompt_ids: list[int], params: SamplingParams, tokenizer, eos_ids: set[int],
                 device: torch.device | str = "cpu", drafter: Optional[Drafter] = None,
                 constraint: Optional[Constraint] = None, draft_len: int = 4, draft_len_max: int = 8,
                 prefill_only: bool = False):
        if not prompt_ids:
            raise OrinError("empty prompt")
        self.params = params
        self.prompt_ids = list(prompt_ids)
        self.stream = TextStream(tokenizer, params.stop)
        self.stop_ids = eos_ids | set(params.stop_token_ids)
        self.drafter, self.constraint = drafter, constraint
        self.adapt = AdaptiveK(draft_len, draft_len_max) if drafter else None
        self.prefill_only = prefill_only  # compute the prompt's K/V and stop (pinning a prefix)
        self.sampler = make_generator(params, device)
        # -- the caller's, set before it submits the request
        self.started: Optional[float] = None  # perf_counter() when the request began (else: when submitted)
        self.deadline: Optional[float] = None  # backend.Request.deadline: the engine's steps do not read it
        # -- where it stands (the engine and the scheduler)
        self.status: Literal["new", "waiting", "running", "done"] = "new"
        self.kv: Optional[SeqKV] = None  # its blocks while it is admitted
        self.admitted: Optional[float] = None  # perf_counter() at its first admission
        self.error: Optional[BaseException] = None
        self.pin: Optional[Pin] = None  # the engine's Pin, once a prefill_only request is done
        # -- what it decided (the decider)
        self.context = list(prompt_ids)  # prompt + output: what the model has seen or will see next
        self.out: list[int] = []
        self.finish_reason: Literal["stop", "length"] = "length"
        self.pending: deque[str] = deque()  # text decided and not yet taken
        self.result: Optional[Result] = None
        self.timings = Timings(prompt_tokens=len(self.prompt_ids))
        self.stats = SpecStats(drafter=drafter.name if drafter else "none")
        # -- this step (the model runner sets them, the decider reads them)
        self.prefill_end = len(self.prompt_ids)  # prefill covers the prompt, context[:prefill_end]
        self.step_kind: Literal["prefill", "catch-up", "decode"] = "prefill"
        self.draft: list[int] = []  # the draft this decode step verifies
        self.draft_q: Optional[torch.Tensor] = None  # the draft model's distributions over it
        self.masks: Optional[torch.Tensor] = None  # the grammar's masks over this step's logits rows

    @property
    def cached(self) -> int:
        return self.timings.cached_prompt_tokens

    @property
    def done(self) -> bool:
        return self.status == "done"

    @property
    def report(self) -> dict:
        return {}  # served here, always

    @property
    def prefilling(self) -> bool:
        return self.kv is not None and self.kv.target.length < self.prefill_end

    @property
    def t0(self) -> float:
        """Where its ttft and total count from: its admission (now, if it was never admitted)."""
        return self.admitted if self.admitted is not None else time.perf_counter()

    def take(self) -> list[str]:
        """The text deltas decided since the last call."""
        out = list(self.pending)
        self.pending.clear()
        return out
