"""The TensorRT-LLM runtime against a fake executor module with the exact 0.12.0-jetson bindings, and
against the real bindings where they import (the `eng` fixture, tests/backends/trtllm/trtllm_both.py); the tests
marked @fake_only say why they need the fake.

The engine directory is the session's real torch engine (tests/conftest.py `engine_dir`) re-labelled
backend "trtllm": its real tokenizer, a manifest with a memory plan, and config.json files as
trtllm-build writes them; no weights (the fake executor is the model). Pure Python, fast.
"""

from __future__ import annotations

import json
import shutil
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from orin_llm.backends.loader import load_engine
from orin_llm.backends.trtllm.bindings import executor_module, set_executor_module
from orin_llm.backends.trtllm.engine import TrtllmEngine
from orin_llm.backends.trtllm.generation import TrtllmGeneration
from orin_llm.errors import OrinError
from orin_llm.runtime.sampling import SamplingParams
from tests.conftest import tiny_fixture

from .trtllm_both import fake_only, on_fake

tiny_engine_dir = tiny_fixture("engine_dir")  # random weights do here (tests/conftest.py)

WORDS = " kitchen table robot cup moves apple towards sink door opens"


def make_engine_dir(src: Path, dst: Path, *, prefix_reuse: bool = True, draft: bool = True,
                    max_draft_len: int = 4, limits: dict | None = None, kv_tokens=(4096, 2048),
                    tokens_per_block: int = 32, lookup_seed: bool = False, chunked_context: bool = False,
                    paged_context_fmha: bool | None = None, kv_cache: str = "fp16", build: dict | None = None) -> Path:
    """A trtllm engine dir from the torch one: tokenizer, adapted manifest, engine config.json files as
    trtllm-build writes them (and the lookup seed plans, if asked: without them the lookup history starts
    empty). Paged context FMHA is built in where prefix reuse or chunked context needs it, as the build
    does, unless `paged_context_fmha` says otherwise."""
    dst.mkdir(parents=True)
    shutil.copytree(src / "tokenizer", dst / "tokenizer")
    data = json.loads((src / "manifest.json").read_text())
    if lookup_seed:
        shutil.copy(src / "lookup_seed.json", dst / "lookup_seed.json")
    else:
        data["lookup_seed"] = None
    data["backend"] = "trtllm"
    data["profile"] = {**data["profile"], "backend": "trtllm", "prefix_reuse": prefix_reuse,
                       "chunked_context": chunked_context}
    data["limits"] = {**data["limits"], "max_input_len": 512, "max_seq_len": 1024, "draft_len": 4,
                      **(limits or {})}
    data["target"]["files"] = []
    data["target"]["kv_cache"] = {"dtype": kv_cache}
    if draft:
        data["draft"]["files"] = []
        data["draft"]["kv_cache"] = {"dtype": kv_cache}
    else:
        data["draft"] = None
    data["memory_plan"] = {"max_kv_tokens": kv_tokens[0], "target": {"max_kv_tokens": kv_tokens[0]},
                           **({"draft": {"max_kv_tokens": kv_tokens[1]}} if draft else {})}
    (dst / "manifest.json").write_text(json.dumps(data, indent=2))
    lim = data["limits"]
    paged = prefix_reuse or chunked_context if paged_context_fmha is None else paged_context_fmha
    for role in ("target", "draft") if draft else ("target",):
        plugins = {"tokens_per_block": tokens_per_block, "use_paged_context_fmha": paged}
        build_config = {"max_input_len": lim["max_input_len"], "max_seq_len": lim["max_seq_len"],
                        "plugin_config": plugins, "speculative_decoding_mode": 1,  # SpeculativeDecodingMode.NONE
                        **(build or {})}
        if role == "target" and max_draft_len:
            build_config["max_draft_len"] = max_draft_len
            build_config["speculative_decoding_mode"] = 2  # DRAFT_TOKENS_EXTERNAL (modeling_utils.py L65-86)
            build_config["max_seq_len"] += max_draft_len  # the builder adds it (builder.py L898-916)
        (dst / role).mkdir()
        vocab = {"vocab_size": data[role]["arch"]["vocab_size"]}
        (dst / role / "config.json").write_text(json.dumps({"version": "0.12.0", "build_config": build_config,
                                                            "pretrained_config": vocab}))
    return dst


