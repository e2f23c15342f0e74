"""Speculative decoding is lossless (docs/ARCHITECTURE.md, invariant 1): greedy output with any drafter equals
plain greedy output token for token; sampled output follows the target's distribution."""

import pytest
import torch

from orin_llm.errors import OrinError
from orin_llm.planning.calibration_data import load_home, load_split
from orin_llm.planning.planner import Planner
from orin_llm.runtime.sampling import SamplingParams
from orin_llm.runtime.speculative import AdaptiveK, LookupDrafter, verify
from tests.conftest import tiny_fixture

tiny_engine = tiny_fixture("engine")  # random weights do here (tests/conftest.py)
# full tier: every generation runs to max_tokens under a grammar mask or a drafter; tens of minutes on 2 cores
pytestmark = pytest.mark.full
tiny_engine_dir = tiny_fixture("engine_dir")  # random weights do here (tests/conftest.py)

HELD_OUT = load_split("heldout")[::2][:30]


@pytest.fixture(scope="module")
def planners(engine):
    """One planner per home for the module, unpinned at its end (the engine is the session's)."""
    made: dict = {}

    def get(home: str) -> Planner:
        if home not in made:
            made[home] = Planner(engine, load_home(home))
        return made[home]
    yield get
    for p in made.values():
        engine.unpin(p.pin)


@pytest.fixture(scope="module")
def plain_outputs(planners):
    outs = {}
    for it in HELD_OUT:
        planner = planners(it.home)
        res = planner.plan(it.task, SamplingParams(max_tokens=40), speculation="none")
        outs[it.id] = res.result.token_ids
    return outs


@pytest.mark.parametrize("mode", ["lookup", "draft_model", "combined"])
def test_greedy_with_each_drafter_equals_plain(planners, plain_outputs, mode):
    assert len(HELD_OUT) >= 30
    drafted = 0
    for it in HELD_OUT:
        planner = planners(it.home)
        res = planner.plan(it.task, SamplingParams(max_tokens=40), speculation=mode)
        assert res.result.token_ids == plain_outputs[it.id], f"{mode} diverged on {it.id}"
        spec = res.result.speculation
        assert spec.drafter == mode and spec.accepted <= spec.drafted
        drafted += spec.drafted
    assert drafted > 0  # the drafter really proposed tokens


def test_stats_add_up(engine, planners):
    it = HELD_OUT[0]
    planner = planners(it.home)
    res = planner.plan(it.task, SamplingParams(max_tokens=40), speculation="combined")
    s, t = res.result.speculation, res.result.timings
    n = t.completion_tokens
    # every emitted token after the first came from a target step (accepted drafts + one per step) or
    # was forced by the plan grammar (jump-forward: no step)
    assert s.accepted + s.steps + t.forced_tokens >= n - 1 and s.steps <= n
    assert 1.0 <= s.mean_accepted_length <= 1 + 2 * engine.manifest.limits["draft_len"]


def test_unknown_or_unavailable_drafter_is_refused(engine):
    with pytest.raises(OrinError, match="available: auto, none, lookup, draft_model, combined"):
        engine.generate([1, 2, 3], SamplingParams(), speculation="medusa")


def _chi2(counts: torch.Tensor, p: torch.Tensor) -> float:
    expected = p * counts.sum()
    return float(((counts - expected) ** 2 / expected).sum())


@pytest.mark.parametrize("deterministic_draft", [False, True])
def test_rejection_sampling_follows_the_target_distribution(deterministic_draft):
    """First and second emitted tokens follow p, whatever the draft distribution q (df = 5:
    chi-square above 20.5 happens with probability 0.001 if the rule is right)."""
    params = SamplingParams(temperature=1.0, seed=0)
    gen = torch.Generator().manual_seed(1234)
    logits = torch.log(torch.tensor([[0.05, 0.30, 0.10, 0.25, 0.20, 0.10],
                                     [0.40, 0.05, 0.05, 0.20, 0.10, 0.20],
                                     [1 / 6] * 6]))
    p = torch.softmax(logits, -1)
    q = torch.tensor([[0.30, 0.05, 0.30, 0.05, 0.20, 0.10],
                      [0.10, 0.40, 0.10, 0.10, 0.10, 0.20]])
    first = torch.zeros(6)
    second = torch.zeros(6)
    for _ in range(10000):
        if deterministic_draft:  # lookup: always proposes tokens 2 then 0 (q one-hot)
            draft, qd = [2, 0], None
        else:
            draft = [int(torch.multinomial(q[i], 1, generator=gen)) for i in range(2)]
            qd = q
        n, nxt = verify(logits, draft, qd, params, gen)
        emitted = draft[:n] + [nxt]
        first[emitted[0]] += 1
        if n >= 1:  # the first draft token stood: the second token must follow p[1]
            second[emitted[1]] += 1
    assert _chi2(first, p[0]) < 20.5
    assert second.sum() > 500 and _chi2(second, p[1]) < 20.5


