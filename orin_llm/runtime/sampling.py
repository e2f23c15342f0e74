"""Token choice from logits: greedy, or temperature + top-p with a seeded generator."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import torch

from ..errors import OrinError


@dataclass
class SamplingParams:
    max_tokens: int = 256
    temperature: float = 0.0  # 0 → greedy
    top_p: float = 1.0
    seed: Optional[int] = None
    stop: list[str] = field(default_factory=list)  # stop strings: the text ends before them
    stop_token_ids: list[int] = field(default_factory=list)  # added to the model's EOS ids

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise OrinError(f"max_tokens must be ≥ 1, got {self.max_tokens}")
        if self.temperature < 0:
            raise OrinError(f"temperature must be ≥ 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise OrinError(f"top_p must be in (0, 1], got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def make_generator(params: SamplingParams, device: torch.device | str = "cpu") -> Optional[torch.Generator]:
    if params.greedy:
        return None
    g = torch.Generator(device=device)
    g.manual_seed(params.seed if params.seed is not None else int(torch.seed() % (2**63)))
    return g


def probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """The distribution we sample from, after temperature and top-p: [..., vocab], float32.

    Speculative verification compares these, so draft and target must go through here."""
    p = torch.softmax(logits.float() / params.temperature, dim=-1)
    if params.top_p < 1.0:
        sorted_p, idx = p.sort(dim=-1, descending=True)
        # keep the smallest set whose mass reaches top_p (the top token always stays)
        drop = sorted_p.cumsum(-1) - sorted_p >= params.top_p
        sorted_p = sorted_p.masked_fill(drop, 0.0)
        p = torch.zeros_like(p).scatter(-1, idx, sorted_p)
        p = p / p.sum(-1, keepdim=True)
    return p


def sample(logits: torch.Tensor, params: SamplingParams, gen: Optional[torch.Generator]) -> int:
    """One token from the last logits row."""
    if params.greedy:
        return int(logits[-1].argmax())
    return int(torch.multinomial(probs(logits[-1], params), 1, generator=gen))
