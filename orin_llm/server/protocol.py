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
   "Exception in ASGI application" traceback (reproduced: two pipelined plans, then a half-close).
   Here every unfinished request of the connection is told.
"""

from __future__ import annotations

import json
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

    # -- header limits -------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._in_head, self._head_bytes, self._read_in_head, self._fields = True, 0, 0, 0
        super().on_message_begin()

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
        for cycle in self._earlier + [cycle for cycle, _app in self.pipeline]:
            if not cycle.response_complete:
                cycle.disconnected = True
            cycle.message_event.set()
        self._earlier = []
        super().connection_lost(exc)


class HeadTooLarge(Exception):
    pass