def test_greedy_verify_takes_the_target_token_at_the_first_mismatch():
    logits = torch.tensor([[0.0, 5.0, 1.0], [3.0, 0.0, 1.0], [0.0, 0.0, 9.0]])
    assert verify(logits, [1, 0], None, SamplingParams(), None) == (2, 2)  # all accepted + bonus
    assert verify(logits, [1, 2], None, SamplingParams(), None) == (1, 0)  # correction at mismatch
    assert verify(logits, [], None, SamplingParams(), None) == (0, 1)  # plain step


def test_lookup_drafts_from_context_and_from_history():
    d = LookupDrafter()
    d.begin([5, 6, 7, 8, 9, 5, 6])
    assert d.propose([5, 6, 7, 8, 9, 5, 6], 3, SamplingParams(), None)[0] == [7, 8, 9]
    d.finish([40, 41, 42, 43])
    d.begin([1, 2, 40, 41])
    assert d.propose([1, 2, 40, 41], 2, SamplingParams(), None)[0] == [42, 43]
    assert d.propose([1, 2, 3], 2, SamplingParams(), None)[0] == []  # no match: no draft


def test_adaptive_draft_length_grows_shrinks_and_pauses():
    a = AdaptiveK(k=4, k_max=8)
    a.update(4, 4)
    assert a.k == 6
    a.update(6, 6)
    assert a.k == 8
    a.update(8, 2)
    assert a.k == 7
    for _ in range(6):
        a.update(a.next_k() or 1, 0)
    assert a.next_k() == 0  # acceptance too low to pay: plain decoding for a while


def test_the_build_seeds_the_lookup_history_with_calibration_plans(engine, engine_dir):
    manifest = engine.manifest
    assert manifest.profile["lookup_seed"] == "calib" and manifest.lookup_seed is not None
    assert manifest.lookup_seed in manifest.files()  # size and sha256 checked like every engine file
    calib = load_split("calib")
    assert len(engine.lookup_seed) == len(calib)
    assert engine.tokenizer.decode(engine.lookup_seed[0]) == "\n".join(calib[0].reference_plan)
    seeded = LookupDrafter(seed=engine.lookup_seed)
    assert len(seeded.history) == sum(len(o) + 1 for o in engine.lookup_seed)
    # a plan that starts like a calibration plan is drafted from the seed, with nothing in its context
    start = engine.lookup_seed[0][:4]
    draft, _ = seeded.propose(start, 3, SamplingParams(), None)
    assert draft and any(o[i:i + 4] == start and o[i + 4:i + 4 + len(draft)] == draft
                         for o in engine.lookup_seed for i in range(len(o)))  # what follows it in a seed plan
    assert LookupDrafter().propose(start, 3, SamplingParams(), None) == ([], None)


def test_a_broken_lookup_seed_is_a_clear_error(engine_dir, tmp_path):
    import os
    import shutil

    from orin_llm.manifest import load_manifest
    from orin_llm.runtime.engine_files import lookup_seed

    dst = tmp_path / "eng"
    shutil.copytree(engine_dir, dst, copy_function=os.link)
    seed = dst / "lookup_seed.json"
    size = seed.stat().st_size
    seed.unlink()
    seed.write_text('{"outputs": [[1, "two"]]}')
    with pytest.raises(OrinError, match="lookup_seed.json has 25 bytes, manifest.json says"):
        load_manifest(dst)  # the manifest's size check comes first
    seed.write_text('{"outputs": [[1, "two"]]}'.ljust(size))  # same size, wrong content
    with pytest.raises(OrinError, match="lookup_seed.json: outputs must be lists of token ids; rebuild"):
        lookup_seed(dst, load_manifest(dst))
