"""One streamed completion on an OpenAI-compatible engine, on a thread of its own.

The request is /v1/completions with the prompt the planner made (the home's stable prefix first, the
task last), so the engine's prefix cache and a prefix-aware router see the same long shared prefix for
every plan in a home: as its token ids, so no text is re-tokenized differently there, or as their text
where a router takes only text (flavors.py: SGLang's; hedged.py decodes it). The
home's grammar goes in the engine's own field (flavors.py: vLLM's `structured_outputs.grammar`,
SGLang's `ebnf`, trtllm-serve's `response_format`). Each request opens its own connection: cancelling
it (the local engine answered first, the client left) closes that socket, so the engine stops too.
A call may be several requests in a row (stepwise.py: one per plan step); its usage is their sum.

Times: `connect_s` is the connections' setup (TCP, and TLS where https), which is at least one round
trip of the link each; the network's share of a request is taken as its setup + one more round trip
(sending the request and receiving the answer), the engine's as the rest.
"""

from __future__ import annotations

import http.client
import json
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any, Optional, Union
from urllib.parse import urlsplit

from ...errors import OrinError
from .flavors import choice_text, completion_body, route
from .settings import RemoteSettings

log = logging.getLogger("orin_llm.remote")


class RemoteError(OrinError):
    """The remote engine did not give a usable answer (unreachable, an HTTP error, malformed, off-grammar).
    `kind` is the reason as one word, for /metrics and the answer's `fallback_reason` (hedged.py's REASONS)."""

    def __init__(self, message: str, kind: str = "error"):
        super().__init__(message)
        self.kind = kind


def connect(settings: RemoteSettings, timeout_s: float) -> http.client.HTTPConnection:
    parts = urlsplit(settings.url)
    if parts.scheme == "https":
        return http.client.HTTPSConnection(parts.hostname, parts.port, timeout=timeout_s,
                                           context=ssl.create_default_context())
    return http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout_s)


def path(settings: RemoteSettings, route: str) -> str:
    return urlsplit(settings.url).path.rstrip("/") + route


def headers(settings: RemoteSettings) -> dict[str, str]:
    out = {"Content-Type": "application/json", "Accept": "text/event-stream, application/json"}
    if settings.token:
        out["Authorization"] = f"Bearer {settings.token}"
    return out