def install_models(fake, engine, eos_at=None):
    tok = engine.tokenizer
    vocab = list(dict.fromkeys(tok.encode(WORDS, add_special_tokens=False)))
    target = fake.ScriptedModel(vocab, engine.end_id, eos_at=eos_at)
    draft = fake.ScriptedModel(vocab, engine.end_id, eos_at=eos_at,
                               disagree=lambda c: (c[-1] + len(c)) % 4 == 0)  # right about 3 times in 4
    fake.MODELS.update(target=target, draft=draft)
    return target


@pytest.fixture
def make(request, tmp_path, engine_dir, fake):
    """make(**engine_dir_options) -> a loaded TrtllmEngine with the scripted models installed. Fake only:
    the real run has one engine, the one ORIN_LLM_TEST_TRTLLM_ENGINE names, so a test that needs engines
    built another way says why with @fake_only (tests/backends/trtllm/trtllm_both.py)."""
    if request.node.get_closest_marker("fake_only") is None:
        raise AssertionError(f"{request.node.name} uses `make` (the fake only): mark it @fake_only(reason), or "
                             "use the `eng` fixture, which runs on the real bindings too")
    engines = []

    def _make(eos_at=None, **options) -> TrtllmEngine:
        eng = TrtllmEngine.load(make_engine_dir(engine_dir, tmp_path / f"trt{len(engines)}", **options))
        eng.reference = install_models(fake, eng, eos_at)  # the fake target: its greedy run is the truth
        engines.append(eng)
        return eng

    yield _make
    for eng in engines:
        eng.close()


def prompt(engine, text="Put the cup in the sink.") -> list[int]:
    return engine.chat_ids([{"role": "user", "content": text}])


def target_executor(fake):
    return next(ex for ex in fake.EXECUTORS if ex.path.name == "target")


def draft_executor(fake):
    return next(ex for ex in fake.EXECUTORS if ex.path.name == "draft")


def all_read(fake) -> bool:
    """Every request's last response was read, and no request was polled after it."""
    return all(not ex.undelivered() and not ex.wasted_polls() for ex in fake.EXECUTORS)


def need_mode(engine, mode: str) -> None:
    """Skip, saying why, where the engine under test has no such speculation mode (a real engine's build)."""
    if mode not in engine.speculation_modes:
        pytest.skip(f"engine {engine.name!r} has no {mode!r} speculation (its modes: "
                    f"{', '.join(engine.speculation_modes)})")


def need_reuse(engine) -> None:
    if not engine.block_reuse:
        pytest.skip(f"engine {engine.name!r} runs without block reuse: nothing is stored to be reused")


def fake_read_all(engine) -> None:
    """On the fake: every request's last response was read, and no request was polled after it."""
    fake = on_fake(engine)
    if fake is not None:
        assert all_read(fake)


def _free_words(eng, ids, n: int = 40) -> str:
    """The answer without a stop, skipping where it is too short to cut (a real model may stop early)."""
    free = eng.generate(ids, SamplingParams(max_tokens=n), speculation="none").run().text
    if len(free.split()) < 6:
        pytest.skip(f"the answer is too short to cut: {free!r}")
    return free


# ---------------------------------------------------------------------------------- loading


@fake_only("the exact keyword arguments of KvCacheConfig, ExecutorConfig and Executor, which only the fake records")
def test_executors_get_the_exact_kv_and_executor_config(make, fake, tmp_path):
    eng = make()
    kv = fake.calls("KvCacheConfig")
    assert kv == [{"enable_block_reuse": True, "max_tokens": 4096},  # the target's memory plan
                  {"enable_block_reuse": True, "max_tokens": 2048}]  # the draft's
    ex_cfgs = fake.calls("ExecutorConfig")
    common = {"max_beam_width", "kv_cache_config", "enable_chunked_context"}  # the target's has the grammar too
    assert [set(c) for c in ex_cfgs] == [common | {"logits_post_processor_map"}, common]
    assert all(c["max_beam_width"] == 1 and c["enable_chunked_context"] is False for c in ex_cfgs)
    assert [c["kv_cache_config"].max_tokens for c in ex_cfgs] == [4096, 2048]
    executors = fake.calls("Executor")
    assert [c["model_path"] for c in executors] == [str(eng.dir / "target"), str(eng.dir / "draft")]
    assert all(c["model_type"] is fake.ModelType.DECODER_ONLY for c in executors)
    assert all(set(c) == {"model_path", "model_type", "executor_config"} for c in executors)
    assert eng.tokens_per_block == 32 and eng.draft_len == 4 and eng.block_reuse
    assert eng.speculation_modes == ["auto", "none", "lookup", "draft_model", "combined"]


