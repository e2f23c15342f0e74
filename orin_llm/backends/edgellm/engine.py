"""A TensorRT Edge-LLM 0.11 engine (JetPack 7) behind runtime/backend.py's `Backend`.

Why its OpenAI server and not its Python API: Edge-LLM 0.11's server (`tensorrt-edgellm-serve`) is where
its features meet: per-request guided decoding (EBNF among them), its context cache (prefix reuse across
requests), in-flight batching, streaming, and cancellation when the client closes its connection; the
Python API behind it (`experimental.server.LLM`) is marked experimental, is the same code in our process
(CUDA, TensorRT and Edge-LLM's pins in the daemon), and runs from the same checkpoint-built bundles. So the
daemon keeps its own process and talks to the server on loopback: the one import boundary is HTTP, through
backends/remote's client (the `edgellm` flavor of flavors.py: chat completions, the prompt as text). Where
the server runs and with what: the manifest's `edgellm.server_argv` (build/edgellm.py).

What it does not do, refused or reported, never dropped silently (backends/edgellm/rules.py has the
sources): no lookup or draft-model speculation (`speculation` other than auto/none is an error); homes are
stored in its context cache, never pinned (`pins_hold` False); the KV cache is FP16; a constraint without
grammar text (a JSON schema's) is refused; no cached-token count (request.py). At load the server's
/health must say what the manifest promises (FP16 KV, context reuse where the profile asked for it, room
for the prompts and the batch), else the load is refused with what differs.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any, Optional
from urllib.parse import urlsplit

from ...errors import OrinError, PromptTooLong
from ...manifest import Manifest, load_manifest
from ...runtime.backend import Capabilities, EngineStats
from ...runtime.constraint import Constraint, Vocabulary
from ...runtime.engine_files import EngineText, eos_ids, load_tokenizer
from ...runtime.sampling import SamplingParams
from ...runtime.tasks import run_pin
from ..remote.client import RemoteError, connect, headers, path, served_model
from ..remote.settings import RemoteSettings, is_loopback
from .request import EdgellmRequest
from .rules import NO_EXTERNAL_DRAFTS

WAIT_S = 0.02  # the longest a step waits for the server's news when nothing arrived
DEFAULT_URL = "http://127.0.0.1:8000"  # the server's own default port (build/edgellm.py SERVER_PORT)
SPECULATION = ("auto", "none")


def server_health(settings: RemoteSettings, timeout_s: float) -> dict:
    """GET /health: the server's capabilities (W:experimental/server/api/routes.py L44-74)."""
    conn = connect(settings, timeout_s)
    try:
        conn.request("GET", path(settings, "/health"), headers=headers(settings))
        resp = conn.getresponse()
        body = resp.read()
        if resp.status != 200:
            raise OrinError(f"the Edge-LLM server at {settings.url} answered /health with HTTP {resp.status}")
        return json.loads(body)
    except (OSError, ValueError) as e:
        raise OrinError(f"no Edge-LLM server at {settings.url} ({e}): start it with the manifest's "
                        "edgellm.server_argv (jetson/GUIDE.md, JetPack 7)") from None
    finally:
        conn.close()


def server_problems(manifest: Manifest, health: dict) -> list[str]:
    """What the running server does not give that the engine directory was built for."""
    caps = health.get("capabilities") or {}
    limits, want_reuse = manifest.limits, bool(manifest.profile.get("prefix_reuse", True))
    out = []
    if caps.get("kv_cache_dtype") != "fp16":
        out.append(f"its KV cache is {caps.get('kv_cache_dtype')!r}, the plan is FP16")
    if want_reuse and not caps.get("context_reuse"):
        out.append("it runs without its context cache (start it with --enable-context-reuse): every plan would "
                   "compute the home again")
    if (caps.get("max_input_len") or 0) < limits["max_input_len"]:
        out.append(f"it takes prompts of {caps.get('max_input_len')} tokens, the engine's limit is "
                   f"{limits['max_input_len']} (--max-input-len)")
    if not caps.get("chat"):
        out.append("it serves no chat completions")
    if caps.get("speculative_decoding"):
        out.append(f"it speculates ({caps.get('speculative_method')}), which this plan did not size")
    return out


