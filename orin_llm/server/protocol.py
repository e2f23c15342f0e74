"""The daemon's HTTP/1.1 connection: uvicorn's httptools protocol with two holes closed, and the
time each request arrived (its head complete), from which `queue_ms` counts.

1. **Header limits.** httptools (llhttp) puts no bound on a request's head: uvicorn would buffer a
   1 MB header or 10,000 header fields and hand them to the app. uvicorn bounds the head only for
   its h11 protocol (`h11_max_incomplete_event_size`, 16 KiB by default), which is slower. Here a head
   over `MAX_HEAD_BYTES` (request line + header fields, h11's default) or with more than
   `MAX_HEADER_FIELDS` fields (Apache's LimitRequestFields) is answered `431 Request Header Fields Too
   Large` (RFC 6585 §5) and the connection closed. A head that is still incomplete is counted as it
   arrives, so a client that never ends its headers cannot make the daemon buffer more than the limit
   plus one read.

2. **A client that goes away with pipelined requests.** On a lost connection uvicorn marks only the
   newest request of the connection as disconnected (`HttpToolsProtocol.connection_lost`, uvicorn
   0.54.0), so an earlier request still being answered neither hears `http.disconnect` (its plan ran
   on to the end for nobody) nor knows not to write: its answer then hit the closed transport and
   uvloop's "unable to perform operation on <UnixTransport closed=True …>" went to the log as an
   "Exception in ASGI application" traceback (reproduced: two pipelined plans, then a close).
   Here every unfinished request of the connection is told.

3. **A client that half-closes.** `nc -N`, or any client that sends its request and then
   `shutdown(SHUT_WR)`, got no answer at all, not even from /health: uvicorn's `eof_received`
   returns None, so asyncio closes the transport at the client's EOF and every request of the
   connection counts as abandoned. HTTP/1.1 lets a client half-close after a complete request
   (RFC 9112 §9.6 expects the client to go on reading), and on a Unix socket the kernel tells a
   half-close from a close: a peer that closed for good leaves POLLHUP on our end, one that only
   shut its sending side does not. So an EOF after complete requests on a Unix socket keeps the
   connection open to send their answers (then closes it), and a hang-up noticed while they are
   prepared (a private epoll set watching for POLLHUP) counts as the client going away, as before:
   its plan is cancelled. Over TCP a FIN says the same in both cases, and a client that went away
   would be found only when its answer is written, after its plan ran for nobody; there an EOF
   still means the client is gone.
"""

from __future__ import annotations

import asyncio
import json
import select
import socket
import time
from typing import Any, Optional

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from .errors import error_body

MAX_HEAD_BYTES = 16 * 1024
MAX_HEADER_FIELDS = 100


