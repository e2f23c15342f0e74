"""Which drafter a request gets: the speculation modes an engine offers, what "auto" means, and the
draft model's view of a request's K/V."""

from __future__ import annotations

from collections.abc import Callable
from typing import Optional

from ..errors import OrinError
from .constraint import Constraint
from .sampling import SamplingParams
from .speculative import CombinedDrafter, DraftModelDrafter, LookupDrafter

DEFAULT_HISTORY = "chat"  # the lookup history of requests that name none (chat completions)

# What "auto" means. Measured on the embedded default on CPU (docs/BENCHMARKS.md): the model-free
# lookup drafter gives the decode speedup; a same-size INT8 draft costs about as much as the target.
AUTO_SPECULATION = "lookup"


def choose_drafter(speculation: str, params: SamplingParams, modes: list[str], engine_name: str,
                   history_of: Callable, load_draft: Callable, constraint: Optional[Constraint] = None,
                   history: str = DEFAULT_HISTORY):
    """The drafter a request asked for; unavailable ones are an error, never plain decoding.
    "auto" decodes sampled requests plainly: with a drafter, the random stream is consumed
    differently as the lookup history grows, so a seed would not reproduce its output (the
    distribution is right either way; an explicit drafter is honoured)."""
    if speculation not in modes:
        raise OrinError(f"speculation {speculation!r} is not available in engine {engine_name!r} "
                        f"(available: {', '.join(modes)})")
    if speculation == "auto" and not params.greedy:
        return None
    mode = AUTO_SPECULATION if speculation == "auto" else speculation
    if mode == "none":
        return None
    if mode == "lookup":
        return LookupDrafter(history_of(history))
    model = DraftModelDrafter(load_draft(), constraint=constraint)
    return model if mode == "draft_model" else CombinedDrafter(LookupDrafter(history_of(history)), model)


def attach_cache(drafter, view) -> None:
    """Give a draft-model drafter (alone or inside a combined one) the request's draft K/V."""
    for d in (drafter, getattr(drafter, "model", None)):
        if isinstance(d, DraftModelDrafter):
            d.cache = view