@fake_only("an engine built without prefix reuse, and KvCacheConfig's keyword arguments")
def test_block_reuse_follows_the_profile(make, fake):
    make(prefix_reuse=False, draft=False, max_draft_len=0)
    assert {c["enable_block_reuse"] for c in fake.calls("KvCacheConfig")} == {False}
    assert all("free_gpu_memory_fraction" not in c for c in fake.calls("KvCacheConfig"))


@fake_only("an engine built with chunked context, and ExecutorConfig's keyword arguments")
def test_chunked_context_follows_the_profile(make, fake):
    eng = make(chunked_context=True)
    assert [c["enable_chunked_context"] for c in fake.calls("ExecutorConfig")] == [True, True]
    assert eng.chunked_context


# Engines whose profile asks for what TensorRT-LLM 0.12 refuses at Executor(...), each named by the rule the
# runtime cites: the build refuses such profiles, so these dirs stand for engines built by hand or by an
# older orin-llm (the old default: an INT8 KV draft-target pair without block reuse).
REFUSED_AT_LOAD = {
    "block-reuse-needs-paged-context-fmha": dict(prefix_reuse=True, paged_context_fmha=False, draft=False,
                                                 max_draft_len=0),
    "draft-target-needs-block-reuse": dict(prefix_reuse=False, kv_cache="int8"),
    "chunked-context-needs-paged-context-fmha": dict(prefix_reuse=False, chunked_context=True,
                                                     paged_context_fmha=False, draft=False, max_draft_len=0),
    "int8-kv-paged-context-fmha": dict(prefix_reuse=True, kv_cache="int8", draft=False, max_draft_len=0),
}


@fake_only("engine directories that 0.12 refuses, which no build writes")
@pytest.mark.parametrize("rule", sorted(REFUSED_AT_LOAD))
def test_what_012_refuses_is_refused_before_any_executor(tmp_path, engine_dir, fake, rule):
    d = make_engine_dir(engine_dir, tmp_path / "trt", **REFUSED_AT_LOAD[rule])
    with pytest.raises(OrinError, match=rf"refuses to load this target engine .*rule {rule}: .*rebuild") as e:
        TrtllmEngine.load(d)
    assert "\n" not in str(e.value) and fake.calls("Executor") == []


def test_eos_ids_come_from_the_tokenizer_dir(eng):
    tok = eng.tokenizer
    assert eng.end_id == tok.eos_token_id and tok.eos_token_id in eng.eos_ids
    assert eng.pad_id == (tok.pad_token_id if tok.pad_token_id is not None else eng.end_id)


def test_missing_tensorrt_llm_is_an_orin_error_with_the_install_hint(monkeypatch, tmp_path, engine_dir):
    previous = set_executor_module(None)
    try:
        monkeypatch.setitem(sys.modules, "tensorrt_llm", None)  # `import tensorrt_llm...` raises ImportError
        with pytest.raises(OrinError, match=r"TensorRT-LLM is not importable: .*install TensorRT-LLM "
                                            r"0\.12\.0-jetson \(jetson/setup\.sh\) or use a torch engine"):
            executor_module()
        d = make_engine_dir(engine_dir, tmp_path / "trt")
        with pytest.raises(OrinError, match="jetson/setup.sh"):
            TrtllmEngine.load(d)
    finally:
        set_executor_module(previous)


@fake_only("the fake's version string changed to one 0.12 is not")
def test_other_tensorrt_llm_versions_are_refused(fake, monkeypatch):
    monkeypatch.setattr(fake, "__version__", "0.15.0")
    with pytest.raises(OrinError, match="TensorRT-LLM 0.15.0 is installed.*0.12"):
        executor_module()


@fake_only("a load failure injected into the draft's Executor")
def test_engine_load_failure_is_an_orin_error_and_frees_what_was_loaded(tmp_path, engine_dir, fake):
    d = make_engine_dir(engine_dir, tmp_path / "trt")
    fake.LOAD_ERRORS["draft"] = "[TensorRT-LLM][ERROR] Assertion failed: plan is for another GPU\nstack"
    with pytest.raises(OrinError, match=r"could not load the draft engine: .*another GPU; rebuild") as e:
        TrtllmEngine.load(d)
    assert "\n" not in str(e.value)
    (target,) = fake.EXECUTORS
    assert target.is_shut_down  # the target, loaded first, is not left holding memory