def served_model(settings: RemoteSettings, timeout_s: float) -> str:
    """The engine's first model (GET /v1/models): the one a single-model vLLM serves."""
    conn = connect(settings, timeout_s)
    try:
        conn.request("GET", path(settings, "/v1/models"), headers=headers(settings))
        resp = conn.getresponse()
        body = resp.read()
        if resp.status != 200:
            raise RemoteError(f"GET /v1/models answered HTTP {resp.status}: {body[:200]!r}", "http_error")
        try:
            return json.loads(body)["data"][0]["id"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise RemoteError(f"GET /v1/models answered no model: {body[:200]!r}", "malformed") from None
    except (OSError, http.client.HTTPException) as e:
        raise RemoteError(f"{settings.host} unreachable: {e}", "unreachable") from None
    finally:
        conn.close()


class RemoteCall:
    """A streamed completion. The engine's thread reads its fields (each written once, or appended);
    `changed` is set whenever something arrived, so the engine's thread can wait on it."""

    def __init__(self, settings: RemoteSettings, model: Callable[[], str], prompt: Union[list[int], str],
                 max_tokens: int, temperature: float, top_p: float, seed: Optional[int], stop: list[str],
                 lark: Optional[str], changed: threading.Event, timeout_s: float):
        self.settings, self.changed, self.timeout_s = settings, changed, timeout_s
        self.model = model  # asked on this call's thread: finding it may take the link's time
        self.prompt = prompt if isinstance(prompt, str) else list(prompt)  # the ids, or their text (module doc)
        self.max_tokens, self.lark = max_tokens, lark
        self.sampling: dict[str, Any] = {"temperature": temperature, "top_p": top_p, "seed": seed, "stop": stop}
        self.text_parts: list[str] = []
        self.finish_reason: Optional[str] = None
        self.usage: dict[str, int] = {"prompt_tokens": 0, "completion_tokens": 0, "cached_tokens": 0}
        self.requests = 0  # sent so far
        self._usage: dict = {}  # the current request's
        self.error: Optional[RemoteError] = None
        self.done = False
        self.cancelled = False
        self.sent_at: Optional[float] = None  # perf_counter() when the request was written
        self.connect_s = 0.0  # all its requests' connection setups
        self.first_connect_s = 0.0
        self.first_at: Optional[float] = None  # the first text chunk
        self.last_at: Optional[float] = None  # the last chunk of any kind
        self.done_at: Optional[float] = None
        self._conn: Optional[http.client.HTTPConnection] = None
        self._thread = threading.Thread(target=self._run, name="orin-llm-remote", daemon=True)

    @property
    def text(self) -> str:
        return "".join(self.text_parts)

    def start(self) -> None:
        self._thread.start()

    def cancel(self) -> None:
        """Stop reading and close the connection (the engine aborts the request when it sees it closed)."""
        self.cancelled = True
        conn = self._conn
        if conn is not None and conn.sock is not None:
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _run(self) -> None:
        try:
            self._call()
        except RemoteError as e:
            self.error = e
        except (OSError, http.client.HTTPException) as e:
            if self.cancelled:
                self.error = RemoteError("cancelled", "cancelled")
            elif self.sent_at is None:
                self.error = RemoteError(f"{self.settings.host} unreachable: {type(e).__name__}: {e}", "unreachable")
            else:
                self.error = RemoteError(f"{self.settings.host} cut off: {type(e).__name__}: {e}", "cut_off")
        except Exception as e:  # a bug here: the robot's engine answers, and the log says what
            log.exception("remote call failed")
            self.error = RemoteError(f"{type(e).__name__}: {e}", "error")
        finally:
            if self._conn is not None:
                self._conn.close()
            self.done_at = time.perf_counter()
            self.done = True
            self.changed.set()

    def body(self, prompt: Union[list[int], str], max_tokens: int, lark: Optional[str]) -> dict[str, Any]:
        return completion_body(self.settings.flavor, prompt, max_tokens, lark=lark, **self.sampling)

    def _call(self) -> None:
        self._request(self.body(self.prompt, self.max_tokens, self.lark))

    def _request(self, body: dict[str, Any]) -> None:
        """One streamed completion on a connection of its own; its text is appended, its usage added."""
        data = json.dumps({"model": self.model(), **body}).encode()
        if self._conn is not None:
            self._conn.close()
        self.finish_reason, self._usage = None, {}
        t0 = time.perf_counter()
        self._conn = conn = connect(self.settings, self.timeout_s)
        conn.connect()
        self.connect_s += time.perf_counter() - t0
        if self.sent_at is None:
            self.first_connect_s, self.sent_at = self.connect_s, time.perf_counter()
        self.requests += 1
        conn.request("POST", path(self.settings, route(self.settings.flavor)), body=data,
                     headers=headers(self.settings))
        resp = conn.getresponse()
        if resp.status != 200:
            raise RemoteError(f"HTTP {resp.status} from {self.settings.host}: {resp.read(300)!r}", "http_error")
        for raw in resp:
            if self.cancelled:
                raise RemoteError("cancelled", "cancelled")
            line = raw.strip()
            if not line or line.startswith(b":"):
                continue
            if not line.startswith(b"data:"):
                raise RemoteError(f"malformed stream from {self.settings.host}: {line[:120]!r}", "malformed")
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            self._chunk(data)
        if self.finish_reason is None:
            raise RemoteError(f"the stream from {self.settings.host} ended without a finish_reason", "cut_off")
        self.usage["prompt_tokens"] += int(self._usage.get("prompt_tokens") or 0)
        self.usage["completion_tokens"] += int(self._usage.get("completion_tokens") or 0)
        details = self._usage.get("prompt_tokens_details") or {}
        self.usage["cached_tokens"] += int(details.get("cached_tokens") or 0)

    def _chunk(self, data: bytes) -> None:
        now = time.perf_counter()
        try:
            chunk = json.loads(data)
            if "error" in chunk:
                raise RemoteError(f"{self.settings.host} failed the request: {str(chunk['error'])[:200]}",
                                  "engine_error")
            for choice in chunk.get("choices") or ():
                text = choice_text(self.settings.flavor, choice)
                if text:
                    self.text_parts.append(text)
                    if self.first_at is None:
                        self.first_at = now
                if choice.get("finish_reason"):
                    self.finish_reason = str(choice["finish_reason"])
            if chunk.get("usage"):
                self._usage = dict(chunk["usage"])
        except (ValueError, TypeError, AttributeError) as e:
            raise RemoteError(f"malformed chunk from {self.settings.host} ({e}): {data[:120]!r}", "malformed") from None
        self.last_at = now
        self.changed.set()

    # -- its figures, once done

    @property
    def cached_tokens(self) -> int:
        return self.usage["cached_tokens"]

    def split(self) -> dict:
        """Network time and the engine's, in ms (module doc: network = each request's setup + one round trip)."""
        end = self.done_at or time.perf_counter()
        total = end - (self.sent_at or end) + self.first_connect_s
        network = min(total, 2 * self.connect_s)
        return {"network_ms": round(network * 1e3, 3), "engine_ms": round((total - network) * 1e3, 3)}
