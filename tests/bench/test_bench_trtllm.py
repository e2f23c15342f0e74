"""The prefix, kv and speculative scenarios on a TensorRT-LLM engine directory, through the fake
0.12.0-jetson executor bindings (tests/backends/trtllm/fake_trtllm.py) and through the real bindings on the engine
ORIN_LLM_TEST_TRTLLM_ENGINE names (`bindings`, tests/backends/trtllm/trtllm_both.py; skipped with the reason where
they do not import). On both: the JSON and report fields that follow from the manifest and from what the
executor measured. On the fake also (on_fake): the exact requests each scenario makes and the figures that
follow from the fake's scripted models. Timings are only checked to be positive."""

from __future__ import annotations

import json

import pytest

from orin_llm.backends.trtllm.engine import TrtllmEngine
from orin_llm.bench import kv, run_scenarios, speculative
from orin_llm.bench.report import write_report
from orin_llm.bench.speculative import EMPTY_HISTORY
from orin_llm.manifest import file_entry, load_manifest
from tests.backends.trtllm.test_trtllm_engine import install_models, make_engine_dir
from tests.conftest import tiny_fixture

tiny_engine_dir = tiny_fixture("engine_dir")  # random weights do here (tests/conftest.py)

BLOCK = 32  # make_engine_dir's tokens_per_block
BYTES = {"fp16": 2, "int8": 1}  # a KV element, by the engine's KV dtype


def trt_engine_dir(src, dst, fake, **options):
    """make_engine_dir with room for the planning prompts, the memory plan the build writes (from the torch
    engine's, with the trtllm KV budget) and engine files in the manifest; the scripted models installed."""
    d = make_engine_dir(src, dst, limits={"max_input_len": 1024, "max_seq_len": 2048}, **options)
    data = json.loads((d / "manifest.json").read_text())
    plan = json.loads((src / "manifest.json").read_text())["memory_plan"]
    roles = [r for r in ("target", "draft") if data.get(r)]
    data["memory_plan"] = {**plan, "max_kv_tokens": 4096}
    for role in roles:
        data["memory_plan"][role] = {**plan[role], "max_kv_tokens": 4096,
                                     "kv_bytes": 4096 * plan[role]["kv_bytes_per_token"]}
    for i, role in enumerate(roles):
        (d / role / "rank0.engine").write_bytes(b"\0" * (1000 + i))
        data[role]["files"] = [file_entry(d / role / n, d).model_dump() for n in ("config.json", "rank0.engine")]
    (d / "manifest.json").write_text(json.dumps(data))
    with TrtllmEngine.load(d) as eng:
        install_models(fake, eng)
    fake.CALLS.clear()
    fake.EXECUTORS.clear()
    return d


def common_prefix(a, b) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def reusable(requests, i) -> int:
    """Prompt tokens of request i that earlier requests' whole blocks could hold (never its last token)."""
    ids = requests[i].input_token_ids
    common = max((common_prefix(ids, r.input_token_ids) for r in requests[:i]), default=0)
    return min(common, len(ids) - 1) // BLOCK * BLOCK


def kv_bytes_per_token(manifest, nbytes) -> int:
    a = manifest.target.arch
    return 2 * a.num_layers * a.num_kv_heads * a.head_dim * nbytes


def fake_engine(**options):
    """The options of the fake's engine directory a test needs (make_engine_dir's); on the real bindings the
    test runs on the one real engine and asks for what it needs with `need`."""
    return pytest.mark.fake_engine(**options)


@pytest.fixture
def trt_dir(bindings, request, tmp_path):
    """The engine directory a scenario runs on: the fake's (with the test's fake_engine options) or the real one.
    The fake's takes the tiny engine's tokenizer and manifest; the real run asks for no torch engine."""
    if bindings.real_dir is not None:
        return bindings.real_dir
    marker = request.node.get_closest_marker("fake_engine")
    return trt_engine_dir(request.getfixturevalue("engine_dir"), tmp_path / "trt", bindings.fake,
                          **(marker.kwargs if marker else {}))