def test_torch_engines_are_refused(engine_dir, fake):
    with pytest.raises(OrinError, match="built for the 'torch' backend"):
        TrtllmEngine.load(engine_dir)


@fake_only("engines built with and without a draft")
def test_load_engine_picks_the_runtime_by_backend(tmp_path, engine_dir, fake):
    from orin_llm.runtime.engine import Engine

    d = make_engine_dir(engine_dir, tmp_path / "trt")
    trt = load_engine(d, device="cuda", kv_cache="fp32", exact=False)  # torch-only options: ignored
    try:
        assert isinstance(trt, TrtllmEngine) and trt.draft_executor is not None
    finally:
        trt.close()
    no_draft = load_engine(make_engine_dir(engine_dir, tmp_path / "trt2"), draft=False)
    assert no_draft.draft_executor is None and no_draft.speculation_modes == ["auto", "none", "lookup"]
    no_draft.close()
    torch_engine = load_engine(engine_dir, device="cpu", draft=False)
    assert isinstance(torch_engine, Engine)


# ---------------------------------------------------------------------------------- plain decoding


@fake_only("the exact keyword arguments of Request and its configs, which only the fake records")
def test_plain_request_carries_the_exact_kwargs(make, fake):
    eng = make()
    ids = prompt(eng)
    eng.generate(ids, SamplingParams(max_tokens=12), speculation="none").run()
    (req,) = target_executor(fake).requests
    assert set(req.passed) == {"input_token_ids", "max_new_tokens", "streaming", "sampling_config",
                               "output_config", "end_id", "pad_id", "stop_words"}
    assert req.input_token_ids == ids and req.max_new_tokens == 12 and req.streaming is True
    assert req.end_id == eng.end_id and req.pad_id == eng.pad_id and req.stop_words is None
    assert req.output_config.passed == {"exclude_input_from_output": True}
    assert req.sampling_config.passed == {"beam_width": 1, "top_k": 1}  # greedy (topKSamplingLayer.cu)
    assert all(isinstance(t, timedelta) for t in target_executor(fake).timeouts)


@fake_only("the exact keyword arguments of SamplingConfig, which only the fake records")
def test_sampled_request_passes_temperature_top_p_and_the_seed(make, fake):
    eng = make()
    eng.generate(prompt(eng), SamplingParams(max_tokens=5, temperature=0.8, top_p=0.9, seed=7),
                 speculation="none").run()
    (req,) = target_executor(fake).requests
    assert req.sampling_config.passed == {"beam_width": 1, "top_p": 0.9, "temperature": 0.8, "random_seed": 7}


@fake_only("the seeds the requests carried, which only the fake records")
def test_unseeded_sampled_requests_get_a_fresh_seed(make, fake):
    eng = make()
    for _ in range(2):
        eng.generate(prompt(eng), SamplingParams(max_tokens=3, temperature=1.0), speculation="none").run()
    seeds = [r.sampling_config.random_seed for r in target_executor(fake).requests]
    assert None not in seeds and seeds[0] != seeds[1]  # 0.12 would use seed 0 for both


def test_stream_decodes_plainly_on_the_target_or_the_draft_engine(eng):
    ids = prompt(eng)
    plain = eng.generate(ids, SamplingParams(max_tokens=12), speculation="none").run().token_ids
    target_chunks = list(eng.stream(eng.target_executor, ids, 12))
    streamed = [t for c in target_chunks for t in c]
    assert len(target_chunks) > 1 and streamed[:len(plain)] == plain  # a stream stops at end_id only
    if eng.draft_executor is not None:
        draft = [t for c in eng.stream(eng.draft_executor, ids, 12) for t in c]
        assert 1 <= len(draft) <= 12
    fake = on_fake(eng)
    if fake is not None:
        assert streamed == plain == fake.MODELS["target"].greedy_run(ids, 12)
        assert draft == fake.MODELS["draft"].greedy_run(ids, 12) != plain  # the two engines told apart
        for executor in (eng.target_executor, eng.draft_executor):
            req = executor.requests[-1]
            assert req.input_token_ids == ids and req.max_new_tokens == 12 and req.streaming is True
            assert req.sampling_config.passed == {"beam_width": 1, "top_k": 1}
            assert req.external_draft_tokens_config is None
            assert req.output_config.passed == {"exclude_input_from_output": True}
        assert all_read(fake)


