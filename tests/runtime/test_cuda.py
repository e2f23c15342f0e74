"""The CUDA path on a GPU (tests skip, saying so, where torch sees no CUDA device; bench/gpu_check.sh
runs them on one): the kernel plan's CUDA choices, the int4 kernel against the dequantized layer, CUDA
graphs captured and replayed, their logits against the eager CUDA step, greedy speculation identical to
plain decoding, and a constrained request with its masks applied to logits on the device."""

from __future__ import annotations

import pytest
import torch

from orin_llm.runtime.kernel_plan import KernelSwitches
from orin_llm.runtime.sampling import SamplingParams

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (torch sees none)")]


@pytest.fixture(scope="module")
def cuda_engine(tiny_engine_dir):
    from orin_llm.runtime.engine import Engine

    return Engine.load(tiny_engine_dir, device="cuda")


def _run(eng, ids, mode="none", tokens=16, keep_eos=False, **kw):
    gen = eng.generate(ids, SamplingParams(max_tokens=tokens), speculation=mode, **kw)
    if not keep_eos:  # random weights: an end token must not cut the comparison short
        gen.stop_ids = set()
    return eng.run(gen)


def test_the_plan_puts_q4_1_on_the_int4_kernel_and_decode_in_graphs(cuda_engine):
    from orin_llm.kernels.cuda_linear import INT4_LAYERS

    plan = cuda_engine.model.plan
    assert plan.int4_cuda and plan.cuda_graphs, plan.why_not
    assert not (plan.q8_dot or plan.fused_decode or plan.int8_decode)  # our C++ ops are CPU-only
    assert isinstance(cuda_engine.model.layers[0].mlp.gate_up_proj, INT4_LAYERS)
    # each int4 shape's kernel chosen at load, with the candidates' timings
    assert plan.int4_layers and all("timed at load" in words for _, words in plan.int4_layers), plan.int4_layers
    assert next(cuda_engine.model.parameters()).device.type == "cuda"
    assert cuda_engine.kernels()["int4_cuda_linear"] is True


def test_the_int4_kernel_matches_the_dequantized_layer():
    from orin_llm.kernels.cuda_linear import Int4PackLinear
    from orin_llm.kernels.quant import QuantLinear

    g = torch.Generator().manual_seed(1)
    q = QuantLinear(torch.randint(0, 256, (256, 128), dtype=torch.uint8, generator=g), torch.rand(256, 8) / 50,
                    torch.bfloat16, -torch.rand(256, 8) / 10).cuda()
    lin, why = Int4PackLinear.build(q, torch.bfloat16)
    assert lin is not None, why
    x = torch.randn(5, 256, device="cuda", dtype=torch.bfloat16)
    want = torch.nn.functional.linear(x.float(), q.dequantize().float())
    assert (lin(x).float() - want).abs().max() <= 0.02 * want.abs().max()


def test_the_int4_kernel_is_chosen_by_timing_and_matches_the_dequantized_layer():
    from orin_llm.kernels.cuda_linear import INT4_LAYERS, choose_int4, decode_rows
    from orin_llm.kernels.quant import QuantLinear

    g = torch.Generator().manual_seed(2)
    q = QuantLinear(torch.randint(0, 256, (512, 128), dtype=torch.uint8, generator=g), torch.rand(512, 8) / 50,
                    torch.bfloat16, -torch.rand(512, 8) / 10).cuda()
    chosen: dict = {}
    layer, why, choice = choose_int4(q, torch.bfloat16, 9, "auto", chosen)
    assert layer is not None and isinstance(layer, INT4_LAYERS), why
    assert "int4pack" in choice.timings_us and any(k.startswith("gemv_") for k in choice.timings_us)
    assert any(k.startswith("family_") for k in choice.timings_us)
    label = choice.kernel if choice.config is None else f"{choice.kernel}_{choice.config.label()}"
    assert choice.timings_us[label] == min(choice.timings_us.values())  # the fastest was kept
    again, _, same = choose_int4(q, torch.bfloat16, 9, "auto", chosen)  # the same shape: not timed again
    assert same is choice and type(again) is type(layer)
    x = torch.randn(9, 256, device="cuda", dtype=torch.bfloat16)
    want = torch.nn.functional.linear(x.float(), q.dequantize().float())
    for asked in ("int4pack", "gemv", "tiled", "family"):
        forced, why, _ = choose_int4(q, torch.bfloat16, 9, asked)
        assert forced is not None, why
        assert (forced(x).float() - want).abs().max() <= 0.02 * want.abs().max()
        with decode_rows():  # (the family's decode kernel: what a decode step's rows run)
            assert (forced(x).float() - want).abs().max() <= 0.02 * want.abs().max()


