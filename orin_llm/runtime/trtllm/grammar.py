"""The plan grammar on TensorRT-LLM 0.12: a logits post-processor that masks what the grammar forbids.

0.12's executor calls a named Python callback on every generation step of a request that names it
(`ExecutorConfig(logits_post_processor_map={name: fn})`, `Request(logits_post_processor_name=name)`;
R≡J cpp/tensorrt_llm/pybind/executor/bindings.cpp L518-547 and L226-264, docs/trtllm-0.12-jetson.md
§4). Its arguments: the request id, the step's logits (a torch tensor on the GPU, the vocabulary
last), the request's token ids per beam (prompt and output so far), the CUDA stream the executor
runs on (an int), and, in the 0.12 bindings, the request's client_id (the 0.12 bindings' typed stub:
`Callable[[int, torch.Tensor, list[list[int]], int, int | None], None]`; TensorRT-LLM's
examples/bindings/executor/example_logits_processor.py shows the 4-argument form of earlier
releases, which this callback accepts too). It must change the logits in place, on that stream.

A request's grammar state (a runtime/constraint.py Constraint) is registered under its client_id
before it is enqueued, so the first step already finds it; the callback catches the matcher up with
the tokens the request produced since its prompt, then masks.
"""

from __future__ import annotations

import threading
from typing import Any, Optional

import torch

from ..constraint import Constraint

PROCESSOR = "orin_llm_grammar"  # the name requests give in logits_post_processor_name


class GrammarProcessor:
    def __init__(self) -> None:
        self._lock = threading.Lock()  # the executor calls from its own thread
        self._requests: dict[int, list] = {}  # client_id -> [constraint, prompt length, tokens consumed]
        self._next = 1

    def register(self, constraint: Constraint, prompt_len: int) -> int:
        """A client_id for a request about to be enqueued with this grammar state."""
        with self._lock:
            client_id, self._next = self._next, self._next + 1
            self._requests[client_id] = [constraint, prompt_len, 0]
        return client_id

    def release(self, client_id: int) -> None:
        with self._lock:
            self._requests.pop(client_id, None)

    def __call__(self, request_id: int, logits: torch.Tensor, ids: list[list[int]], stream_ptr: int,
                 client_id: Optional[int] = None) -> None:
        with self._lock:
            state = self._requests.get(client_id) if client_id is not None else None
        if state is None:  # a request of ours always registers: nothing to mask for any other
            return
        constraint, prompt_len, consumed = state
        produced = ids[0][prompt_len:]
        for tok in produced[consumed:]:  # the tokens decided since the last step
            constraint.accept(int(tok))
        state[2] = len(produced)
        allowed = constraint.allowed()
        _mask(logits, allowed, stream_ptr)


def _mask(logits: torch.Tensor, allowed: torch.Tensor, stream_ptr: int) -> None:
    """logits[..., token] = -inf for every token the grammar forbids, in place."""
    n = min(logits.shape[-1], allowed.shape[-1])
    forbid = torch.ones(logits.shape[-1], dtype=torch.bool)
    forbid[:n] = ~allowed[:n]
    if logits.is_cuda:  # on the executor's stream, as its kernels are
        with torch.cuda.stream(torch.cuda.ExternalStream(stream_ptr)):
            logits.masked_fill_(forbid.to(logits.device, non_blocking=True), float("-inf"))
    else:
        logits.masked_fill_(forbid, float("-inf"))


def processor_map(processor: Any) -> dict:
    return {PROCESSOR: processor}