class Protocol(HttpToolsProtocol):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = False  # between a request's first byte and the end of its headers
        self._head_bytes = 0  # request line + complete header fields, exactly
        self._read_in_head = 0  # bytes read while the head was incomplete (what httptools holds)
        self._fields = 0
        self._too_large: Optional[str] = None  # why the head was refused
        self._earlier: list = []  # cycles still answering when a later (pipelined) request began
        self._complete = False  # the last request's body has arrived whole
        self._hangups: Optional[Any] = None  # an epoll set watching a half-closed client for POLLHUP

    # -- header limits -------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._in_head, self._head_bytes, self._read_in_head, self._fields = True, 0, 0, 0
        self._complete = False
        super().on_message_begin()

    def on_message_complete(self) -> None:
        self._complete = True
        super().on_message_complete()

    def on_url(self, url: bytes) -> None:
        self._count(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._fields += 1
        if self._fields > MAX_HEADER_FIELDS:
            self._refuse(f"more than {MAX_HEADER_FIELDS} header fields")
        self._count(len(name) + len(value) + 4)  # "name: value\r\n"
        super().on_header(name, value)

    def _count(self, n: int) -> None:
        self._head_bytes += n
        if self._head_bytes > MAX_HEAD_BYTES:
            self._refuse(f"the request line and headers are over {MAX_HEAD_BYTES} bytes")

    def _refuse(self, why: str) -> None:
        """From a parser callback: the exception stops httptools, and uvicorn's data_received answers
        the parser error through send_400_response, which answers 431 instead."""
        self._too_large = why
        raise HeadTooLarge(why)

    def on_headers_complete(self) -> None:
        self._in_head = False
        # when the request arrived, for its queue_ms (app.arrival); a pipelined request waits for the
        # ones before it, and that wait is queueing too
        self.scope.setdefault("state", {})["arrived"] = time.monotonic()
        earlier = self.cycle
        super().on_headers_complete()
        self._earlier = [c for c in self._earlier if not c.response_complete]
        if earlier is not None and earlier is not self.cycle and not earlier.response_complete:
            self._earlier.append(earlier)

    def data_received(self, data: bytes) -> None:
        if self._too_large is not None:  # refused: the rest is not read
            return
        super().data_received(data)
        if self._too_large is None and self._in_head:
            # The head is still incomplete after this read, so all of the read is head (if the head
            # began in it, at most all of it: an over-estimate only when the tail of a pipelined
            # request shares the read), and httptools holds it until the head ends.
            self._read_in_head += len(data)
            if self._read_in_head > MAX_HEAD_BYTES:
                self._too_large = f"the request line and headers are over {MAX_HEAD_BYTES} bytes"
                self._answer_431()

    def send_400_response(self, msg: str) -> None:
        if self._too_large is not None:
            self._answer_431()
        else:
            super().send_400_response(msg)

    def _answer_431(self) -> None:
        body = json.dumps(error_body(431, f"request header fields too large: {self._too_large}; "
                                          "send fewer or smaller headers")).encode()
        head = (b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\n"
                b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body))
        if not self.transport.is_closing():
            self.transport.write(head + body)
            self.transport.close()

    # -- clients that go away ------------------------------------------------------------

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self._unwatch()
        for cycle in self._earlier + [cycle for cycle, _app in self.pipeline]:
            if not cycle.response_complete:
                cycle.disconnected = True
            cycle.message_event.set()
        self._earlier = []
        super().connection_lost(exc)

    # -- clients that half-close ------------------------------------------------------------

    def eof_received(self) -> bool:
        """The client will send nothing more. True keeps the connection open to answer what it asked
        (a half-close); False closes it, and its unanswered requests are cancelled (a client gone)."""
        cycle = self.cycle
        if cycle is None or cycle.response_complete or not self._complete or self._too_large is not None:
            return False  # nothing to answer, or a request that can never be complete
        hangups = watch_hangup(self.transport)
        if hangups is None:  # gone for good, or TCP (which cannot tell)
            return False
        self._hangups = hangups
        self.loop.add_reader(hangups.fileno(), self._hung_up)
        cycle.keep_alive = False  # the last request of the connection: closed once it is answered
        return True

    def _hung_up(self) -> None:
        """The half-closed client has closed for good: as if the connection were lost."""
        self._unwatch()
        self.transport.abort()  # connection_lost follows: every unanswered request is told

    def _unwatch(self) -> None:
        if self._hangups is not None:
            self.loop.remove_reader(self._hangups.fileno())
            self._hangups.close()
            self._hangups = None


def watch_hangup(transport: asyncio.BaseTransport) -> Optional[Any]:
    """After an EOF from the client: None when it closed for good (POLLHUP on a Unix socket) or when
    that cannot be told (TCP, or no epoll); else an epoll set, readable once it does close."""
    sock = transport.get_extra_info("socket")
    if sock is None or sock.family != socket.AF_UNIX or not hasattr(select, "epoll"):
        return None
    hangups = select.epoll()
    try:
        hangups.register(sock.fileno(), 0)  # no events asked for: epoll reports POLLHUP and POLLERR always
        if hangups.poll(0):
            hangups.close()
            return None
    except OSError:
        hangups.close()
        return None
    return hangups


class HeadTooLarge(Exception):
    pass