@fake_only("the scripted target ends at a chosen position")
def test_end_id_stops_with_reason_stop(make, fake):
    eng = make(eos_at=None)
    ids = prompt(eng)
    eng.reference.eos_at = len(ids) + 9
    res = eng.generate(ids, SamplingParams(max_tokens=40), speculation="none").run()
    assert res.token_ids == eng.reference.greedy_run(ids, 40) and len(res.token_ids) == 9
    assert res.finish_reason == "stop" and not target_executor(fake).cancelled


@fake_only("toggles whether the output ends with end_id, which 0.12 does not document")
def test_end_id_in_the_output_is_not_text(make, fake, monkeypatch):
    monkeypatch.setattr(fake, "INCLUDE_END_ID", True)
    eng = make()
    ids = prompt(eng)
    eng.reference.eos_at = len(ids) + 5
    res = eng.generate(ids, SamplingParams(max_tokens=40), speculation="none").run()
    assert len(res.token_ids) == 5 and eng.end_id not in res.token_ids and res.finish_reason == "stop"


def test_stop_string_cuts_the_text_and_cancels_the_request(eng):
    ids = prompt(eng)
    free = _free_words(eng, ids)
    stop = free.split()[3]
    gen = eng.generate(ids, SamplingParams(max_tokens=40, stop=[stop]), speculation="none")
    streamed = "".join(gen)
    assert gen.result.finish_reason == "stop"
    assert streamed == gen.result.text == free[: free.index(stop)]
    fake = on_fake(eng)
    if fake is not None:
        assert target_executor(fake).cancelled == [2]  # the second request, cut short
        assert all_read(fake)  # its last response was read after cancel_request


@fake_only("toggles whether 0.12 returns the stop word (undocumented), and reads Request.stop_words")
@pytest.mark.parametrize("included", [True, False])
@pytest.mark.parametrize("mode", ["none", "lookup"])
def test_other_stop_ids_go_in_stop_words_and_the_engine_stops_by_itself(make, fake, monkeypatch, included, mode):
    monkeypatch.setattr(fake, "INCLUDE_STOP_WORDS", included)  # whether 0.12 returns the stop word: both handled
    eng = make()
    ids = prompt(eng)
    free = eng.generate(ids, SamplingParams(max_tokens=20), speculation="none").run().token_ids
    other_eos = next(t for t in range(3, 1000) if t not in free and t != eng.end_id)
    eng.eos_ids = eng.eos_ids | {other_eos}  # a second end-of-turn id, as Llama 3 has three
    cut = free[6]
    res = eng.generate(ids, SamplingParams(max_tokens=20, stop_token_ids=[cut]), speculation=mode).run()
    assert res.token_ids == free[: free.index(cut)] and res.finish_reason == "stop"
    target = target_executor(fake)
    requests = target.requests[1:]
    assert requests and all(sorted(r.stop_words) == sorted([[cut], [other_eos]]) for r in requests)
    assert all(eng.end_id not in sum(r.stop_words, []) for r in requests)  # end_id is the Request's own
    assert target.cancelled == [] and all_read(fake)  # stopped by the engine, nothing cancelled


def test_closing_the_iterator_early_cancels_the_request(eng):
    gen = eng.generate(prompt(eng), SamplingParams(max_tokens=50), speculation="none")
    it = iter(gen)
    next(it)
    it.close()
    assert gen.result is None
    again = eng.generate(prompt(eng), SamplingParams(max_tokens=4), speculation="none").run()
    assert again.token_ids  # the engine serves on
    fake = on_fake(eng)
    if fake is not None:
        assert target_executor(fake).cancelled == [1] and all_read(fake)


@fake_only("an error response injected into the executor")
def test_error_response_is_a_one_line_orin_error(make, fake):
    eng = make()
    target_executor(fake).fail_next = ("[TensorRT-LLM][ERROR] Assertion failed: out of KV cache blocks\n"
                                       "1 0x7f stack frame")
    gen = eng.generate(prompt(eng), SamplingParams(max_tokens=10), speculation="none")
    with pytest.raises(OrinError, match=r"TensorRT-LLM request failed: .*out of KV cache blocks$") as e:
        gen.run()
    assert "\n" not in str(e.value) and target_executor(fake).cancelled == []


