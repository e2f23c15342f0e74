"""The plan grammar on TensorRT-LLM 0.12: a logits post-processor that masks what the grammar forbids.

0.12's executor calls a named Python callback on every iteration that decides tokens for a request that
names it (`ExecutorConfig(logits_post_processor_map={name: fn})`, `Request(logits_post_processor_name=name)`;
R≡J cpp/tensorrt_llm/pybind/executor/bindings.cpp L518-547 and L226-264, docs/trtllm-0.12-jetson.md
§4, §13). Its arguments: the executor's request id, the iteration's logits (a torch tensor on the GPU,
the vocabulary last: one row per position it decides, i.e. 1 + the request's draft tokens when it
verifies external drafts), the request's token ids per beam (prompt and output so far; the drafts are
not among them), the CUDA stream the executor runs on (an int: pybind's StreamPtr caster), and the
request's client_id (`LogitsPostProcessor = std::function<void(IdType, Tensor&, BeamTokens const&,
StreamPtr const&, std::optional<IdType>)>`; earlier releases passed the first four only, and a call
without a client_id is placed by request id, below). It is called on the executor's own thread, under
the GIL, and must change the logits in place, on that stream.

A request's grammar state (a runtime/constraint.py Constraint, whose interface is all this module uses:
allowed, accept, valid_prefix, masks) is registered under a fresh client_id before the request is
enqueued, so the first step already finds it, and bound to the executor's request id once enqueued. The
callback catches the matcher up with the tokens the request produced since its prompt, then masks each
row: row i with what the grammar allows after the request's first i draft tokens.

Never a silent skip: a call the callback cannot place (no client_id and a request id it does not know,
an unknown client_id) or whose masking fails (the matcher refuses a produced token) is recorded against
that request id, the request is ended at once (only end_id is left allowed), and the generation that
owns the id fails with the reason (generation.py `_run`). The callback never raises into the executor.

Cost: every call is timed (`calls`, `rows`, `seconds`): the Python callback under the GIL, the
matcher's mask, and the mask's copy to the logits' device; docs/trtllm-0.12-jetson.md §13 has the
figures measured through the fake.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from ...runtime.constraint import Constraint

PROCESSOR = "orin_llm_grammar"  # the name requests give in logits_post_processor_name
# A call without a client_id is placed by the executor's request id, which the engine learns when
# enqueue_request returns: the executor's thread may call before that, so it waits this long for it.
BIND_WAIT_S = 0.05


class _Ended(Exception):
    """A late step of a released request: ended, nothing to report."""


@dataclass
class _State:
    constraint: Constraint
    prompt_len: int
    draft: list[int] = field(default_factory=list)
    consumed: int = 0  # produced tokens the matcher has accepted


class GrammarProcessor:
    def __init__(self, end_id: int) -> None:
        self.end_id = end_id  # what an unplaceable call leaves allowed: the request ends at once
        self._lock = threading.Condition()  # the executor calls from its own thread
        self._requests: dict[int, _State] = {}  # client_id -> its grammar state
        self._clients: dict[int, int] = {}  # executor request id -> client_id
        self._errors: dict[int, str] = {}  # executor request id -> why its steps could not be masked
        self._next = 1
        self.calls = self.rows = 0
        self.seconds = 0.0

    def register(self, constraint: Constraint, prompt_len: int, draft: Optional[list[int]] = None) -> int:
        """A client_id for a request about to be enqueued with this grammar state (and these drafts)."""
        with self._lock:
            client_id, self._next = self._next, self._next + 1
            self._requests[client_id] = _State(constraint, prompt_len, list(draft or []))
        return client_id

    def bind(self, client_id: int, request_id: int) -> None:
        """The executor's id of the client's request (for calls that come without a client_id)."""
        with self._lock:
            self._clients[request_id] = client_id
            self._lock.notify_all()

    def error(self, request_id: int) -> Optional[str]:
        """Why a step of this request could not be masked, if one could not."""
        with self._lock:
            return self._errors.get(request_id)

    def release(self, client_id: int, produced: list[int]) -> int:
        """Forget the client's state, the grammar caught up with what the request produced (the callback
        never sees a request's last tokens); returns how many of `produced` the grammar allows, from the
        first on."""
        with self._lock:
            state = self._requests.pop(client_id, None)
            for rid in [r for r, c in self._clients.items() if c == client_id]:
                del self._clients[rid]
                self._errors.pop(rid, None)
        if state is None:
            return 0
        rest = [int(t) for t in produced[state.consumed:]]
        ok = state.constraint.valid_prefix(rest)
        for tok in rest[:ok]:
            state.constraint.accept(tok)
        return state.consumed + ok

    def __call__(self, request_id: int, logits: torch.Tensor, ids: list[list[int]], stream_ptr: int,
                 client_id: Optional[int] = None) -> None:
        t0 = time.perf_counter()
        flat = logits if logits.is_contiguous() else logits.contiguous()
        rows = flat.view(-1, logits.shape[-1])  # [positions (× beams), vocab]
        with self._lock:
            if client_id is None:
                self._lock.wait_for(lambda: request_id in self._clients, BIND_WAIT_S)
                client_id = self._clients.get(request_id)
            state = self._requests.get(client_id) if client_id is not None else None
            late = state is None and client_id is not None and 0 < client_id < self._next
            try:
                if late:  # a step of a request already released (cancelled): no owner left, just end it
                    raise _Ended
                if state is None:
                    why = ("the call came without a client_id and for a request id not enqueued by this engine"
                           if client_id is None else f"client_id {client_id} is not a request of this engine")
                    raise LookupError(why)
                produced = ids[0][state.prompt_len:]
                for tok in produced[state.consumed:]:  # the tokens decided since the last call
                    state.constraint.accept(int(tok))
                    state.consumed += 1
                n = rows.shape[0]
                if n - 1 > len(state.draft):
                    raise LookupError(f"{n} rows of logits but {len(state.draft)} draft tokens registered")
                allowed = state.constraint.masks(state.draft[:n - 1]) if n > 1 else state.constraint.allowed()[None]
            except Exception as e:  # never into the executor: the request ends, its owner fails
                if not late:
                    self._errors[request_id] = f"{type(e).__name__}: {e}"
                allowed = torch.zeros(1, max(self.end_id + 1, 1), dtype=torch.bool)
                allowed[0, self.end_id] = True
                allowed = allowed.expand(rows.shape[0], -1)
        _mask(rows, allowed, stream_ptr)
        if flat is not logits:
            logits.copy_(flat)
        self.calls += 1
        self.rows += allowed.shape[0]
        self.seconds += time.perf_counter() - t0


def _mask(rows: torch.Tensor, allowed: torch.Tensor, stream_ptr: int) -> None:
    """rows[i, token] = -inf for every token allowed[i] forbids (and every token past its width), in place."""
    vocab = rows.shape[-1]
    n = min(vocab, allowed.shape[-1])
    forbid = torch.ones(allowed.shape[0], vocab, dtype=torch.bool)
    forbid[:, :n] = ~allowed[:, :n]
    if rows.is_cuda:  # on the executor's stream, as its kernels are
        with torch.cuda.stream(torch.cuda.ExternalStream(stream_ptr)):
            rows.masked_fill_(forbid.to(rows.device, non_blocking=True), float("-inf"))
    else:
        rows.masked_fill_(forbid, float("-inf"))


def processor_map(processor: Any) -> dict:
    return {PROCESSOR: processor}
