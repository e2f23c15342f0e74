"""The TensorRT-LLM runtime against what the fake executor does as 0.12 does (tests/backends/trtllm/fake_trtllm.py,
"How the fake runs requests"): responses from the executor's thread, cancel with no final response,
requests batched in flight, long prompts chunked, KV blocks evicted least-recently-used."""

from __future__ import annotations

import time

import pytest

from orin_llm.backends.trtllm.responses import POLL
from orin_llm.runtime.sampling import SamplingParams
from tests.conftest import tiny_fixture

from . import test_trtllm_engine
from .test_trtllm_engine import all_read, prompt, target_executor
from .trtllm_both import fake_only

make = test_trtllm_engine.make  # the fixture: a loaded engine with the scripted models

tiny_engine_dir = tiny_fixture("engine_dir")  # random weights do here (tests/conftest.py)


@fake_only("toggles whether a final response follows cancel_request, which 0.12 does not document")
@pytest.mark.parametrize("sends_final", [False, True])
def test_a_cancelled_request_costs_no_wait_whatever_cancel_sends_back(make, fake, monkeypatch, sends_final):
    """0.12's executor.h does not say whether a final response follows cancel_request: neither case stalls."""
    monkeypatch.setattr(fake, "CANCEL_SENDS_FINAL", sends_final)
    eng = make(draft=False)
    ids = prompt(eng)
    free = eng.generate(ids, SamplingParams(max_tokens=40), speculation="none").run().text
    stop = free.split()[3]
    t0 = time.perf_counter()
    gen = eng.generate(ids, SamplingParams(max_tokens=40, stop=[stop]), speculation="none")
    assert "".join(gen) == free[: free.index(stop)] and gen.result.finish_reason == "stop"
    elapsed = time.perf_counter() - t0
    target = target_executor(fake)
    assert target.cancelled == [2] and target.polls_of_cancelled == 0  # never waited on the cancelled id
    assert elapsed < POLL.total_seconds() * 5  # the old drain waited up to 20 polls for a final response
    eng.generate(ids, SamplingParams(max_tokens=3), speculation="none").run()  # later polls drop what was left
    assert target.idle() and all_read(fake)


@fake_only("an engine built with max_batch_size 3, and the batch the fake saw in one iteration")
def test_requests_run_together_inside_the_executor(make, fake):
    """max_batch_size generations at once (the engine's build config): batched in flight, each its own answer."""
    eng = make(draft=False, build={"max_batch_size": 3})
    assert eng.capabilities.max_batch == 3 and eng.stats().max_running == 3
    texts = ["Put the cup in the sink.", "Open the door.", "Move the apple towards the table."]
    gens = [eng.generate(prompt(eng, t), SamplingParams(max_tokens=30), speculation=m)
            for t, m in zip(texts, ["none", "lookup", "none"], strict=True)]
    for g in gens:
        eng.submit(g)
    while eng.busy:
        eng.step()
    target = target_executor(fake)
    assert target.max_running_seen == 3  # all three were in one iteration
    for t, g in zip(texts, gens, strict=True):
        assert g.error is None and g.result.token_ids == eng.reference.greedy_run(prompt(eng, t), 30)
    assert all_read(fake)


@fake_only("an engine whose config.json names no max_batch_size")
def test_the_daemon_runs_what_the_plan_reserved(make):
    """Without max_batch_size in config.json, the manifest's limits (what the memory plan sized the KV for)."""
    eng = make(draft=False, limits={"max_batch_size": 2})
    assert eng.capabilities.max_batch == 2


@fake_only("engines built with and without chunked context, and the chunks the fake ran")
@pytest.mark.parametrize("chunked", [True, False])
def test_a_long_prompt_prefills_in_chunks_of_whole_blocks(make, fake, chunked):
    eng = make(draft=False, chunked_context=chunked, build={"max_num_tokens": 64})
    ids = prompt(eng, "Tidy up the kitchen table and then open the door. " * 16)
    assert len(ids) > 3 * 64 and len(ids) % 64
    res = eng.generate(ids, SamplingParams(max_tokens=8), speculation="none").run()
    assert res.token_ids == eng.reference.greedy_run(ids, 8)
    run = target_executor(fake).runs[1]
    if chunked:
        assert len(run.chunks) == -(-len(ids) // 64) and sum(run.chunks) == len(ids)
        assert all(c == 64 for c in run.chunks[:-1])  # max_num_tokens per iteration, whole blocks of 32
    else:
        assert run.chunks == [len(ids)]


@fake_only("forces an eviction in a pool of 12 blocks, which no real build makes")
def test_stored_blocks_are_evicted_least_recently_used(make, fake):
    """A pool of 12 blocks of 32: two pinned homes fill it; using the second and pinning a third evicts the
    first's blocks, not the second's. What a request is served is measured, not promised by the pin."""
    eng = make(draft=False, kv_tokens=(12 * 32, 0))
    words = eng.encode(" kitchen table robot cup moves apple towards sink door opens" * 60)
    homes = [words[i * 153:i * 153 + 133] for i in range(3)]  # 4 whole blocks and a partial one each
    assert len({tuple(h[:32]) for h in homes}) == 3 and all(len(h) == 133 for h in homes)
    task = eng.encode(" Go.")
    eng.pin(homes[0])
    eng.pin(homes[1])
    second = eng.generate(homes[1] + task, SamplingParams(max_tokens=4), speculation="none").run()
    assert second.timings.cached_prompt_tokens == 128
    eng.pin(homes[2])
    target = target_executor(fake)
    assert target.evicted > 0
    again = eng.generate(homes[1] + task, SamplingParams(max_tokens=4), speculation="none").run()
    first = eng.generate(homes[0] + task, SamplingParams(max_tokens=4), speculation="none").run()
    assert first.timings.cached_prompt_tokens < 128 == again.timings.cached_prompt_tokens
    assert eng.cached_prefix(homes[0] + task) == 128  # the pin's promise, which the pool did not keep
    usage = eng.kv_usage()
    assert usage["source"] == "executor" and usage["pool"]["blocks"] == 12 and usage["capacity_tokens"] == 384