def test_prompt_limits_and_empty_prompt(eng):
    with pytest.raises(OrinError, match=f"max_input_len of {eng.max_input_len}"):
        eng.generate(list(range(eng.max_input_len + 1)), SamplingParams())
    with pytest.raises(OrinError, match="empty prompt"):
        eng.generate([], SamplingParams())


# ---------------------------------------------------------------------------------- prefix reuse


def test_pin_stores_the_prefix_blocks_and_reports_whole_blocks(eng):
    need_reuse(eng)
    block = eng.tokens_per_block
    prefix = prompt(eng, "You are a home robot. " * 12)[:-3]
    prefix = prefix[: len(prefix) - (0 if len(prefix) % block else 1)]  # a prefix with a partial last block
    assert len(prefix) > block
    eng.pin(prefix)
    assert eng.pinned == prefix
    ids = prefix + eng.encode("Put the cup in the sink.")
    whole = len(prefix) // block * block
    assert eng.cached_prefix(ids) == whole
    res = eng.generate(ids, SamplingParams(max_tokens=4), speculation="none").run()
    assert res.timings.cached_prompt_tokens == whole  # measured: the executor matched the pin's whole blocks
    assert eng.cached_prefix(prefix) == 0 and eng.cached_prefix(ids[1:]) == 0
    fake = on_fake(eng)
    if fake is not None:
        for ex in fake.EXECUTORS:  # target and draft both keep the prefix
            req = ex.requests[0]
            assert req.input_token_ids == prefix and req.max_new_tokens == 1 and req.streaming is False


@pytest.mark.parametrize("mode", ["none", "lookup", "draft_model"])
def test_cached_prompt_tokens_are_what_the_executor_reused(eng, mode):
    """Not what the pin predicts: the growth of the target's cumulative reused_blocks over the first request."""
    need_reuse(eng)
    need_mode(eng, mode)
    ids = prompt(eng, "Tidy up the kitchen table and then open the door. " * 4)
    first = eng.generate(ids, SamplingParams(max_tokens=6), speculation=mode).run()
    assert eng.cached_prefix(ids) == 0 and first.timings.cached_prompt_tokens == 0  # nothing stored yet
    again = eng.generate(ids, SamplingParams(max_tokens=6), speculation=mode).run()
    # the first run stored its blocks; the same prompt now finds all of its whole blocks but the last token's
    block = eng.tokens_per_block
    assert eng.cached_prefix(ids) == 0 and again.timings.cached_prompt_tokens == (len(ids) - 1) // block * block > 0
    other = eng.generate(eng.encode("Unrelated words"), SamplingParams(max_tokens=3), speculation=mode).run()
    assert other.timings.cached_prompt_tokens == 0
    assert again.token_ids == first.token_ids
    if on_fake(eng) is not None:
        assert first.token_ids == eng.reference.greedy_run(ids, 6)


@fake_only("replaces the executor's iteration stats with ones that carry no KV stats")
def test_without_kv_stats_cached_tokens_are_zero_not_guessed(make, fake, monkeypatch, caplog):
    eng = make()
    prefix = prompt(eng, "You are a home robot. " * 12)
    eng.pin(prefix)
    target = target_executor(fake)
    latest = target.get_latest_iteration_stats

    def no_kv():
        stats = latest()
        for it in stats:
            it.kv_cache_stats = None
        return stats

    monkeypatch.setattr(target, "get_latest_iteration_stats", no_kv)
    res = eng.generate(prefix + eng.encode("Go."), SamplingParams(max_tokens=2), speculation="none").run()
    assert eng.cached_prefix(prefix + [1]) > 0 and res.timings.cached_prompt_tokens == 0
    assert "no kv_cache_stats" in caplog.text


@fake_only("an engine built without prefix reuse")
def test_without_block_reuse_pin_only_records(make, fake):
    eng = make(prefix_reuse=False, draft=False, max_draft_len=0)
    prefix = prompt(eng)[:-2]
    eng.pin(prefix)
    assert eng.pinned == prefix and all(not ex.requests for ex in fake.EXECUTORS)
    assert eng.cached_prefix(prefix + [1, 2]) == 0


# ---------------------------------------------------------------------------------- speculation


