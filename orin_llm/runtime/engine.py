"""An engine directory, loaded for the torch backend: tokenizer, models, the paged KV cache, and
the step loop that serves every request in flight (continuous batching, nano-vllm's shape):

    generate.py      a request: passive state        scheduler.py  which requests run this step
    model_runner.py  their rows, one forward         decider.py    the logits into their tokens
    cache.py         their KV blocks (prefix reuse, pins)          llama.py      the model

The engine owns every change of a request's state; data flows one way, from here to the scheduler,
the model runner and the decider, and from them to the request. A caller that steps the engine
itself iterates `deltas(gen)` (or calls `run(gen)`); the daemon's worker thread steps it for
everyone. Either way only one thread touches an engine.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Optional

import torch

from ..errors import OrinError, PromptTooLong
from ..manifest import Manifest, load_manifest
from .backend import Capabilities, EngineStats
from .block_manager import NoBlocks
from .cache import PagedCache, Pin
from .constraint import Constraint, Vocabulary
from .decider import Decider
from .drafters import DEFAULT_HISTORY, attach_cache, choose_drafter
from .engine_config import EngineConfig
from .engine_files import (
    BLOCK_SIZE,
    DTYPES,
    EngineText,
    eos_ids,
    k_smoothing_for,
    load_pool,
    load_tokenizer,
    lookup_seed,
    pool_tokens,
)
from .generate import Generation, Result
from .history_store import HistoryStore, engine_identity
from .host import apply_thread_setting, pick_device
from .kernel_plan import compute_dtype
from .kv_cache import Int8KVCache, KVCache
from .llama import Item, Llama
from .model_runner import ModelRunner
from .sampling import SamplingParams
from .scheduler import Scheduler, SchedulerConfig
from .tasks import run_pin
from .weights import check_kernels, load_llama, release_freed_memory

log = logging.getLogger(__name__)




DRAFT_LEN = 4  # a manifest's draft_len where its limits name none


def step_rows(draft_len: int) -> int:
    """The most rows one request puts in a decode step (its tokens not computed yet and this step's draft:
    model_runner.py), the width an exact step covers and how far past max_seq_len a verify may write; the one
    place this rule is written."""
    return 2 * draft_len + 1

class Engine(EngineText):
    def __init__(self, engine_dir: Path, manifest: Manifest, tokenizer, model: Llama, cache: PagedCache,
                 draft_loader: Optional[Callable[[], Llama]] = None, prefill_chunk_tokens: int = 256):
        """draft_loader: loads the draft model, on the first request that asks for it (load_draft)."""
        self.dir, self.manifest, self.tokenizer = engine_dir, manifest, tokenizer
        self.model, self.cache = model, cache
        self.draft_model: Optional[Llama] = None  # None until loaded
        self._draft_loader = draft_loader
        self._draft_lock = threading.Lock()
        self.device = cache.target_pool.device
        limits = manifest.limits
        self.max_input_len, self.max_seq_len = limits["max_input_len"], limits["max_seq_len"]
        self.draft_len = limits.get("draft_len", DRAFT_LEN)
        # rows of one request's decode step (the kernel plan's decode_width when exact)
        self.decode_rows = model.plan.decode_width or step_rows(self.draft_len)
        self.scheduler = Scheduler(SchedulerConfig(
            max_running=limits.get("max_batch_size", 1), max_step_tokens=limits.get("max_num_tokens", 2048),
            prefill_chunk_tokens=prefill_chunk_tokens, block_size=cache.block_size, draft_len=self.draft_len))
        self.runner = ModelRunner(model, cache, self.decode_rows, self.max_seq_len)
        self.decider = Decider(self.decode_rows, self.max_seq_len)
        self.eos_ids = eos_ids(tokenizer, engine_dir / manifest.target.dir)
        self.lookup_seed = lookup_seed(engine_dir, manifest)
        # the lookup drafter's histories, one per environment (in memory; the daemon persists them)
        self.histories = HistoryStore(None, engine_identity(manifest), self.lookup_seed)
        self._vocab: Optional[Vocabulary] = None
        self.steps = 0  # engine steps run (a forward each)
        self.preemptions = 0
        self.last_batch = 0  # requests in the last step

    @property
    def prefill_chunk_tokens(self) -> int:
        """Prompt tokens a request computes per step: the scheduler's setting."""
        return self.scheduler.config.prefill_chunk_tokens

    @prefill_chunk_tokens.setter
    def prefill_chunk_tokens(self, tokens: int) -> None:
        self.scheduler.config = dataclasses.replace(self.scheduler.config, prefill_chunk_tokens=tokens)

    @classmethod
    def load(cls, engine_dir: str | Path, config: Optional[EngineConfig] = None,
             manifest: Optional[Manifest] = None, **given: Any) -> Engine:
        """The engine directory loaded as `config` says (engine_config.py: filled where the process starts,
        `EngineConfig.at_edge`, the one place that reads the environment's settings). `given`: the config's
        fields instead of a config, the rest their defaults (tests and one-line scripts).
        manifest: the directory's manifest, read and verified already (backends/loader.py); else read here."""
        if config is None:
            config = EngineConfig(**given)
        elif given:
            raise TypeError(f"Engine.load takes a config or its fields, not both: {', '.join(sorted(given))}")
        device, kv_cache, kv_tokens, weights = config.device, config.kv_cache, config.kv_tokens, config.weights
        switches, exact, draft = config.switches, config.exact, config.draft
        engine_dir = Path(engine_dir)
        manifest = manifest if manifest is not None else load_manifest(engine_dir)
        apply_thread_setting(config.threads)
        if manifest.backend != "torch":
            raise OrinError(f"{engine_dir} was built for the {manifest.backend!r} backend; "
                            "the torch runtime loads torch engines only")
        device = pick_device(device)
        limits = manifest.limits
        rows = step_rows(limits.get("draft_len", DRAFT_LEN))
        positions = limits["max_seq_len"] + rows  # a verify may run past
        built = manifest.target.weights
        if weights not in (None, built) and not (weights == "fp32" and built == "q4_1"):
            raise OrinError(f"weights {weights!r}: this engine's target holds {built!r} weights"
                            + (" (or \"fp32\", its float export)" if built == "q4_1" else ""))
        if weights in (None, built):
            check_kernels(manifest.target.kernels, device, f"{engine_dir}'s target ({built} weights)")
        # exact: the target's decode steps batch-invariant over k_max + 1 rows (llama.py)
        width = rows if exact else 0
        dtype = compute_dtype(device, weights or built, DTYPES[manifest.target.dtype])
        model = load_llama(engine_dir / manifest.target.dir, manifest.target.arch, dtype,
                           device, positions, weights or built, switches, kv_cache or manifest.target.kv_cache.dtype,
                           width, k_smoothing_for(engine_dir, manifest.target, kv_cache))
        num_blocks = math.ceil((kv_tokens or pool_tokens(manifest)) / BLOCK_SIZE)
        target_pool = load_pool(engine_dir, manifest.target, "target", num_blocks, device, kv_cache)
        draft_loader = draft_pool = None
        if draft and manifest.draft is not None:
            d = manifest.draft
            draft_loader = functools.partial(load_llama, engine_dir / d.dir, d.arch,
                                             compute_dtype(device, d.weights, DTYPES[d.dtype]), device,
                                             positions, d.weights, switches, kv_cache or d.kv_cache.dtype,
                                             k_smooth=k_smoothing_for(engine_dir, d, kv_cache))
            # torch.empty: the pool's pages cost no memory until the draft model writes them
            draft_pool = load_pool(engine_dir, d, "draft", num_blocks, device, kv_cache)
        engine = cls(engine_dir, manifest, load_tokenizer(engine_dir / "tokenizer"), model,
                     PagedCache(target_pool, draft_pool), draft_loader,
                     prefill_chunk_tokens=config.prefill_chunk_tokens)
        if model.plan.cuda_graphs:  # decode steps at fixed shapes in CUDA graphs (cuda_graphs.py)
            engine.runner.attach_graphs(target_pool, limits.get("max_batch_size", 1), positions)
        release_freed_memory()
        return engine

    @property
    def draft_available(self) -> bool:
        return self._draft_loader is not None

    def load_draft(self) -> Optional[Llama]:
        """The draft model, loaded now if it is not yet (None: the engine has none). The first
        draft_model/combined request pays this once (about a second for the embedded default)."""
        with self._draft_lock:
            if self.draft_model is None and self._draft_loader is not None:
                started = time.perf_counter()
                self.draft_model = self._draft_loader()
                release_freed_memory()
                log.info("draft model loaded in %.2f s (first request that asked for it)",
                         time.perf_counter() - started)
        return self.draft_model

    # ------------------------------------------------------------------ requests

    def check_prompt(self, n: int) -> None:
        if n > self.max_input_len:
            raise PromptTooLong(n, self.max_input_len)

    @property
    def speculation_modes(self) -> list[str]:
        return ["auto", "none", "lookup"] + (["draft_model", "combined"] if self.draft_available else [])

    def drafter(self, speculation: str, params: SamplingParams, constraint: Optional[Constraint] = None,
                history: str = DEFAULT_HISTORY):
        """The drafter a request asked for (drafters.py); unavailable ones are an error."""
        return choose_drafter(speculation, params, self.speculation_modes, self.name, self.histories.get,
                              self.load_draft, constraint, history)

    def generate(self, prompt_ids: list[int], params: SamplingParams, speculation: str = "auto",
                 constraint: Optional[Constraint] = None, history: str = DEFAULT_HISTORY) -> Generation:
        """A request, not yet started: `run` it, iterate `deltas(gen)`, or `submit` it and step the
        engine. `history`: which lookup history it drafts from and adds to (the planner's: the
        environment's name)."""
        drafter = self.drafter(speculation, params, constraint, history)
        self.check_prompt(len(prompt_ids))
        return Generation(prompt_ids, params, self.tokenizer, self.eos_ids, self.device, drafter, constraint,
                          draft_len=self.draft_len, draft_len_max=2 * self.draft_len)

    def vocabulary(self) -> Vocabulary:
        """The tokenizer as the grammar library sees it (built on first use)."""
        if self._vocab is None:
            self._vocab = Vocabulary(self.tokenizer, self.model.arch.vocab_size, self.eos_ids)
        return self._vocab

    def submit(self, gen: Generation) -> None:
        if gen.started is None:
            gen.started = time.perf_counter()
        self.scheduler.add(gen)

    def abort(self, gen: Generation) -> None:
        """End a request early (cancelled, closed, failed): what it computed stays cached."""
        if gen.status == "done" and gen.kv is None:
            return
        self.scheduler.remove(gen)
        if gen.kv is not None:
            self._release(gen)
        gen.status = "done"
        self.decider.close_out(gen)

    def deltas(self, gen: Generation) -> Iterator[str]:
        """Submit `gen` (if it is new) and yield its text deltas, stepping the engine while it waits
        (every request in flight advances too). Closing the iterator early ends the request: what it
        computed stays cached."""
        if gen.status == "new":
            self.submit(gen)
        try:
            while True:
                while gen.pending:
                    yield gen.pending.popleft()
                if gen.status == "done":
                    break
                if gen.error is not None:
                    raise gen.error
                self.step()
            if gen.error is not None:
                raise gen.error
        finally:
            if gen.status != "done" or gen.kv is not None:
                self.abort(gen)  # closed early (a client that went away): its blocks go back

    def run(self, gen: Generation) -> Result:
        """`gen` to its end: its result (its error raised)."""
        for _ in self.deltas(gen):
            pass
        assert gen.result is not None
        return gen.result

    @property
    def busy(self) -> bool:
        return len(self.scheduler) > 0

    # ------------------------------------------------------------------ the step

    def step(self) -> list[Generation]:
        """Admit what fits, run one forward over every scheduled request's rows, advance each;
        returns the requests that ran."""
        self.scheduler.admit(self._admit)
        batch = self.scheduler.batch()
        batch = self._make_room(batch)
        if not batch:
            return []
        items, ran = [], []
        for gen in batch:
            try:
                items.append(self.runner.prepare(gen, self.scheduler.prefill_rows(gen) if gen.prefilling else 0))
                ran.append(gen)
            except NoBlocks as e:
                # NoBlocks: the daemon answers 503 with Retry-After (the pool frees as others finish)
                self._fail(gen, NoBlocks(f"the KV pool is full ({e}); retry, or build the engine with a "
                                         "larger cache"))
        logits = self.runner.forward(items)
        self.steps += 1
        self.last_batch = len(ran)
        for gen, rows in zip(ran, logits, strict=False):
            try:
                self.decider.advance(gen, rows)
            except Exception as e:  # a bug in one request must not take the others down
                log.exception("request failed in its decode step")
                self._fail(gen, e)
                continue
            if gen.kv is not None:
                self.cache.commit(gen.kv, gen.context)
            if gen.done:
                if gen.prefill_only and gen.error is None:
                    self._pin_finished(gen)
                self._release(gen)
                self.scheduler.remove(gen)
                self.decider.close_out(gen)
        return ran

    def _admit(self, gen: Generation) -> bool:
        try:
            kv = self.cache.admit(gen.context, len(gen.context) + 1)
        except NoBlocks:
            if self.scheduler.running:
                return False  # wait for running requests to give blocks back
            self.scheduler.remove(gen)
            self._fail(gen, OrinError(
                f"the KV pool ({self.cache.capacity_tokens} tokens, {self.cache.stats()['pinned']} blocks "
                f"pinned) cannot hold this request's {len(gen.context)} tokens; unpin an environment or "
                "shorten the prompt"))
            return False
        if self.draft_model is not None:
            attach_cache(gen.drafter, kv.draft)
        gen.kv = kv  # `kv.cached` tokens of its context are already computed
        if gen.admitted is None:  # first admission (a preempted request comes back here too)
            gen.admitted = time.perf_counter()
            gen.timings.queue_s = gen.admitted - (gen.started or gen.admitted)
            gen.timings.cached_prompt_tokens = kv.cached
            if gen.drafter:
                gen.drafter.begin(gen.context)
        gen.status = "running"
        return True

    def _blocks_needed(self, gen: Generation) -> int:
        kv = gen.kv
        rows = (self.scheduler.prefill_rows(gen) if gen.prefilling
                else len(gen.context) - kv.target.length + step_rows(self.draft_len))
        return max(0, self.cache.blocks_for(kv.target.length + rows) - len(kv.blocks))

    def _make_room(self, batch: list[Generation]) -> list[Generation]:
        """Preempt the newest requests until this step's rows fit the pool (vLLM's recompute)."""
        while batch and sum(self._blocks_needed(g) for g in batch) > self.cache.blocks.available:
            victim = self.scheduler.newest_other(batch[0])
            if victim is None:
                break  # one request alone: it drafts less (model_runner.py) or fails in prepare
            self._preempt(victim)
            batch = [g for g in batch if g is not victim]
        return batch

    def _preempt(self, gen: Generation) -> None:
        """Take its blocks back (pool full). Readmitted, it computes again what it had: the prompt as
        prompt chunks, and the tokens it had emitted as decode rows ("catch-up" steps), each as its
        decode step computed it (exact, row-independent: llama.py), so the K/V it recomputes, and the
        answer, are bit for bit those it would have had without the preemption."""
        self.preemptions += 1
        self._release(gen)
        self.scheduler.remove(gen)
        self.scheduler.add(gen, front=True)  # waiting again, first in line

    def _release(self, gen: Generation) -> None:
        self.cache.commit(gen.kv, gen.context, final=True)  # what it computed stays cached
        self.cache.release(gen.kv)
        gen.kv = None

    def _fail(self, gen: Generation, error: BaseException) -> None:
        gen.error = error
        self.scheduler.remove(gen)
        if gen.kv is not None:
            self._release(gen)
        gen.status = "done"
        self.decider.close_out(gen)

    # ------------------------------------------------------------------ the cache

    def cached_prefix(self, prompt_ids: list[int]) -> int:
        """Tokens of this prompt the cache holds now (a request would not compute them)."""
        return self.cache.lookup(list(prompt_ids)).tokens(self.cache.block_size) if prompt_ids else 0

    def pin(self, ids: list[int]) -> Pin:
        """Compute `ids` (the target's K/V, and the draft's if it is loaded) and keep them cached until `unpin`:
        later prompts that start with them skip them. Steps the engine: requests in flight advance
        too. A pin that would leave no room for one full-length request is refused."""
        return run_pin(self, ids)

    def pin_request(self, ids: list[int]) -> Generation:
        """A request that computes `ids` and pins them when done (`gen.pin`); for a caller that
        steps the engine itself (the daemon's worker)."""
        self.check_prompt(len(ids))
        self.cache.check_pin(len(ids), self.max_seq_len)
        return Generation(list(ids), SamplingParams(max_tokens=1), self.tokenizer, self.eos_ids, self.device,
                          prefill_only=True)

    def _pin_finished(self, gen: Generation) -> None:
        """A pin request's prefill is done: add the draft's K/V (if the draft is loaded: otherwise
        its first request computes them, and marks the blocks), commit, and pin its blocks."""
        kv, ids = gen.kv, gen.prompt_ids
        if self.draft_model is not None and kv.draft is not None:
            self.cache.grow(kv, len(ids))
            for a in range(kv.draft.length, len(ids), self.prefill_chunk_tokens):
                b = min(len(ids), a + self.prefill_chunk_tokens)
                self.draft_model.forward_batch([Item(torch.tensor(ids[a:b], device=self.device), kv.draft, 0)])
        self.cache.commit(kv, ids, final=True)
        gen.pin = self.cache.pin(kv, ids)
        # a long prefill leaves its activations freed but resident in the C heap (hundreds of MB for a
        # 4k home: lab notes); pins are rare, the trim is cheap
        release_freed_memory()

    def unpin(self, pin: Pin) -> None:
        self.cache.unpin(pin)

    def clear_cache(self) -> int:
        """Evict every cached block nobody holds (pins and running requests keep theirs); returns
        how many. For cold measurements and tests."""
        return self.cache.blocks.evict_all()

    def contiguous_cache(self, capacity: int, draft: bool = False):
        """A one-sequence KVCache like the pool (same dtype, same INT8 scales): for reference runs
        of the model outside the engine (benchmarks, calibration checks, tests)."""
        pool = self.cache.draft_pool if draft else self.cache.target_pool
        if pool.int8:
            return Int8KVCache(pool.arch, capacity, pool.k_scale[:, :, 0, 0], pool.v_scale[:, :, 0, 0],
                               pool.dtype, self.device)
        return KVCache(pool.arch, capacity, pool.dtype, self.device)

    def kernels(self) -> dict:
        """Which kernels the target runs here, per step kind and cache dtype, and why not where one of
        our fast paths is not used (/health): a daemon that fell back to torch's ops answers the same,
        only slower, so say it. The plan was made at load (kernel_plan.py)."""
        graphs = {"cuda_graphs_state": self.runner.graphs.report()} if self.runner.graphs is not None else {}
        return {**self.model.plan.report(), "device": str(self.device), "threads": torch.get_num_threads(), **graphs}

    def kv_usage(self) -> dict:
        """What the server reports: backend-neutral (TrtllmEngine has the same method)."""
        stats = self.cache.stats()
        pool = self.cache.target_pool
        running = sum(g.kv.target.length for g in self.scheduler.running if g.kv is not None)
        return {"device": str(self.device), "tokens": stats["pinned_tokens"] + running,  # held: pinned + running
                "capacity_tokens": self.cache.capacity_tokens,
                "bytes": pool.nbytes + (self.cache.draft_pool.nbytes if self.cache.draft_pool else 0),
                "pool": stats, "batch": self.last_batch, "preemptions": self.preemptions,
                "draft_loaded": self.draft_model is not None}

    # ------------------------------------------------------------------ the Backend interface (backend.py)

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(backend="torch", max_batch=self.manifest.limits.get("max_batch_size", 1),
                            tunable_batch=True, paced_prefill=True, persistent_histories=True, grammars=True,
                            kernels=True, pins_hold=True, speculation=tuple(self.speculation_modes))

    def stats(self) -> EngineStats:
        sched = self.scheduler
        return EngineStats(waiting=len(sched.waiting), running=len(sched.running),
                           max_running=sched.config.max_running, max_step_tokens=sched.config.max_step_tokens,
                           prefill_chunk_tokens=self.prefill_chunk_tokens)

    def tune(self, max_running: Optional[int] = None, prefill_chunk_tokens: Optional[int] = None) -> None:
        """At most `max_running` requests in the batch (up to the max_batch_size the pool is sized for);
        `prefill_chunk_tokens` prompt tokens per request per step."""
        if max_running is not None:
            limit = self.capabilities.max_batch
            if not 1 <= max_running <= limit:
                raise OrinError(f"a batch of {max_running} requests: give 1 to this engine's max_batch_size of "
                                f"{limit} (its KV pool is sized for that many)")
            self.scheduler.config = dataclasses.replace(self.scheduler.config, max_running=max_running)
        if prefill_chunk_tokens is not None:
            if prefill_chunk_tokens < 1:
                raise OrinError(f"prefill chunks of {prefill_chunk_tokens} tokens: give at least 1")
            self.prefill_chunk_tokens = prefill_chunk_tokens

    def persist_histories(self, directory: Path) -> None:
        """The lookup histories live in `directory` from now on, one file per environment (history_store.py)."""
        self.histories = HistoryStore(Path(directory), self.histories.identity, self.lookup_seed)

    def save_histories(self) -> None:
        if self.histories.directory is not None:
            self.histories.save_dirty()

    def close(self) -> None:
        """Nothing to free explicitly: the models and pools go with the engine's last reference."""
