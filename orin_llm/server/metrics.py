"""Prometheus metrics, on a registry of the daemon's own (no process-global state).

Outcomes of `orin_llm_requests_total`: ok, invalid (4xx), rejected (queue full), cancelled
(client went away), deadline, shutdown, error (5xx, a bug). TTFT and latency count from the
request's arrival, queue wait included: what a client sees.

`orin_llm_cached_prompt_tokens_total` counts only prompt tokens a request did not compute (its
prompt's blocks that the KV cache held); `orin_llm_computed_prompt_tokens_total` counts what the
engine fed through prefill for requests. With no preemption the two add up to the prompt tokens.

With `--remote` (runtime/remote), `orin_llm_answers_total` counts answers by who served them (`remote`,
`local`) and, for a local one, why (`fallback_reason`: backends/remote/hedged.py's REASONS; `none` for a
remote answer); a remote answer's time is split into the network's and the engine's
(`orin_llm_remote_network_seconds`, `orin_llm_remote_engine_seconds`), as the answer's `remote` says.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

if TYPE_CHECKING:
    from ..planning.planner import Planner
    from ..runtime.generate import Result

ENDPOINTS = ("plan", "chat", "environment", "state")
OUTCOMES = ("ok", "invalid", "rejected", "cancelled", "deadline", "shutdown", "error")
SECONDS = (0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 60, 120)
RATES = (1, 2, 5, 10, 20, 30, 50, 75, 100, 150, 200, 300, 500)


class Watched(Protocol):
    """What the gauges read: server/worker.py's Worker (which imports this module, not the reverse)."""

    capacity: int
    planner: Planner

    @property
    def depth(self) -> int: ...

    @property
    def running(self) -> int: ...


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter("orin_llm_requests", "Requests by endpoint and outcome",
                                ["endpoint", "outcome"], registry=r)
        for e in ENDPOINTS:
            for o in OUTCOMES:
                self.requests.labels(e, o)
        self.queue_wait = Histogram("orin_llm_queue_wait_seconds", "Arrival to start on the engine",
                                    ["endpoint"], buckets=SECONDS, registry=r)
        self.ttft = Histogram("orin_llm_ttft_seconds", "Arrival to first token", ["endpoint"],
                              buckets=SECONDS, registry=r)
        self.latency = Histogram("orin_llm_request_seconds", "Arrival to last token", ["endpoint"],
                                 buckets=SECONDS, registry=r)
        self.decode = Histogram("orin_llm_decode_tokens_per_second", "Decode speed per request",
                                ["endpoint"], buckets=RATES, registry=r)
        self.prompt = Counter("orin_llm_prompt_tokens", "Prompt tokens", ["endpoint"], registry=r)
        self.cached = Counter("orin_llm_cached_prompt_tokens", "Prompt tokens served from the KV "
                              "cache (a pinned home or any cached block; not computed for the request)",
                              ["endpoint"], registry=r)
        self.computed = Counter("orin_llm_computed_prompt_tokens", "Prompt tokens the engine computed (prefill) "
                                "for requests", ["endpoint"], registry=r)
        self.completion = Counter("orin_llm_completion_tokens", "Generated tokens", ["endpoint"], registry=r)
        self.drafted = Counter("orin_llm_speculation_drafted_tokens", "Draft tokens proposed",
                               ["drafter"], registry=r)
        self.accepted = Counter("orin_llm_speculation_accepted_tokens", "Draft tokens accepted",
                                ["drafter"], registry=r)
        self.acceptance = Histogram("orin_llm_speculation_acceptance_rate", "Acceptance rate per request",
                                    ["drafter"], buckets=[i / 10 for i in range(1, 11)], registry=r)
        self.answers = Counter("orin_llm_answers", "Answers by who served them (remote or local, with --remote) "
                               "and why the local engine answered", ["endpoint", "served_by", "fallback_reason"],
                               registry=r)
        self.remote_network = Histogram("orin_llm_remote_network_seconds", "A remote answer's network time (link "
                                        "setup and one round trip)", ["endpoint"], buckets=SECONDS, registry=r)
        self.remote_engine = Histogram("orin_llm_remote_engine_seconds", "A remote answer's time on the remote "
                                       "engine (its total less the network's)", ["endpoint"], buckets=SECONDS,
                                       registry=r)
        self._gauges = {name: Gauge(f"orin_llm_{name}", doc, registry=r) for name, doc in (
            ("queue_depth", "Requests waiting for the engine"),
            ("queue_capacity", "Most requests that may wait"),
            ("kv_cache_tokens", "Tokens in the KV cache (the pinned prefix when idle)"),
            ("kv_cache_capacity_tokens", "KV cache size in tokens"),
            ("kv_cache_bytes", "KV cache size in bytes"),
            ("prefix_tokens", "Tokens of the pinned environment prefix"),
            ("environment_version", "Version of the current environment"),
            ("running_requests", "Requests running on the engine (its batch)"),
            ("batch_size", "Requests in the engine's last step"),
            ("kv_pool_blocks", "KV blocks in the pool"),
            ("kv_pool_blocks_used", "KV blocks held by running requests or pins"),
            ("kv_pool_blocks_pinned", "KV blocks of pinned environments (never evicted)"),
            ("kv_pool_blocks_cached", "KV blocks nobody holds, kept for prefix reuse (evicted LRU)"),
            ("kv_pool_blocks_free", "KV blocks never used or evicted"),
            ("prefix_hit_tokens", "Prompt tokens served from the KV cache since the start (all requests)"),
            ("kv_pool_evictions", "Cached KV blocks evicted since the start"),
            ("preemptions", "Requests preempted (their blocks taken back) since the start"),
            ("executor_restarts", "TensorRT-LLM executors restarted by the watchdog since the start (no progress "
                                  "with requests in flight)"))}

    def watch(self, worker: Watched) -> None:
        """Gauges read on scrape: an int read from the worker's objects is atomic enough."""
        engine = worker.planner.engine
        usage = engine.kv_usage()
        g = self._gauges
        g["queue_depth"].set_function(lambda: worker.depth)
        g["queue_capacity"].set(worker.capacity)
        g["kv_cache_tokens"].set_function(lambda: engine.kv_usage()["tokens"])
        g["kv_cache_capacity_tokens"].set(usage["capacity_tokens"])
        g["kv_cache_bytes"].set(usage["bytes"])
        planner = worker.planner
        g["prefix_tokens"].set_function(lambda: len(planner.prefix.ids) if planner.prefix else 0)
        g["environment_version"].set_function(lambda: planner.version)
        g["running_requests"].set_function(lambda: worker.running)
        pool = lambda key: (lambda: engine.kv_usage().get("pool", {}).get(key, 0))  # noqa: E731
        for gauge, key in (("kv_pool_blocks", "blocks"), ("kv_pool_blocks_used", "used"),
                           ("kv_pool_blocks_pinned", "pinned"), ("kv_pool_blocks_cached", "cached"),
                           ("kv_pool_blocks_free", "free"), ("prefix_hit_tokens", "hit_tokens"),
                           ("kv_pool_evictions", "evictions")):
            g[gauge].set_function(pool(key))
        g["batch_size"].set_function(lambda: engine.kv_usage().get("batch", 0))
        g["preemptions"].set_function(lambda: engine.kv_usage().get("preemptions", 0))
        g["executor_restarts"].set_function(lambda: engine.kv_usage().get("executor", {}).get("restarts", 0))

    def count(self, endpoint: str, outcome: str) -> None:
        self.requests.labels(endpoint, outcome).inc()

    def observe(self, endpoint: str, result: Result, queue_wait_s: float, latency_s: float) -> None:
        t, s = result.timings, result.speculation
        self.count(endpoint, "ok")
        self.queue_wait.labels(endpoint).observe(queue_wait_s)
        self.ttft.labels(endpoint).observe(queue_wait_s + t.ttft_s)
        self.latency.labels(endpoint).observe(latency_s)
        if t.completion_tokens > 1:
            self.decode.labels(endpoint).observe(t.decode_tokens_per_s)
        self.prompt.labels(endpoint).inc(t.prompt_tokens)
        self.cached.labels(endpoint).inc(t.cached_prompt_tokens)
        self.computed.labels(endpoint).inc(t.computed_prompt_tokens)
        self.completion.labels(endpoint).inc(t.completion_tokens)
        if s.drafted:
            self.drafted.labels(s.drafter).inc(s.drafted)
            self.accepted.labels(s.drafter).inc(s.accepted)
            self.acceptance.labels(s.drafter).observe(s.acceptance_rate)

    def served(self, endpoint: str, report: dict) -> None:
        """A finished answer's `served_by` report (runtime/remote's HedgedRequest.report)."""
        by = report.get("served_by")
        if by is None:
            return
        self.answers.labels(endpoint, by, report.get("fallback_reason") or "none").inc()
        remote = report.get("remote")
        if by == "remote" and remote:
            self.remote_network.labels(endpoint).observe(remote["network_ms"] / 1e3)
            self.remote_engine.labels(endpoint).observe(remote["engine_ms"] / 1e3)

    def render(self) -> bytes:
        return generate_latest(self.registry)