@pytest.mark.parametrize("mode", ["lookup", "draft_model", "combined"])
def test_greedy_speculation_equals_plain_and_counts_add_up(eng, mode):
    need_mode(eng, mode)
    ids = prompt(eng)
    plain = eng.generate(ids, SamplingParams(max_tokens=40), speculation="none").run()
    eng.pin(ids[:-4])
    gen = eng.generate(ids, SamplingParams(max_tokens=40), speculation=mode)
    text = "".join(gen)
    res = gen.result
    assert res.token_ids == plain.token_ids and text == res.text == plain.text
    s = res.speculation
    assert s.drafter == mode and s.accepted <= s.drafted
    if res.finish_reason == "length":
        assert s.accepted + s.steps == len(res.token_ids)  # every token from a step: accepted drafts + one each
    fake = on_fake(eng)
    if fake is None:
        return
    assert res.token_ids == eng.reference.greedy_run(ids, 40) and 0 < s.accepted
    target = target_executor(fake)
    spec = [r for r in target.requests if r.external_draft_tokens_config is not None]
    assert spec and sum(target.runs[i].accepted for i, r in target.runs.items() if r.draft) == s.accepted
    for r in spec:
        draft = r.external_draft_tokens_config.tokens
        assert 1 <= len(draft) <= 4 and r.max_new_tokens == len(draft) + 1 and r.streaming is False
        assert r.external_draft_tokens_config.passed == {"tokens": draft}
        assert r.output_config.passed == {"exclude_input_from_output": True}
        assert r.sampling_config.passed == {"beam_width": 1, "top_k": 1}
    assert sum(len(r.external_draft_tokens_config.tokens) for r in spec) == s.drafted
    if mode != "lookup":
        drafts = draft_executor(fake).requests[1:]  # after the pin
        assert drafts and all(1 <= r.max_new_tokens <= 4 and not r.streaming for r in drafts)
        assert all(r.external_draft_tokens_config is None for r in drafts)
    assert all_read(fake)


@fake_only("an engine built with a max_input_len a few tokens over the prompt")
def test_speculation_keeps_each_request_within_max_input_len(make, fake):
    eng = make()
    ids = prompt(eng)
    eng2 = make(limits={"max_input_len": len(ids) + 7})
    for mode in ("lookup", "draft_model"):
        res = eng2.generate(ids, SamplingParams(max_tokens=30), speculation=mode).run()
        assert res.token_ids == eng.reference.greedy_run(ids, 30)
    for ex in fake.EXECUTORS[2:]:
        for r in ex.requests:
            n = len(r.external_draft_tokens_config.tokens) if r.external_draft_tokens_config else 0
            assert len(r.input_token_ids) + n <= len(ids) + 7
        assert not any(run.error for run in ex.runs.values())


def test_closing_a_speculative_generation_cancels_nothing_left_running(eng):
    need_mode(eng, "lookup")
    mode = "combined" if "combined" in eng.speculation_modes else "lookup"
    gen = eng.generate(prompt(eng), SamplingParams(max_tokens=40), speculation=mode)
    it = iter(gen)
    next(it)
    it.close()
    assert gen.result is None
    assert eng.generate(prompt(eng), SamplingParams(max_tokens=4), speculation=mode).run().token_ids
    fake_read_all(eng)


def test_sampled_draft_model_speculation_is_refused(eng):
    need_mode(eng, "draft_model")
    for mode in ("draft_model", "combined"):
        with pytest.raises(OrinError, match="gather_generation_logits"):
            eng.generate(prompt(eng), SamplingParams(temperature=0.7), speculation=mode)


@fake_only("reads the seed each request carried, on fresh engines")
def test_sampled_lookup_seeds_each_step_from_the_request_seed(make, fake):
    def run():
        eng = make()  # a fresh engine each time: the lookup drafter's history shapes the steps
        params = SamplingParams(max_tokens=30, temperature=1.0, seed=3)
        out = eng.generate(prompt(eng), params, speculation="lookup").run()
        return out.token_ids, [r.sampling_config.random_seed for r in fake.EXECUTORS[-2].requests]

    (a, seeds_a), (b, seeds_b) = run(), run()
    assert a == b and seeds_a == seeds_b  # reproducible
    assert seeds_a[0] == 3 and len(set(seeds_a)) == len(seeds_a) > 1  # no step replays another's stream