def need(condition: bool, why: str) -> None:
    """Skip, saying why, where the real engine under test was not built the way the test is about."""
    if not condition:
        pytest.skip(why)


def engine_config(trt_dir, role: str = "target") -> dict:
    """What trtllm-build wrote about the engine (its tokens per block)."""
    return json.loads((trt_dir / role / "config.json").read_text())["build_config"]


# ---------------------------------------------------------------------------------- prefix


def test_prefix_on_trtllm_measures_new_prompts_and_reports_block_reuse(trt_dir, bindings, tmp_path):
    m = load_manifest(trt_dir)
    need(m.profile["prefix_reuse"], f"engine {m.name!r} keeps no KV blocks: the test without block reuse is its")
    out = tmp_path / "bench"
    run_scenarios(["prefix"], trt_dir, out, quick=True)
    data = json.loads((out / "prefix.json").read_text())
    assert data["backend"] == "trtllm" and data["task_alone_tokens"] > 0
    (row,) = data["rows"]
    block = engine_config(trt_dir)["plugin_config"]["tokens_per_block"]
    dtype = m.target.kv_cache.dtype
    assert data["kv"] == {"kv_bytes_per_token_fp16": kv_bytes_per_token(m, 2),
                          "kv_bytes_per_token_int8": kv_bytes_per_token(m, 1),
                          "kv_cache_dtype": dtype, "kv_cache_bytes_per_token": kv_bytes_per_token(m, BYTES[dtype]),
                          "block_reuse": True, "tokens_per_block": block}
    prefix, req = row["prefix_tokens"], row["requests"]
    assert prefix > 500 and req["warm"]["prompt_tokens"] > prefix
    # Measured by the executor's reused_blocks: the pin's whole blocks, and once a warm request has stored
    # the block that holds the prefix's tail and the start of the task turn, that one too: exactly what the
    # blocks stored by earlier requests could serve (the pool holds them all: nothing is evicted)
    assert row["cached_prompt_tokens"] == req["warm"]["reusable_tokens"] >= prefix // block * block
    assert row["cached_prompt_tokens"] > req["cold"]["reusable_tokens"]
    assert min(row["ttft_cold_ms"], row["ttft_warm_ms"], row["ttft_task_alone_ms"]) > 0
    report = (out / "report.md").read_text()
    assert f"| {prefix} | {row['cached_prompt_tokens']} |" in report
    assert f"block reuse on, {block} tokens per block" in report and "backend trtllm" in report

    fake = bindings.fake
    if fake is not None:  # the requests the scenario made, which only the fake records
        (executor,) = fake.EXECUTORS  # the target only (draft=False), shut down after the scenario
        assert [c["model_path"] for c in fake.calls("Executor")] == [str(trt_dir / "target")]
        assert executor.is_shut_down and block == BLOCK
        reqs = executor.requests
        # quick: the pin, then 1 + 2 task-alone requests and 1 + 2 warm ones (one untimed call first),
        # 2 cold; each one token, greedy. The executor keeps the pin's blocks: it is not sent again.
        assert len(reqs) == 9 and all(r.max_new_tokens == 1 and r.sampling_config.passed == {"beam_width": 1,
                                                                                          "top_k": 1} for r in reqs)
        (pin,), alone, warm, cold = reqs[:1], reqs[1:4], reqs[4:7], reqs[7:]
        assert [r.streaming for r in reqs] == [False] + [True] * 8
        assert len(pin.input_token_ids) == prefix
        assert all(r.input_token_ids[:prefix] == pin.input_token_ids for r in warm)
        assert len({tuple(r.input_token_ids) for r in reqs}) == 9  # every measured prompt is new to the executor
        assert all(common_prefix(r.input_token_ids, pin.input_token_ids) < prefix // 2 for r in alone + cold)
        assert req == {kind: {"prompt_tokens": max(len(reqs[i].input_token_ids) for i in idx),
                              "reusable_tokens": max(reusable(reqs, i) for i in idx)}
                       for kind, idx in (("warm", (4, 5, 6)), ("cold", (7, 8)), ("task_alone", (1, 2, 3)))}


@fake_engine(prefix_reuse=False, draft=False, max_draft_len=0)
def test_prefix_on_trtllm_without_block_reuse_reuses_nothing(trt_dir, bindings, tmp_path):
    m = load_manifest(trt_dir)
    need(not m.profile["prefix_reuse"], f"engine {m.name!r} reuses KV blocks: the test with block reuse is its")
    run_scenarios(["prefix"], trt_dir, tmp_path / "bench", quick=True)
    data = json.loads((tmp_path / "bench" / "prefix.json").read_text())
    (row,) = data["rows"]
    assert data["kv"]["block_reuse"] is False and row["cached_prompt_tokens"] == 0
    assert {k: v["reusable_tokens"] for k, v in row["requests"].items()} == {"warm": 0, "cold": 0, "task_alone": 0}
    fake = bindings.fake
    if fake is not None:
        (executor,) = fake.EXECUTORS
        assert len(executor.requests) == 8 and all(r.streaming for r in executor.requests)  # pin records only


# ---------------------------------------------------------------------------------- kv


@fake_engine(prefix_reuse=False, kv_cache="int8", draft=False, max_draft_len=0)  # the INT8 KV variant's shape
def test_kv_on_trtllm_reports_the_compiled_dtype_plan_and_decode_speed(trt_dir, bindings, tmp_path):
    data = kv.run(trt_dir, tmp_path, quick=True)
    assert json.loads((tmp_path / "kv.json").read_text())["decode_tokens_per_s"] == data["decode_tokens_per_s"]
    m = load_manifest(trt_dir)
    dtype = m.target.kv_cache.dtype
    nbytes = BYTES[dtype]
    assert data["backend"] == "trtllm" and data["kv_cache_dtype"] == dtype
    assert data["kv_bytes_per_token"] == {"fp16": kv_bytes_per_token(m, 2), "int8": kv_bytes_per_token(m, 1)}
    assert data["fp16_over_kv_cache_bytes"] == 2 / nbytes
    plan = m.memory_plan["target"]
    assert data["memory_plan"] == {k: plan[k] for k in ("kv_bytes_per_token", "max_kv_tokens", "kv_bytes")}
    # the executor's own KV stats, read after the decode requests ended: a pool of whole blocks within the plan
    block = engine_config(trt_dir)["plugin_config"]["tokens_per_block"]
    usage = data["kv_usage"]
    assert usage["source"] == "executor" and usage["bytes"] == plan["kv_bytes"]
    assert 0 < usage["capacity_tokens"] <= -(-plan["max_kv_tokens"] // block) * block
    assert usage["capacity_tokens"] % block == 0 and data["block_reuse"] == m.profile["prefix_reuse"]
    speeds = data["decode_tokens_per_s"][dtype]
    assert len(speeds) == 2 and min(speeds) > 0 and data["decode_tokens"] == 32
    assert data["agreement"]["measured"] is False and "--gather_context_logits" in data["agreement"]["reason"]
    assert "per_head_scales" not in data  # no torch number stands in for the engine's
    report = write_report(tmp_path, m).read_text()
    assert f"KV cache of the TensorRT-LLM engine ({dtype})" in report and "not measured on this engine" in report
    assert f"decode {max(speeds):.1f} tok/s" in report

    fake = bindings.fake
    if fake is not None:  # the decode requests, which only the fake records
        assert dtype == "int8" and usage["capacity_tokens"] == 4096
        (executor,) = fake.EXECUTORS
        assert executor.is_shut_down
        with TrtllmEngine.load(trt_dir, draft=False) as eng:
            prompt = eng.chat_ids(kv.PROMPT)
        sent = [(r.input_token_ids, r.max_new_tokens, r.streaming) for r in executor.requests]
        assert sent == [(prompt, 32, True)] * 2


# ---------------------------------------------------------------------------------- speculative


def test_speculative_on_trtllm_runs_every_drafter_once_and_times_the_draft(trt_dir, bindings, tmp_path):
    data = speculative.run(trt_dir, tmp_path, quick=True)
    assert json.loads((tmp_path / "speculative.json").read_text())["results"] == data["results"]
    assert (tmp_path / "speculative.png").is_file()
    m = load_manifest(trt_dir)
    # each mode the engine serves: proposals only where trtllm-build made the target take external draft
    # tokens (speculative_decoding_mode 2), lookup also from an empty history where the engine has seed plans
    drafts = engine_config(trt_dir)["speculative_decoding_mode"] == 2
    modes = ["none"] + (["lookup"] + ([EMPTY_HISTORY] if m.lookup_seed else []) + (
        ["draft_model", "combined"] if m.draft else []) if drafts else [])
    assert list(data["results"]) == [f"trtllm/{mode}" for mode in modes]
    assert data["backend"] == "trtllm" and data["exact_mode"].startswith("torch only")
    items, max_tokens = data["items"], data["max_tokens"]
    for r in data["results"].values():
        same, of = map(int, r["identical_to_plain"].split("/"))
        assert of == items and 0 <= same <= items and r["decode_tokens_per_s"] > 0
        assert 0 <= r["accepted"] <= r["drafted"]
        assert r["acceptance_rate"] == (r["accepted"] / r["drafted"] if r["drafted"] else 0.0)
    assert data["results"]["trtllm/none"]["drafted"] == 0
    assert (sum(r["drafted"] for r in data["results"].values()) > 0) == drafts  # the drafters proposed something
    c = data["draft"]
    if m.draft is None:
        assert c == {}
    else:  # draft cost: one plain greedy streamed request per engine, same prompt, timed
        assert c["target_ms_per_token"] > 0 and c["draft_ms_per_token"] > 0
        assert c["draft_over_target_time"] == c["draft_ms_per_token"] / c["target_ms_per_token"]
        assert (c["target_weights_bytes"], c["draft_weights_bytes"]) == tuple(
            sum(f.bytes for f in e.files if f.path.endswith(".engine")) for e in (m.target, m.draft))
        assert c["draft_weights"] == m.draft.weights
    report = write_report(tmp_path, m).read_text()
    assert "| trtllm/none |" in report and ("| trtllm/lookup |" in report) == drafts
    assert "Exact mode: torch only" in report
    assert ("Draft (" in report) == (m.draft is not None)

    fake = bindings.fake
    if fake is None:
        return
    # On the fake: its scripted models never end early (max_tokens per task, the first one the prefill's),
    # and its target's counters are the modes': the warm-up (max_tokens 8) comes before the first plain
    # request for max_tokens, the draft cost's two requests (max_new_tokens 33) after the last mode.
    assert (c["target_weights_bytes"], c["draft_weights_bytes"]) == (1000, 1001)  # the rank0.engine files
    target, draft = fake.EXECUTORS
    assert target.path.name == "target" and draft.path.name == "draft" and target.is_shut_down and draft.is_shut_down
    assert all(r["decode_tokens"] == items * (max_tokens - 1) for r in data["results"].values())
    # greedy: the target verifies every proposal, so each drafter's answers are plain decoding's (on a GPU a
    # near-tie in the verify pass's logits may flip one; the real run reports the count)
    assert all(r["identical_to_plain"] == f"{items}/{items}" for r in data["results"].values())
    runs = list(target.runs.values())
    start = next(i for i, run in enumerate(runs) if run.request.max_new_tokens == max_tokens)
    (timed,) = [i for i, run in enumerate(runs) if run.request.max_new_tokens == 33 and not run.draft]
    spec = [run for run in runs[start:timed] if run.draft]
    results = list(data["results"].values())
    assert sum(r["drafted"] for r in results) == sum(len(run.draft) for run in spec) > 0
    assert sum(r["accepted"] for r in results) == sum(run.accepted for run in spec) > 0
    assert all(r["accepted"] > 0 for r in results[1:])
    t_req = runs[timed].request
    (d_req,) = [r for r in draft.requests if r.max_new_tokens == 33]
    assert t_req.input_token_ids == d_req.input_token_ids and t_req.streaming and d_req.streaming
    assert t_req.sampling_config.passed == d_req.sampling_config.passed == {"beam_width": 1, "top_k": 1}
