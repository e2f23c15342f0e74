"""The fake as slow and as fragile as 0.12 (fake_trtllm's switches): a load that holds the GIL, only full KV
blocks shared. What they reveal is reported, not assumed away: the load's stall (server/load_meter.py,
/health `load`), and `cached_prompt_tokens` that stays what the executor really matched."""

from __future__ import annotations

import pytest

from orin_llm.backends.trtllm.engine import TrtllmEngine
from orin_llm.planning.planner import Planner
from orin_llm.runtime.sampling import SamplingParams
from orin_llm.server.worker import Worker
from tests.conftest import tiny_fixture

from .test_trtllm_engine import install_models, make_engine_dir
from .test_trtllm_grammar import SMALL_HOME

tiny_engine_dir = tiny_fixture("engine_dir")  # random weights do here (tests/conftest.py)
HOLD_S = 1.5


def test_a_load_that_holds_the_gil_is_measured_and_reported(tmp_path, engine_dir, fake):
    """While Executor(...) keeps the GIL no other Python thread runs (the daemon's event loop neither): the
    worker's load meter sees a stall of the whole hold, which /health then reports under `load`."""
    path = make_engine_dir(engine_dir, tmp_path / "trt", draft=False, max_draft_len=0)
    fake.LOAD_HOLDS_GIL_S = HOLD_S

    def make_planner():
        eng = TrtllmEngine.load(path)
        install_models(fake, eng)
        return Planner(eng, SMALL_HOME)

    worker = Worker(make_planner, queue_size=2)
    try:
        assert worker.wait_loaded(60)
        report = worker.load_report
        assert report["longest_stall_s"] >= HOLD_S - 0.2 and report["seconds"] >= HOLD_S
    finally:
        worker.stop()
        worker.planner.engine.close()


def prompt_after(eng, pin: list[int], words: str) -> list[int]:
    return pin + eng.tokenizer.encode(words, add_special_tokens=False)


@pytest.mark.parametrize("full_only", [False, True])
def test_cached_prompt_tokens_stay_what_the_executor_matched(tmp_path, engine_dir, fake, full_only):
    """A pinned prefix that ends inside a block: only its whole blocks serve a request that starts with it,
    whether 0.12 shares stored partial blocks or only full ones (docs/source/kv_cache_reuse.md L52)."""
    fake.FULL_BLOCKS_ONLY = full_only
    eng = TrtllmEngine.load(make_engine_dir(engine_dir, tmp_path / "trt", draft=False, max_draft_len=0,
                                            tokens_per_block=32))
    try:
        eng.reference = install_models(fake, eng)
        pin = eng.tokenizer.encode(" kitchen table robot cup" * 40, add_special_tokens=False)[:75]  # 2 blocks + 11
        assert len(pin) == 75
        eng.pin(pin)
        gen = eng.generate(prompt_after(eng, pin, " moves apple towards sink"), SamplingParams(max_tokens=4), "none")
        result = eng.run(gen)
        assert result.timings.cached_prompt_tokens == 64
        assert result.timings.computed_prompt_tokens == len(gen.prompt_ids) - 64
    finally:
        eng.close()


def test_speculation_recomputes_the_partial_block_when_only_full_blocks_are_shared(tmp_path, engine_dir, fake):
    """Each speculative step is a new request over the whole context (docs/trtllm-0.12-jetson.md §9). Where a
    stored partial block is matched, a step computes the drafts and the last token; where only full blocks are
    shared, it also computes the context's tail past its last whole block: more blocks are taken, fewer are
    reused, and the greedy output is the same."""
    outputs, reused, allocated = {}, {}, {}
    for full_only in (False, True):
        fake.reset()
        fake.FULL_BLOCKS_ONLY = full_only
        eng = TrtllmEngine.load(make_engine_dir(engine_dir, tmp_path / f"trt{full_only}", tokens_per_block=32))
        try:
            eng.reference = install_models(fake, eng)
            prompt = eng.tokenizer.encode(" robot cup moves apple towards sink" * 6, add_special_tokens=False)
            before = eng.target_executor.kv.reused_blocks, eng.target_executor.kv.alloc_total_blocks
            result = eng.run(eng.generate(prompt, SamplingParams(max_tokens=48), "lookup"))
            outputs[full_only] = result.token_ids
            reused[full_only] = eng.target_executor.kv.reused_blocks - before[0]
            allocated[full_only] = eng.target_executor.kv.alloc_total_blocks - before[1]
            assert result.speculation.steps > 1
        finally:
            eng.close()
    assert outputs[True] == outputs[False]
    assert reused[True] < reused[False] and allocated[True] > allocated[False]