@fake_only("engines built with and without prefix reuse")
def test_auto_resolves_to_lookup_only_with_block_reuse_and_greedy(make, fake):
    eng = make()
    greedy, sampled = SamplingParams(), SamplingParams(temperature=1.0)
    assert eng.resolve_speculation("auto", greedy) == "lookup"
    assert eng.resolve_speculation("auto", sampled) == "none"
    assert make(prefix_reuse=False, draft=False, max_draft_len=0).resolve_speculation("auto", greedy) == "none"
    with pytest.raises(OrinError, match="available: auto, none, lookup, draft_model, combined"):
        eng.generate([1, 2, 3], greedy, speculation="medusa")


@fake_only("a target engine built without draft tokens")
def test_a_target_built_without_draft_tokens_cannot_speculate(make, fake):
    eng = make(draft=False, max_draft_len=0)
    assert eng.speculation_modes == ["auto", "none"]
    assert eng.resolve_speculation("auto", SamplingParams()) == "none"
    with pytest.raises(OrinError, match=r"'lookup' is not available .*\(available: auto, none\)"):
        eng.generate(prompt(eng), SamplingParams(), speculation="lookup")


@fake_only("an engine directory written with the lookup seed")
def test_the_lookup_history_starts_from_the_engines_seed_plans(tmp_path, engine_dir, fake):
    d = make_engine_dir(engine_dir, tmp_path / "trt", lookup_seed=True)
    with TrtllmEngine.load(d) as eng:
        assert eng.lookup_seed == json.loads((engine_dir / "lookup_seed.json").read_text())["outputs"]
        assert len(eng.lookup.history) == sum(len(o) + 1 for o in eng.lookup_seed) > 0


@fake_only("the scripted target ends at a chosen position")
def test_speculation_stops_at_end_id(make, fake):
    eng = make()
    ids = prompt(eng)
    eng.reference.eos_at = len(ids) + 11
    res = eng.generate(ids, SamplingParams(max_tokens=40), speculation="draft_model").run()
    assert res.token_ids == eng.reference.greedy_run(ids, 40) and res.finish_reason == "stop"
    assert all_read(fake)


def test_streamed_text_is_the_targets_greedy_tokens_decoded(eng):
    ids = prompt(eng)
    gen = eng.generate(ids, SamplingParams(max_tokens=30), speculation="none")
    assert isinstance(gen, TrtllmGeneration)
    deltas = list(gen)
    res = gen.result
    assert len(deltas) > 3 and "".join(deltas) == res.text
    assert res.text == eng.tokenizer.decode(res.token_ids, skip_special_tokens=True)
    again = eng.generate(ids, SamplingParams(max_tokens=30), speculation="none").run()
    assert again.token_ids == res.token_ids  # greedy: the same tokens every time
    t = res.timings
    assert t.prompt_tokens == len(ids) and t.completion_tokens == len(res.token_ids) and 0 < t.ttft_s <= t.total_s
    assert res.speculation.drafter == "none"
    if res.finish_reason == "length":
        assert len(res.token_ids) == 30 and res.speculation.steps == 29
    fake = on_fake(eng)
    if fake is not None:  # the scripted target's own greedy run
        assert res.token_ids == eng.reference.greedy_run(ids, 30) and res.finish_reason == "length"
        assert all_read(fake)


def test_speculation_stops_at_stop_strings(eng):
    need_mode(eng, "lookup")
    ids = prompt(eng)
    free = _free_words(eng, ids)
    stop = free.split()[4]
    res = eng.generate(ids, SamplingParams(max_tokens=40, stop=[stop]), speculation="lookup").run()
    assert res.text == free[: free.index(stop)] and res.finish_reason == "stop"
    fake_read_all(eng)


@pytest.mark.parametrize("mode", ["none", "lookup"])
def test_stop_token_ids_cut_the_answer(eng, mode):
    need_mode(eng, mode)
    ids = prompt(eng)
    free = eng.generate(ids, SamplingParams(max_tokens=20), speculation="none").run().token_ids
    if len(free) < 8:
        pytest.skip(f"the answer is too short to cut: {len(free)} tokens")
    cut = free[6]
    res = eng.generate(ids, SamplingParams(max_tokens=20, stop_token_ids=[cut]), speculation=mode).run()
    assert res.token_ids == free[: free.index(cut)] and res.finish_reason == "stop"
    fake_read_all(eng)