class EdgellmEngine(EngineText):
    """An engine directory built with backend "edgellm", served by Edge-LLM's server on this machine."""

    backend = "edgellm"

    def __init__(self, engine_dir: Path, manifest: Manifest, tokenizer: Any, settings: RemoteSettings,
                 health: dict, timeout_s: float):
        self.dir, self.manifest, self.tokenizer, self.settings = engine_dir, manifest, tokenizer, settings
        self.health, self.timeout_s = health, timeout_s
        self.max_input_len = manifest.limits["max_input_len"]
        self.max_seq_len = manifest.limits["max_seq_len"]
        self.eos_ids = eos_ids(tokenizer, engine_dir / "tokenizer")
        if not self.eos_ids:
            raise OrinError(f"{engine_dir}/tokenizer: no EOS token id; rebuild the engine")
        caps = health.get("capabilities") or {}
        self.prefix_reuse = bool(caps.get("context_reuse"))
        served = int(caps.get("max_batch_size") or 1) if caps.get("in_flight_batching") else 1
        self.max_running = max(1, min(manifest.limits["max_batch_size"], served))
        self.pins: list[tuple[int, ...]] = []  # what pin() committed to the context cache (evictable there)
        self.waiting: deque[EdgellmRequest] = deque()
        self.running: list[EdgellmRequest] = []
        self.changed = threading.Event()
        self._model: Optional[str] = None
        self._vocab: Optional[Vocabulary] = None

    @classmethod
    def load(cls, engine_dir: str | Path, url: Optional[str] = None, manifest: Optional[Manifest] = None,
             timeout_s: float = 600.0) -> EdgellmEngine:
        """The engine directory, and its server at `url` (else $ORIN_LLM_EDGELLM_URL, else the server's default
        on loopback): this machine's only; refused when it does not serve what the manifest promises."""
        engine_dir = Path(engine_dir)
        manifest = manifest or load_manifest(engine_dir)
        if manifest.backend != "edgellm":
            raise OrinError(f"{engine_dir} is a {manifest.backend} engine, not an Edge-LLM one")
        url = url or os.environ.get("ORIN_LLM_EDGELLM_URL") or DEFAULT_URL
        host = urlsplit(url).hostname or ""
        if not is_loopback(host):
            raise OrinError(f"Edge-LLM server {url}: the engine's server runs on this machine (loopback); a server "
                            "elsewhere is a site server: serve --remote URL --remote-flavor edgellm")
        settings = RemoteSettings(url, flavor="edgellm", prompt="text", timeout_s=timeout_s)
        health = server_health(settings, min(timeout_s, 10.0))
        problems = server_problems(manifest, health)
        if problems:
            raise OrinError(f"the Edge-LLM server at {url} does not serve what {engine_dir} was built for: "
                            + "; ".join(problems))
        return cls(engine_dir, manifest, load_tokenizer(engine_dir / "tokenizer"), settings, health, timeout_s)

    def served_model(self) -> str:
        """The server's model name (GET /v1/models), asked once, on a call's thread."""
        if self._model is None:
            try:
                self._model = served_model(self.settings, min(self.timeout_s, 10.0))
            except RemoteError:
                raise
        return self._model

    # ------------------------------------------------------------------ what it can do

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(backend="edgellm", max_batch=self.max_running, tunable_batch=False, paced_prefill=False,
                            persistent_histories=False, grammars=True, kernels=False, pins_hold=False,
                            speculation=SPECULATION, constrained_speculation=SPECULATION)

    def check_prompt(self, n: int) -> None:
        if n > self.max_input_len:
            raise PromptTooLong(n, self.max_input_len)

    def vocabulary(self) -> Vocabulary:
        if self._vocab is None:
            self._vocab = Vocabulary(self.tokenizer, self.manifest.target.arch.vocab_size, self.eos_ids)
        return self._vocab

    # ------------------------------------------------------------------ requests

    def generate(self, prompt_ids: list[int], params: SamplingParams, speculation: str = "auto",
                 constraint: Optional[Constraint] = None, history: str = "chat") -> EdgellmRequest:
        if speculation not in SPECULATION:
            raise OrinError(f"speculation {speculation!r} is not available on Edge-LLM: {NO_EXTERNAL_DRAFTS}")
        if constraint is not None and constraint.lark is None:
            raise OrinError("this constraint has no grammar text to send to Edge-LLM's guided decoding (a JSON "
                            "schema's is not converted yet); the home's plans are")
        if not prompt_ids:
            raise OrinError("empty prompt")
        self.check_prompt(len(prompt_ids))
        return EdgellmRequest(self, prompt_ids, params, constraint)

    def submit(self, request: EdgellmRequest, /) -> None:
        if request.started is None:
            request.started = time.perf_counter()
        self.waiting.append(request)

    def step(self) -> list[EdgellmRequest]:
        """Start what has room (the server batches them in flight), then hand on what arrived; when nothing
        did, wait at most WAIT_S for the server's news."""
        while self.waiting and len(self.running) < self.max_running:
            request = self.waiting.popleft()
            self.running.append(request)
            request.start(self.changed)
        ran = list(self.running)
        if ran and not any(r.call is not None and r.call.done for r in ran):
            self.changed.wait(WAIT_S)
        self.changed.clear()
        for request in ran:
            if request.advance() or request.done:
                self.running.remove(request)
        return ran

    def abort(self, request: EdgellmRequest, /) -> None:
        if request in self.running:
            self.running.remove(request)
        elif request in self.waiting:
            self.waiting.remove(request)
        request.close()

    @property
    def busy(self) -> bool:
        return bool(self.waiting or self.running)

    # ------------------------------------------------------------------ homes

    def pin_request(self, ids: list[int]) -> EdgellmRequest:
        """A one-token request on the prefix: the context cache commits its prefill (reuse_context and
        cache_generated_tokens default to true, protocol.py L92-93), evictable like any record. Without
        the context cache the ids are only recorded."""
        self.check_prompt(len(ids))
        return EdgellmRequest(self, ids, SamplingParams(max_tokens=1, temperature=0.0), pin=True)

    def pin(self, ids: list[int]) -> Any:
        return run_pin(self, ids)

    def unpin(self, pin: Any, /) -> None:
        """Forget a home's prefix; the server has no call that drops a context-cache record: it ages out."""
        if pin in self.pins:
            self.pins.remove(pin)

    def cached_prefix(self, prompt_ids: list[int]) -> int:
        """0: the server reports no cached tokens and pins nothing, so no count is promised (module doc)."""
        return 0

    # ------------------------------------------------------------------ the daemon's settings and reports

    def tune(self, max_running: Optional[int] = None, prefill_chunk_tokens: Optional[int] = None) -> None:
        if max_running is not None or prefill_chunk_tokens is not None:
            raise OrinError("an Edge-LLM engine batches and paces prompts inside its server: it takes no "
                            "scheduler settings (start the server with the batch size instead)")

    def persist_histories(self, directory: Path) -> None:
        raise OrinError(f"an Edge-LLM engine has no lookup history (no lookup speculation); nothing to persist in "
                        f"{directory}")

    def save_histories(self) -> None:
        pass  # nothing persists (persist_histories)

    def stats(self) -> EngineStats:
        return EngineStats(waiting=len(self.waiting), running=len(self.running), max_running=self.max_running)

    def kv_usage(self) -> dict:
        """What is known of the server's KV pool: its dtype and the plan's capacity; the server reports no use."""
        plan = self.manifest.memory_plan or {}
        return {"device": "cuda (Edge-LLM server)", "dtype": "fp16", "capacity_tokens": plan.get("max_kv_tokens"),
                "bytes": plan.get("kv_bytes"), "tokens": None, "pinned_prefixes": len(self.pins),
                "prefix_reuse": self.prefix_reuse, "reported_by_server": False}

    def kernels(self) -> dict:
        return {}

    def close(self) -> None:
        for request in list(self.running) + list(self.waiting):
            self.abort(request)
