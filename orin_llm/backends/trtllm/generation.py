"""A planning call on TensorRT-LLM 0.12.0-jetson executors: plain or speculative decoding, streamed.

`TrtllmGeneration` is a request the engine steps (backends/trtllm/stepped.py's `Stepped`, a `Request` as
runtime/backend.py has it, like runtime/generate.py's `Generation`): the engine's `step` advances it to
its next text delta, and closing its iterator (or `abort`) cancels the request in flight. Text comes out
through the same TextStream (incremental detokenization, stop strings). The engine
(backends/trtllm/engine.py) imports this module, makes the requests (`request`) and holds the executors;
this module sends them and follows their responses, and knows the engine only as stepped.py's
`EngineView` protocol. What the cache served the prompt is measured by backends/trtllm/prefix_reuse.py's
`CachedTokens`. Citations as in engine.py.

Speculative decoding: 0.12-jetson has no draft/target driver in Python (doc §5), so the loop is
ours, one request per step, as the reference Triton BLS orchestrator does it (tensorrtllm_backend
v0.12.0 all_models/inflight_batcher_llm/tensorrt_llm_bls/1/lib/decode.py L214-292):

* draft: up to k tokens from `LookupDrafter` (model-free, as for torch) or from the draft engine
  (a non-streaming greedy request on the context with max_new_tokens=k);
* verify: a target request with input = the whole context, `ExternalDraftTokensConfig(tokens=draft)`
  and max_new_tokens = len(draft) + 1 (the BLS's choice, …/lib/triton_decoder.py L352-358). The
  decoder samples the target's token at every draft position with the request's sampling config
  (R cpp/tensorrt_llm/runtime/gptDecoderBatched.cpp L913) and then compares ids
  (acceptDraftTokensByIds, L934-954); every position counts one step towards max_new_tokens
  (L931-932), so the request ends after that one iteration with accepted + 1 new tokens. (Read in
  the open runtime sources; the 0.12 batch manager that drives it is a closed library.) The Result
  carries no acceptance count (doc §4), but the accepted tokens are in it: the decoder accepts a draft
  token exactly when the target's own token at that position has the same id, so the common prefix of
  the draft and the returned tokens *is* the engine's acceptance, not an estimate of it (returned − 1
  whenever the target added its own token, and still right if it ever decoded on past that iteration).
  SpecStats counts that per step.

In-flight batching: the engine runs up to its executor's max_batch_size generations at once (engine.py);
their requests are in the executor together, which batches them in flight. A generation never blocks
the others on the target: when its response has not come, its step yields WAIT and the engine steps the
next one, and reads the target's responses for all of them with the any-id `await_responses(timeout)`
(a `Mailbox` per executor sorts them by request id). Drafting on the draft engine and pins wait for their
own response, reading the others' into their mailboxes meanwhile.

Cancelling: `cancel_request(id)` and nothing else: 0.12's executor.h says only "Cancel the request with
provided request id" (J executor.h, Executor::cancelRequest), not whether a final response follows, so
the runtime does not wait for one. The id's mailbox is closed; what the executor still returns for it
is read by later polls and dropped.

Constrained speculation: a draft (lookup or the draft engine) is cut on the host at the first token the
request's grammar forbids (Constraint.valid_prefix), before it goes to the target as
ExternalDraftTokensConfig, as the torch backend cuts it (runtime/model_runner.py). The target's request
names the grammar's post-processor (grammar.py), which masks each position it decides: 1 + drafts rows
on the iteration that verifies them. The tokens the target returns are checked again on the host
(GrammarProcessor.release): were a position ever decided unmasked, its token is dropped if the grammar
forbids it and decoding goes on from the valid prefix, so the output is the constrained greedy output in
any case.

Each step re-sends the whole context. With block reuse the executor finds every block of it stored
by the previous step, its partial last block included, so a step costs the target K + 1 tokens (the
last context token and the K drafts) and a round trip (docs/trtllm-0.12-jetson.md §9); without reuse
every step would re-prefill the whole prompt, and 0.12 does not load a draft-tokens target without it.

The end-of-turn ids other than the Request's one `end_id` (Llama 3's <|eot_id|>, <|end_of_text|>,
<|eom_id|>) and a request's stop_token_ids go into Request(stop_words=[[id], ...]), so the engine stops
by itself there.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Generator, Iterator
from typing import Any, Literal, Optional

from ...errors import OrinError
from ...runtime.generate import Result, SpecStats, Timings
from ...runtime.sampling import SamplingParams
from ...runtime.speculative import AdaptiveK, CombinedDrafter, LookupDrafter
from ...runtime.text import TextStream
from .drafter import EngineDrafter
from .prefix_reuse import CachedTokens
from .responses import cancel_request, follow
from .stepped import WAIT, EngineView, Stepped

log = logging.getLogger(__name__)


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < len(a) and n < len(b) and a[n] == b[n]:
        n += 1
    return n


class TrtllmGeneration(Stepped):
    """A planning call: plain or speculative decoding, streamed (module doc). Closing it early (or an
    error) cancels the request in flight."""

    def __init__(self, engine: EngineView, prompt_ids: list[int], params: SamplingParams, mode: str,
                 constraint=None):
        super().__init__(engine, prompt_ids)
        self.params, self.mode = params, mode
        self.constraint = constraint  # the plan grammar, applied by the target's post-processor (grammar.py)
        self.stream = TextStream(engine.tokenizer, params.stop)
        self.stop_ids = engine.eos_ids | set(params.stop_token_ids)
        self.timings = Timings(prompt_tokens=len(self.prompt_ids), cached_prompt_tokens=0,
                               computed_prompt_tokens=len(self.prompt_ids))
        self._active: Optional[tuple[Any, int]] = None  # (executor, id) of a request that may still run
        self._cached = CachedTokens(engine, self.prompt_ids, self.timings)  # what the cache served the prompt
        self._unmasked = False  # the last verify returned a token the grammar forbids (dropped)
        self._seed_calls = 0
        self._rng: Optional[random.Random] = None

    # ---------------------------------------------------------------- pieces

    def _seed(self) -> int:
        """The request's random_seed. 0.12's default seed is 0 (R defaultDecodingParams.h L58-61), so an
        unseeded request gets a fresh one; a seeded generation passes its seed, and its later requests
        (speculative steps) get seeds drawn from it, so that no two steps replay the same random stream."""
        self._seed_calls += 1
        if self.params.seed is not None and self._seed_calls == 1:
            return self.params.seed
        if self._rng is None:
            seed = self.params.seed
            self._rng = random.Random(seed) if seed is not None else random.SystemRandom()
        return self._rng.getrandbits(63)

    def _sampling(self) -> Any:
        if self.params.greedy:
            return self.engine.greedy_config()
        return self.engine.sampled_config(self.params, self._seed())

    def _take(self, tok: int) -> tuple[str, bool]:
        """One decided token through the stop checks: (text to emit, whether generation is over)."""
        if not self._out:
            self.timings.ttft_s = time.perf_counter() - self._t0
        if tok in self.stop_ids:
            self._finish = "stop"
            return "", True
        self._out.append(tok)
        self._ctx.append(tok)
        delta, stopped = self.stream.push(tok)
        if stopped:
            self._finish = "stop"
            return delta, True
        if len(self._out) >= self.params.max_tokens:
            self._finish = "length"
            return delta, True
        return delta, False

    def _ended_by_engine(self) -> None:
        """The engine finished a request early: its end_id, or its max_seq_len cap (llmRequest.h L281-290)."""
        self._finish = "length" if len(self._ctx) >= self.engine.max_seq_len else "stop"
        self._done = True

    def _decode(self, n: int) -> Generator[Any, None, int]:
        """Up to n tokens of plain decoding, streamed; returns how many the engine produced."""
        client = self._register([])
        produced: list[int] = []
        try:
            request = self.engine.request(self._ctx, n, streaming=True, sampling=self._sampling(),
                                          stop_ids=self.stop_ids, grammar_client=client)
            for item in self._run(self.engine.target_executor, request, client):
                if item is None:
                    yield WAIT
                    continue
                for tok in item[0]:
                    produced.append(tok)
                    delta, done = self._take(tok)
                    if delta:
                        yield delta
                    if done:
                        self._done = True
                        self._cancel()  # stop string, extra stop id or max_tokens: nothing more is wanted
                        return len(produced)
            if len(produced) < n:
                self._ended_by_engine()
            return len(produced)
        finally:
            if client is not None:
                self._unregister(client, produced)

    def _verify(self, draft: list[int]) -> Generator[Any, None, int]:
        """One speculative step: the target checks `draft`; returns how many draft tokens it accepted."""
        client = self._register(draft)
        new: list[int] = []
        try:
            request = self.engine.request(self._ctx, len(draft) + 1, streaming=False, sampling=self._sampling(),
                                          draft=draft, stop_ids=self.stop_ids, grammar_client=client)
            for item in self._run(self.engine.target_executor, request, client):
                if item is None:
                    yield WAIT
                    continue
                new += item[0]
        finally:
            if client is not None:
                valid = self._unregister(client, new)
                if valid < len(new):  # a position decided unmasked (module doc): keep the valid prefix
                    log.warning("TensorRT-LLM decided a draft position the grammar forbids (its logits were "
                                "not post-processed): %d of %d tokens kept", valid, len(new))
                    del new[valid:]
                    self._unmasked = True
        accepted = _common_prefix(draft, new)
        for tok in new:
            delta, done = self._take(tok)
            if delta:
                yield delta
            if done:
                self._done = True
                return accepted
        if len(new) <= len(draft) and accepted == len(new) and not self._unmasked:
            self._ended_by_engine()  # no token of its own after the accepted ones: it hit end_id
        self._unmasked = False
        return accepted

    def _register(self, draft: list[int]) -> Optional[int]:
        """The request's grammar state under a fresh client_id, before the request exists: its first
        step is already masked. None for an unconstrained request."""
        if self.constraint is None:
            return None
        return self.engine.grammar.register(self.constraint, len(self._ctx), draft)

    def _unregister(self, client: int, produced: list[int]) -> int:
        """Forget the client's grammar state, the grammar caught up with `produced` (what the request
        returned): how many of them the grammar allows."""
        return self.engine.grammar.release(client, produced)

    def _run(self, executor: Any, request: Any, client: Optional[int] = None) -> Iterator[Optional[tuple]]:
        """Enqueue `request` and follow it (None while its response has not come); while it may still
        produce responses it is `_active`, the request that closing the iterator (or a stop) cancels.
        The generation's first request is the one that reads the prompt: once its first response is in,
        its blocks were matched, and what the cache served is measured. A grammar step the
        post-processor could not place (grammar.py) fails the request."""
        engine = self.engine
        first = not self._cached.measured and executor is engine.target_executor
        if first:
            self._cached.before()
        request_id = engine.enqueue(executor, request)
        self._active = (executor, request_id)
        if client is not None:
            engine.grammar.bind(client, request_id)

        def received_last() -> None:  # the final (or an error) response is in: nothing left to cancel
            self._active = None

        for item in follow(engine.mailbox(executor), request_id, on_last=received_last, wait=False):
            if item is not None:
                if client is not None:
                    why = engine.grammar.error(request_id)
                    if why is not None:
                        raise OrinError(f"the grammar could not be applied to this request: {why}")
                if first:
                    first = False
                    self._cached.measure()
            yield item

    def forget(self) -> None:
        self._active = None  # the executor is being replaced: nothing to cancel on it

    def _cancel(self) -> None:
        if self._active is not None:
            executor, request_id = self._active
            self._active = None
            cancel_request(self.engine.mailbox(executor), request_id)

    def _drafter(self):
        """This generation's drafter: a lookup drafter of its own on the engine's shared history (several
        generations run at once), the draft engine, or both."""
        engine = self.engine
        lookup = LookupDrafter(history=engine.lookup.history)
        if self.mode == "lookup":
            return lookup
        if self.mode == "draft_model":
            return EngineDrafter(engine)
        if self.mode == "combined":
            return CombinedDrafter(lookup, EngineDrafter(engine))
        return None

    def _speculate(self, drafter, stats: SpecStats) -> Generator[Any, None, None]:
        engine, params = self.engine, self.params
        k_max = engine.draft_len
        adapt = AdaptiveK(k_max, k_max)  # k_max = the engine's --max_draft_len: more is refused
        while not self._done:
            remaining = params.max_tokens - len(self._out)
            # A request's input plus its draft must fit max_input_len (R≡J llmRequest.h L247-278); each
            # step re-sends the context as input, so once it nears max_input_len, the rest is plain.
            room = engine.max_input_len - len(self._ctx)
            if room <= 1:
                stats.steps += yield from self._decode(remaining)
                break
            k = min(adapt.next_k(), k_max, remaining - 1, room - 1)
            draft = drafter.propose(self._ctx, k, params, None)[0][:k] if k > 0 else []
            if draft and self.constraint is not None:  # a forbidden token is never verified (module doc)
                draft = draft[:self.constraint.valid_prefix(draft)]
            if draft:
                accepted = yield from self._verify(draft)
                adapt.update(len(draft), accepted)
                stats.drafted += len(draft)
                stats.accepted += accepted
                stats.steps += 1
                continue
            # No draft: the drafter found nothing, AdaptiveK paused drafting, or one token is left. Every
            # request re-sends the context, so decode a few tokens per request rather than one: the rest
            # of the pause, else k_max tokens; never past max_input_len (the next step's input).
            chunk = adapt.paused + 1 if adapt.paused else k_max
            adapt.paused = 0
            stats.steps += yield from self._decode(max(1, min(remaining, room, chunk)))

    # ---------------------------------------------------------------- the loop

    def _steps(self) -> Iterator[Any]:
        self._t0 = time.perf_counter() if self.started is None else self.started
        self._ctx: list[int] = list(self.prompt_ids)
        self._out: list[int] = []
        self._finish: Literal["stop", "length"] = "length"
        self._done = False
        stats = SpecStats(drafter=self.mode)
        drafter = self._drafter()
        try:
            if drafter is None:
                yield from self._decode(self.params.max_tokens)
                stats.steps = max(0, len(self._out) - 1)  # as torch: decode steps after the prefill's token
            else:
                drafter.begin(self._ctx)
                yield from self._speculate(drafter, stats)
            tail = self.stream.flush()
            if tail:
                yield tail
        finally:
            self._cancel()  # closed early, or failed: the request in flight is not wanted any more
            if drafter is not None:
                drafter.finish(self._out)
        self.timings.completion_tokens = len(self._out)
        self.timings.total_s = time.perf_counter() - self._t0
        self.result = Result(self.stream.text, self._out, self._finish, self.timings, stats)

    def run(self) -> Result:
        for _ in self:
            pass
        assert self.result is not None
        return self.result
