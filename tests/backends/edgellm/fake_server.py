"""A fake of TensorRT Edge-LLM 0.11's OpenAI server (`tensorrt-edgellm-serve`), a real HTTP server on
loopback, written from the server's contracts in the 0.11.0 wheel (`W:` paths below, as `make edgellm`
installs them) and no kinder than it:

- launch options (W:experimental/server/config.py): in-flight batching is refused with speculative
  decoding (L355-363); a context cache over a KV cache that is not FP16 is refused here, as Orin's support
  matrix pairs reuse with FP16 KV pools (the refusal's words are the fake's own);
- GET /health, /health/ready, /v1/models (W:.../api/routes.py L44-96);
- POST /v1/chat/completions: the request model forbids unknown fields (W:.../api/protocol.py L33-34) and
  validates as ChatCompletionRequest (L59-153): n = 1 only, top_p in (0, 1], temperature in [0, 2],
  non-zero frequency or presence penalties refused (W:.../api/serving_chat.py L196-203),
  `response_format` with `guided_decoding` refused, `guided_decoding` with one known mode (W:.../runtime/
  engine.py L681-730), a grammar that does not compile refused (serving_chat.py L157-160), a model it does
  not serve 404 (L169-171); every error is {"error": {...}} with its status (W:.../api/errors.py), schema
  errors 400 (W:.../api/app.py's RequestValidationError handler), 429 with Retry-After past
  --max-queued-requests (config.py L100-102);
- `apply_chat_template: false` takes the messages' text as it is (the fake's reading of protocol.py L86);
- a stream is a role-only chunk, content deltas, a chunk with finish_reason, the usage chunk when
  `stream_options.include_usage`, then [DONE] (serving_chat.py L440-545); usage has no cached tokens
  (protocol.py L166-169); a client that closes its connection cancels its request (engine.py L1494);
- its context cache (`--enable-context-reuse`): a request reuses the longest committed record its prompt
  starts with (reuse_context) and commits its prompt, and its generated tokens with
  cache_generated_tokens (engine.py L803-813), records evicted least-recently-used past max_records.

Timing: a prompt's uncached tokens cost `prefill_s_per_token` each before the first token, every token
`decode_s_per_token`. The "model" is a script: it writes `script` token by token where the grammar allows,
else the end of the turn where allowed, else the grammar's lowest allowed token (llguidance, the planner's
own matcher library): grammar-true text, not the real model's.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from orin_llm.manifest import load_manifest
from orin_llm.runtime.constraint import Grammar, Vocabulary
from orin_llm.runtime.tokenizer import Tokenizer
from tests.backends.remote.peer import free_port

FIELDS = {"messages", "model", "frequency_penalty", "presence_penalty", "logit_bias", "logprobs", "top_logprobs",
          "max_tokens", "max_completion_tokens", "n", "seed", "stop", "stream", "stream_options", "temperature",
          "top_p", "top_k", "min_p", "repetition_penalty", "tools", "tool_choice", "parallel_tool_calls",
          "response_format", "guided_decoding", "modalities", "audio", "apply_chat_template",
          "add_generation_prompt", "enable_thinking", "reasoning_effort", "chat_template_kwargs",
          "disable_spec_decode", "reuse_context", "cache_generated_tokens"}  # protocol.py L59-93
GUIDES = ("json_object", "json_schema", "regex", "ebnf", "structural_tag", "choice")  # engine.py L638-645


class Refused(Exception):
    def __init__(self, message: str, status: int = 400, param: Optional[str] = None):
        super().__init__(message)
        self.status, self.param = status, param


@dataclass
class Seen:
    """A request as the fake saw it, for the tests to read."""

    body: dict
    prompt_tokens: int = 0
    cached_tokens: int = 0  # what its context cache served (the server reports none of it)
    cancelled: bool = False
    finished: bool = False
    text: str = ""


@dataclass
class FakeEdgeServer:
    tokenizer_dir: Any
    vocab_size: int
    max_input_len: int = 2048
    max_batch_size: int = 2
    kv_cache_dtype: str = "fp16"
    context_reuse: bool = True
    in_flight_batching: bool = True
    speculative: Optional[str] = None
    max_queued_requests: int = 16
    max_records: int = 1024
    prefill_s_per_token: float = 0.0002
    decode_s_per_token: float = 0.002
    script: str = "go_to(kitchen)\n"
    model_name: str = "edgellm-fake"
    seen: list = field(default_factory=list)
    records: list = field(default_factory=list)  # committed token prefixes, least recently used first

    def __post_init__(self) -> None:
        if self.in_flight_batching and self.speculative:
            raise ValueError("--enable-in-flight-batching is refused by a speculative-decoding deployment")
        if self.context_reuse and self.kv_cache_dtype != "fp16":
            raise ValueError(f"the fake refuses a context cache over a {self.kv_cache_dtype} KV cache (Orin: FP16)")
        self.tokenizer = Tokenizer(self.tokenizer_dir)
        eos = {self.tokenizer.eos_token_id}
        self.vocab = Vocabulary(self.tokenizer, self.vocab_size, eos)
        self.eos = self.tokenizer.eos_token_id
        self.active = 0
        self.queued = 0
        self.slots: Optional[asyncio.Semaphore] = None
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        app = Starlette(routes=[Route("/health", self.health), Route("/health/ready", self.ready),
                                Route("/v1/models", self.models),
                                Route("/v1/chat/completions", self.chat, methods=["POST"])])
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> FakeEdgeServer:
        self.thread.start()
        end = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < end, "the fake Edge-LLM server did not start"
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)

    # -- GET

    async def health(self, request: Request):
        batch = self.max_batch_size if self.in_flight_batching else 1
        return JSONResponse({"status": "healthy", "model": self.model_name, "active_requests": self.active,
                             "queued_requests": self.queued, "scheduling": None,
                             "capabilities": {"chat": True, "transcription": False, "speech": False,
                                              "input_modalities": ["text"], "output_modalities": ["text"],
                                              "max_model_len": self.max_input_len * 2,
                                              "max_input_len": self.max_input_len, "max_batch_size": batch,
                                              "max_num_seqs": batch, "kv_cache_dtype": self.kv_cache_dtype,
                                              "speculative_decoding": self.speculative is not None,
                                              "speculative_method": self.speculative,
                                              "context_reuse": self.context_reuse,
                                              "in_flight_batching": self.in_flight_batching}})

    async def ready(self, request: Request):
        return JSONResponse({"status": "ready", "active_requests": self.active, "queued_requests": self.queued})

    async def models(self, request: Request):
        return JSONResponse({"object": "list", "data": [{"id": self.model_name, "object": "model",
                                                         "owned_by": "tensorrt-edgellm",
                                                         "max_model_len": self.max_input_len * 2}]})

    # -- POST /v1/chat/completions

    @staticmethod
    def _error(e: Refused) -> JSONResponse:
        payload = {"error": {"message": str(e), "type": "invalid_request_error", "param": e.param, "code": e.status}}
        return JSONResponse(payload, status_code=e.status, headers={"Retry-After": "1"} if e.status == 429 else None)

    def _validate(self, body: Any) -> tuple[str, Optional[Any], dict]:
        if not isinstance(body, dict):
            raise Refused("body must be an object")
        extra = sorted(set(body) - FIELDS)
        if extra:
            raise Refused("Extra inputs are not permitted", param=extra[0])
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise Refused("messages must not be empty", param="messages")
        if body.get("model") not in (None, self.model_name):
            raise Refused(f"model {body['model']!r} is not served by this process", status=404)
        if body.get("n", 1) != 1:
            raise Refused("Input should be less than or equal to 1", param="n")
        top_p, temperature = body.get("top_p", 0.9), body.get("temperature", 0.7)
        if not 0 < top_p <= 1:
            raise Refused("top_p must be in (0, 1]", param="top_p")
        if not 0 <= temperature <= 2:
            raise Refused("temperature must be in [0, 2]", param="temperature")
        for name in ("frequency_penalty", "presence_penalty"):
            if body.get(name, 0):
                raise Refused(f"{name} is not supported by the Edge-LLM runtime", param=name)
        guide = body.get("guided_decoding")
        if guide is not None and body.get("response_format") is not None:
            raise Refused("response_format and guided_decoding cannot be used together", param="guided_decoding")
        grammar = None
        if guide is not None:
            unknown = sorted(set(guide) - set(GUIDES)) if isinstance(guide, dict) else ["(not an object)"]
            if unknown:
                raise Refused("'guided_decoding' has unknown field(s): " + ", ".join(unknown), param="guided_decoding")
            if set(guide) != {"ebnf"}:
                raise Refused("the fake compiles EBNF guides only", param="guided_decoding")
            grammar = self._grammar(guide["ebnf"])
        if body.get("apply_chat_template", True):
            prompt = self.tokenizer.apply_chat_template(messages, add_generation_prompt=body.get(
                "add_generation_prompt", True))
        else:
            prompt = "".join(str(m.get("content", "")) for m in messages)
        return prompt, grammar, body

    def _grammar(self, ebnf: str):
        from llguidance.gbnf_to_lark import gbnf_to_lark

        try:
            return Grammar.lark(self.vocab, gbnf_to_lark(ebnf)).constraint()
        except Exception as e:  # its validate_guided_decoding_params: the reason, as a 400
            raise Refused(f"invalid EBNF grammar: {e}", param="guided_decoding") from None

    def _reuse(self, ids: list[int], body: dict) -> int:
        if not (self.context_reuse and body.get("reuse_context", True)):
            return 0
        best = max((r for r in self.records if len(r) <= len(ids) and tuple(ids[:len(r)]) == r), key=len, default=())
        if best:
            self.records.remove(best)
            self.records.append(best)
        return len(best)

    def _commit(self, ids: list[int]) -> None:
        if self.context_reuse and ids and tuple(ids) not in self.records:
            self.records.append(tuple(ids))
            del self.records[:-self.max_records]

    def _next(self, constraint, written: list[int], script: list[int]) -> int:
        want = script[len(written)] if len(written) < len(script) else self.eos
        if constraint is None:
            return want
        allowed = constraint.allowed()
        if allowed[want]:
            return want
        if allowed[self.eos]:
            return self.eos
        return int(allowed.nonzero()[0, 0])

    async def chat(self, request: Request):
        try:
            body = json.loads(await request.body())
            prompt, constraint, body = self._validate(body)
        except Refused as e:
            return self._error(e)
        except ValueError:
            return self._error(Refused("body is not JSON"))
        ids = self.tokenizer.encode(prompt)
        seen = Seen(body, prompt_tokens=len(ids))
        self.seen.append(seen)
        if len(ids) > self.max_input_len:
            return self._error(Refused(f"prompt of {len(ids)} tokens exceeds max_input_len {self.max_input_len}"))
        if self.slots is None:
            self.slots = asyncio.Semaphore(self.max_batch_size if self.in_flight_batching else 1)
        if self.slots.locked() and self.queued >= self.max_queued_requests:
            return self._error(Refused("too many queued requests", status=429))
        max_tokens = body.get("max_completion_tokens") or body.get("max_tokens") or 2048
        stops = body.get("stop") or []
        stops = [stops] if isinstance(stops, str) else stops
        # the script goes on from where the prompt's text left it (a plan asked one step per request)
        done = next((k for k in range(len(self.script), 0, -1) if prompt.endswith(self.script[:k])), 0)
        script = self.tokenizer.encode(self.script[done:])
        rid, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())

        def chunk(delta: dict, finish: Optional[str] = None) -> bytes:
            c = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": self.model_name,
                 "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}], "usage": None}
            return f"data: {json.dumps(c)}\n\n".encode()

        async def generate():
            self.queued += 1
            async with self.slots:
                self.queued -= 1
                self.active += 1
                try:  # a client gone cancels this (Starlette's disconnect listener, or the failed send)
                    cached = self._reuse(ids, body)
                    seen.cached_tokens = cached
                    await asyncio.sleep(self.prefill_s_per_token * (len(ids) - cached))
                    written: list[int] = []
                    finish = "length"
                    while len(written) < max_tokens:
                        if await request.is_disconnected():
                            seen.cancelled = True
                            return
                        token = self._next(constraint, written, script)
                        if token == self.eos:
                            finish = "stop"
                            break
                        if constraint is not None:
                            constraint.accept(token)
                        before = self.tokenizer.decode(written)
                        written.append(token)
                        text = self.tokenizer.decode(written)
                        hit = next((s for s in stops if s in text), None)
                        if hit is not None:
                            text, finish = text[:text.index(hit)], "stop"
                            seen.text = text
                            if len(text) > len(before):
                                yield text[len(before):]
                            break
                        seen.text = text
                        yield text[len(before):]
                        await asyncio.sleep(self.decode_s_per_token)
                    self._commit(ids + (written if body.get("cache_generated_tokens", True) else []))
                    seen.finished = True
                    yield (finish, len(written))
                except (asyncio.CancelledError, GeneratorExit):
                    seen.cancelled = True
                    raise
                finally:
                    self.active -= 1

        if not body.get("stream"):
            text, finish, n = "", "stop", 0
            async for piece in generate():
                if isinstance(piece, tuple):
                    finish, n = piece
                else:
                    text += piece
            return JSONResponse({"id": rid, "object": "chat.completion", "created": created, "model": self.model_name,
                                 "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                              "finish_reason": finish}],
                                 "usage": {"prompt_tokens": len(ids), "completion_tokens": n,
                                           "total_tokens": len(ids) + n}})
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))

        async def events():
            yield chunk({"role": "assistant"})
            async for piece in generate():
                if isinstance(piece, tuple):
                    finish, n = piece
                    yield chunk({}, finish)
                    if include_usage:
                        usage = {"prompt_tokens": len(ids), "completion_tokens": n, "total_tokens": len(ids) + n}
                        yield f"data: {json.dumps({'id': rid, 'choices': [], 'usage': usage})}\n\n".encode()
                else:
                    yield chunk({"content": piece})
            yield b"data: [DONE]\n\n"
        return StreamingResponse(events(), media_type="text/event-stream")


def fake(edge_dir: Path, **kw) -> FakeEdgeServer:
    """The fake for an engine directory, as the build's server_argv starts it, unless a test says otherwise."""
    m = load_manifest(edge_dir)
    return FakeEdgeServer(edge_dir / "tokenizer", m.target.arch.vocab_size,
                          **{"max_input_len": m.limits["max_input_len"], **kw})
