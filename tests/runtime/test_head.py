"""The int8 head of a q4_1 target (runtime/head.py): rigorous error bounds, exact greedy choices with
and without a grammar's mask, and the float32 head made only for sampled requests."""

import pytest
import torch

from orin_llm.kernels import q8_dot
from orin_llm.runtime.engine import Engine
from orin_llm.runtime.head import Q8Head
from orin_llm.runtime.kernel_plan import KernelSwitches
from orin_llm.runtime.llama import Item
from orin_llm.runtime.sampling import SamplingParams

TASKS = ["Bring the mug from the kitchen to the sofa.", "Water the plants, then close the door."]


@pytest.fixture(scope="module")
def fresh(engine_dir):
    """An engine of its own: other tests' sampled requests make the shared engine's float32 head."""
    e = Engine.load(engine_dir, device="cpu", draft=False)
    if not isinstance(e.model.lm_head, Q8Head):
        pytest.skip("no packed int8 kernel here: the q4_1 target keeps its float32 head")
    return e


def hidden_states(engine, text: str) -> torch.Tensor:
    """The final-norm outputs (the head's inputs) at every position of a chat prompt."""
    model, seen = engine.model, []
    norm = model.norm.forward
    model.norm.forward = lambda x: seen.append(norm(x)) or seen[-1]
    try:
        ids = torch.tensor(engine.chat_ids([{"role": "user", "content": text}]))
        model.forward_batch([Item(ids, engine.contiguous_cache(256), ids.shape[0], greedy=True)])
    finally:
        model.norm.forward = norm
    return seen[-1]


@pytest.fixture(scope="module")
def on_torchs_kernel(engine_dir):
    """The head's int8 pass on torch's packed kernel (bf16 h and output), as where q8_dot does not build."""
    e = Engine.load(engine_dir, device="cpu", draft=False, switches=KernelSwitches(q8_dot=False))
    if not isinstance(e.model.lm_head, Q8Head):
        pytest.skip("no packed int8 kernel here: the q4_1 target keeps its float32 head")
    assert not e.model.lm_head.on_q8_dot
    return e


@pytest.mark.full
@pytest.mark.parametrize("which", ["q8_dot", "torch"])
def test_the_bound_holds_and_greedy_rows_are_exact_at_the_top(which, request):
    """Both int8 passes: q8_dot's (h quantized to int16 in blocks of 32, float32 sums; its error
    measured per call) and torch's (bf16 h, bf16 output). Few candidates a row need exact logits."""
    fresh = request.getfixturevalue("fresh" if which == "q8_dot" else "on_torchs_kernel")
    head = fresh.model.lm_head
    if which == "q8_dot" and not head.on_q8_dot:
        pytest.skip(f"q8_dot does not build here: {q8_dot.unavailable()}")
    h = torch.cat([hidden_states(fresh, t) for t in TASKS])
    exact = head.exact(h)
    approx = head.approx(h).float()
    err = (exact - approx.double()).abs()
    bound = head.bound(h, approx).double()
    assert bool((err <= bound).all()), f"error {float((err / bound).max()):.2f}x the bound"
    assert float(err.max()) > 0.01  # the int8 pass is really approximate: the bound is doing work
    low = (approx - bound).max(dim=1, keepdim=True).values
    candidates = ((approx + bound) >= low).sum(dim=1)
    # (measured over these prompts' positions: a median of 31 for torch's pass; int8 activations in
    # q8_dot's pass gave ~750, which is why it takes int16 ones)
    assert float(candidates.float().median()) <= (16 if which == "q8_dot" else 64)
    out = head(h)
    assert torch.equal(out.argmax(-1), exact.argmax(-1))
    # a grammar that forbids each row's five best tokens: the argmax over the rest is exact too
    allowed = torch.ones_like(out, dtype=torch.bool)
    allowed.scatter_(1, exact.topk(5, dim=-1).indices, False)
    masked = head(h, allowed)
    want = exact.masked_fill(~allowed, float("-inf")).argmax(-1)
    assert torch.equal(masked.masked_fill(~allowed, float("-inf")).argmax(-1), want)
    # a mask shorter than the vocabulary (a tokenizer's): the tokens past it are forbidden
    short = head(h, allowed[:, :1000])
    assert torch.equal(short[:, :1000].masked_fill(~allowed[:, :1000], float("-inf")).argmax(-1),
                       exact[:, :1000].masked_fill(~allowed[:, :1000], float("-inf")).argmax(-1))


@pytest.mark.full
def test_greedy_answers_match_the_float32_head_and_never_make_it(fresh, monkeypatch):
    head = fresh.model.lm_head

    def answers(spec: str) -> list[list[int]]:
        out = []
        for task in TASKS:
            g = fresh.generate(fresh.chat_ids([{"role": "user", "content": task}]),
                               SamplingParams(max_tokens=24, temperature=0.0), speculation=spec)
            fresh.run(g)
            out.append(list(g.out))
        return out

    int8 = answers("none")
    assert answers("lookup") == int8
    assert head.full_head is None  # greedy requests never needed the float32 matrix
    with monkeypatch.context() as m:  # every logit in float32, argmax over them all
        m.setattr(Q8Head, "forward", lambda self, h, allowed=None: self.full(h))
        assert answers("none") == int8
    assert head.full_head is not None


@pytest.mark.full
def test_a_sampled_request_gets_float32_logits_of_every_token(engine_dir):
    e = Engine.load(engine_dir, device="cpu", draft=False)
    head = e.model.lm_head
    if not isinstance(head, Q8Head):
        pytest.skip("no packed int8 kernel here")
    g = e.generate(e.chat_ids([{"role": "user", "content": TASKS[0]}]),
                   SamplingParams(max_tokens=4, temperature=0.8, seed=1), speculation="none")
    e.run(g)
    assert head.full_head is not None and "float32 made" in repr(head)
    h = hidden_states(e, TASKS[1])
    full = head.full(h)
    assert full.dtype == torch.float32
    assert torch.allclose(full.double(), head.exact(h), atol=1e-3, rtol=0)


@pytest.mark.full
def test_the_load_check_in_chunks_gives_the_whole_heads_numbers(fresh, monkeypatch):
    """The requantization and its error check, LOAD_ROWS rows at a time, equal the whole head's in float64
    (what the load did before, at vocab × hidden × 8 B three times over)."""
    from orin_llm.runtime import head as head_module

    head = fresh.model.lm_head
    w = head._rows(torch.arange(head.out_features), torch.float64)
    s = (w.abs().amax(dim=1) / 127).clamp(min=1e-8).to(torch.bfloat16).double()
    q = torch.clamp(torch.round(w / s[:, None]), -127, 127).to(torch.int8)
    kept = q.double() * s[:, None]
    monkeypatch.setattr(head_module, "LOAD_ROWS", 1000)  # chunks that do not divide the vocabulary
    assert head.out_features % 1000
    codes, scales, delta, w_max, kept_max = head._requantize(w.device)
    assert torch.equal(codes, q) and torch.equal(scales, s)
    assert torch.equal(delta, (w - kept).abs().amax(dim=1)) and torch.equal(w_max, w.abs().amax(dim=1))
    assert torch.equal(kept_max, kept.abs().amax(dim=1))
    assert torch.equal(head.coef_acts, (kept.abs().amax(dim=1).float() * (1 + 2.0 ** -20)))
