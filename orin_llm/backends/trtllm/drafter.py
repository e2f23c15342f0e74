"""The draft engine as a drafter of runtime/speculative.py's kind, for backends/trtllm/generation.py's
draft/target loop (draft_model and combined speculation)."""

from __future__ import annotations

from .responses import follow
from .stepped import EngineView


class EngineDrafter:
    """The draft engine: greedy, non-streaming, max_new_tokens=k on the current context."""

    name = "draft_model"

    def __init__(self, engine: EngineView):
        self.engine = engine

    def begin(self, context: list[int]) -> None:
        pass

    def propose(self, context, k, params, gen):
        executor = self.engine.draft_executor
        request = self.engine.request(context, k, streaming=False, sampling=self.engine.greedy_config())
        tokens: list[int] = []
        for new, _final in follow(self.engine.mailbox(executor), self.engine.enqueue(executor, request)):
            tokens += new
        return tokens[:k], None

    def rollback(self, valid: int) -> None:
        pass

    def finish(self, output: list[int]) -> None:
        pass
