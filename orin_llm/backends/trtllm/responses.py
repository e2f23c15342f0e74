"""The responses of TensorRT-LLM 0.12's executor, as the runtime reads them: each executor's responses for
all its requests at once, sorted per request (`Mailbox`), followed to a request's final one (`follow`),
and a request cancelled without waiting for anything back (`cancel_request`). Why each is so:
docs/trtllm-0.12-jetson.md §13; citations as in backends/trtllm/engine.py."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any, Optional

from ...errors import OrinError

log = logging.getLogger(__name__)

# await_responses(id, timeout) returns as soon as a response is ready, else [] after the timeout
# (a std::chrono::milliseconds; pybind11/chrono.h takes a timedelta, J executor.cpp). Never call it
# without a timeout: it then blocks, forever if that id's responses were all delivered (doc §4).
POLL = timedelta(milliseconds=100)
STEP_WAIT = timedelta(milliseconds=20)  # an engine step with nothing ready waits at most this for a response
NO_WAIT = timedelta(0)
def first_line(text: str) -> str:
    lines = [ln.strip() for ln in str(text).strip().splitlines() if ln.strip()]
    return lines[0] if lines else "(no message)"



def enqueue_request(executor: Any, request: Any) -> int:
    try:
        return executor.enqueue_request(request)  # -> request id (R≡J executor.cpp initBindings)
    except RuntimeError as e:
        raise OrinError(f"TensorRT-LLM refused the request: {first_line(str(e))}") from None


class Mailbox:
    """One executor's responses, read for all its requests at once with the any-id overload
    `await_responses(timeout)` ("awaits for any ready responses ... without order guarantees", J
    executor.h) and kept per request id until that request's reader takes them. Only the engine's thread
    reads an executor. A closed id's late responses (a cancelled request's) are read and dropped."""

    def __init__(self, executor: Any):
        self.executor = executor
        self.boxes: dict[int, deque] = {}

    def open(self, request_id: int) -> None:
        self.boxes[request_id] = deque()

    def close(self, request_id: int) -> None:
        self.boxes.pop(request_id, None)

    def pump(self, timeout: timedelta) -> int:
        """Wait at most `timeout` for responses of any request; sort them into their boxes."""
        responses = self.executor.await_responses(timeout=timeout)
        for response in responses:
            box = self.boxes.get(response.request_id)
            if box is not None:
                box.append(response)
        return len(responses)

    def ready(self, request_id: int) -> bool:
        return bool(self.boxes.get(request_id))

    def take(self, request_id: int) -> list:
        box = self.boxes.get(request_id)
        if not box:
            return []
        out = list(box)
        box.clear()
        return out


def follow(mailbox: Mailbox, request_id: int, on_last: Optional[Callable[[], None]] = None,
           wait: bool = True) -> Iterator[Optional[tuple[list[int], bool]]]:
    """(new tokens, is_final) per response of one request, until its final one. With `wait` False it
    yields None while no response is there (the caller yields WAIT and is stepped again later); else it
    polls the executor (sorting the other requests' responses into their boxes). `on_last` is called as
    soon as the final (or an error) response has been *received*, before the responses of that batch are
    handed out: a consumer that stops early must then not cancel it.

    Response.has_error() is a method, error_msg/result properties (R≡J bindings.cpp L276-282);
    Result.output_token_ids is one list per beam, is_final a field (L266-274). With
    exclude_input_from_output, each streamed response holds that iteration's new tokens only
    (R≡J tensorrt_llm/runtime/model_runner_cpp.py L522-585 appends them).
    """
    while True:
        if not mailbox.ready(request_id):
            if wait:
                mailbox.pump(POLL)
            else:
                yield None
            continue
        responses = mailbox.take(request_id)
        if on_last is not None and any(r.has_error() or r.result.is_final for r in responses):
            on_last()
        for response in responses:
            if response.has_error():
                mailbox.close(request_id)
                raise OrinError(f"TensorRT-LLM request failed: {first_line(response.error_msg)}")
            result = response.result
            beams = result.output_token_ids
            tokens = [int(t) for t in beams[0]] if beams else []
            yield tokens, bool(result.is_final)
            if result.is_final:
                mailbox.close(request_id)
                return


def cancel_request(mailbox: Mailbox, request_id: int) -> None:
    """cancel_request(id) (R≡J executor.cpp), without waiting for anything back (module doc): the id's
    box is closed, and what is already queued for it is read now, without a wait, and dropped."""
    mailbox.close(request_id)
    try:
        mailbox.executor.cancel_request(request_id)
        mailbox.pump(NO_WAIT)
    except RuntimeError as e:  # never mask the reason we are cancelling
        log.warning("cancelling TensorRT-LLM request %s: %s", request_id, first_line(str(e)))
