"""The home's state over time, on the planner's side: rendered after the static pinned prefix, at the
head of the task's turn, so that a state change computes only the state's tokens.

A `StatePart` is one state rendered there: the chat text from the prefix's end through the state's
lines (the user turn's head included) and its ids. A plan's ids are the prefix's ids, the part's,
then the rest encoded (never the joined text re-tokenized), so they meet the blocks the state's pin
holds. `StateChange` is what Planner.set_state answers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from .home import task_message
from .home.render import state_text
from .home.state import HomeState


@dataclass(frozen=True)
class StatePart:
    """A state rendered after the static prefix: the chat text from the prefix's end up to the task
    (the user turn's head and the state's lines) and its ids, which follow the prefix's ids."""

    state: HomeState
    text: str
    ids: tuple[int, ...]


@dataclass
class StateChange:
    """What set_state did: the new state, the home's version, and the request (a pin of the prefix and
    the state's tokens) that computes the state's part, in the task that keeps its pin; None when the
    home renders no state."""

    state: HomeState
    version: int
    generation: Optional[Any] = None
    state_version: int = 0
    task: Optional[Any] = None  # runtime/tasks.py Task: the pin request, then the pin kept

    @property
    def computed_tokens(self) -> int:
        """Tokens the state change computed (the engine's count: the state's part, and the part of the
        prefix's last block the cache cannot share, whole blocks only)."""
        gen = self.generation
        return gen.timings.computed_prompt_tokens if gen is not None and gen.timings is not None else 0

    def __iter__(self):  # (state, version), as the contract reads it
        return iter((self.state, self.version))


def state_part(engine, prefix_text: str, prefix_messages, state: HomeState) -> Optional[StatePart]:
    """`state` rendered after a prefix: the text between the prefix and the task, and its ids; None
    where the chat template does not render the prefix's messages as the prefix's text."""
    block = state_text(state)
    full = engine.chat_text(list(prefix_messages) + [task_message("x", None, block)])
    rest = full[len(prefix_text):]
    at = rest.find(block)
    if not full.startswith(prefix_text) or at < 0:
        return None
    text = rest[:at + len(block) + 2]  # through the blank line before "Task:"
    return StatePart(state, text, tuple(engine.encode(text)))


def ids_after_part(engine, messages: list[dict], prefix_text: str, prefix_ids, part: StatePart) -> Optional[list[int]]:
    """A conversation's ids as the prefix's, the part's and the rest's; None when it does not render
    as the prefix followed by the part."""
    full = engine.chat_text(messages)
    rest = full[len(prefix_text):]
    if not full.startswith(prefix_text) or not rest.startswith(part.text):
        return None
    return list(prefix_ids) + list(part.ids) + engine.encode(rest[len(part.text):])