def test_graphs_capture_once_per_bucket_and_match_the_eager_cuda_step(cuda_engine, tiny_engine_dir):
    from orin_llm.runtime.engine import Engine

    ids = list(range(200, 260))
    graphed = _run(cuda_engine, ids, tokens=12)
    stats = cuda_engine.runner.graphs.stats
    assert stats.captures >= 1 and stats.replays >= 11
    captures = stats.captures
    again = _run(cuda_engine, ids, tokens=12)
    assert again.token_ids == graphed.token_ids and stats.captures == captures  # replayed, not captured again
    eager = Engine.load(tiny_engine_dir, device="cuda", switches=KernelSwitches(cuda_graphs=False))
    assert eager.runner.graphs is None
    plain = _run(eager, ids, tokens=12)
    # bf16 on a random model: the first tokens agree; later ones may part on near-ties
    assert plain.token_ids[:4] == graphed.token_ids[:4]


@pytest.mark.parametrize("mode", ["lookup", "draft_model", "combined"])
def test_greedy_speculation_is_plain_decoding_on_cuda(cuda_engine, mode):
    ids = (list(range(300, 324)) * 4)
    plain = _run(cuda_engine, ids, tokens=32)
    spec = _run(cuda_engine, ids, mode, tokens=32)
    assert spec.token_ids == plain.token_ids
    graphs = cuda_engine.runner.graphs  # plain steps ran 1 row wide, the verify steps W wide
    assert graphs.widths == (1, graphs.width) and any(k.endswith("w1") for k in graphs.stats.buckets)


def test_plain_steps_one_row_wide_give_the_tokens_of_w_wide_steps(cuda_engine):
    """Narrow graphs (cuda_graphs.py) are exact only if a row's numbers do not depend on the step's width:
    greedy decoding of a random model parts at the first near-tie where they do."""
    graphs = cuda_engine.runner.graphs
    ids = list(range(700, 760))
    try:
        graphs.widths = (graphs.width,)
        graphs.entries.clear()
        wide = _run(cuda_engine, ids, tokens=48)
    finally:
        graphs.widths = (1, graphs.width)
        graphs.entries.clear()
    narrow = _run(cuda_engine, ids, tokens=48)
    assert narrow.token_ids == wide.token_ids


def test_batched_requests_decode_together_in_one_graph(cuda_engine):
    gens = []
    for i in range(3):
        g = cuda_engine.generate(list(range(400 + i, 440 + i)), SamplingParams(max_tokens=8), speculation="none")
        g.stop_ids = set()
        cuda_engine.submit(g)
        gens.append(g)
    while cuda_engine.busy:
        cuda_engine.step()
    assert all(len(g.out) == 8 for g in gens)
    assert any(k.startswith("4x") for k in cuda_engine.runner.graphs.stats.buckets)  # 3 requests: bucket 4


def test_a_constrained_request_masks_on_the_device(cuda_engine):
    pytest.importorskip("llguidance")
    from orin_llm.runtime.constraint import Grammar

    grammar = Grammar.lark(cuda_engine.vocabulary(), 'start: "go_to(" ("kitchen" | "hall") ")"')
    res = _run(cuda_engine, list(range(500, 540)), constraint=grammar.constraint(), tokens=12, keep_eos=True)
    assert cuda_engine.tokenizer.decode(res.token_ids).replace(" ", "") in ("go_to(kitchen)", "go_to(hall)")


def test_a_seeded_sampled_request_with_a_draft_runs_and_repeats_on_cuda(cuda_engine):
    """Sampling on the device: the request's generator lives there (rejection sampling draws from it)."""
    ids = list(range(600, 640))
    params = SamplingParams(max_tokens=12, temperature=0.8, seed=7)
    outs = []
    for _ in range(2):
        gen = cuda_engine.generate(ids, params, speculation="draft_model")
        gen.stop_ids = set()
        outs.append(cuda_engine.run(gen).token_ids)
    assert len(outs[0]) == 12 and outs[0] == outs[1]
