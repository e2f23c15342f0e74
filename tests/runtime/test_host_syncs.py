"""The host loop's reads of device tensors in a plain greedy decode step (issue 47, S3 groundwork), counted
on a CPU with the forward stubbed: the tiny engine's decode steps on the fixed-shape path, whose compute
(the graphs' step) returns logits marked as device tensors (`Dev`); every read of one back to the host
(.tolist(), .item(), int(), bool(), .cpu(), ...) is a point where a GPU's host would wait for the step,
and every tensor of ids made for the device a host-to-device copy. What S3 asks: no host sync in a
plain greedy step (the argmax in the graph feeding the next step's token on the device)."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from orin_llm.runtime.kernel_plan import KernelSwitches

TORCH_OPS = KernelSwitches(fused_decode=False, int8_attention=False, q8_dot=False)
# reading a device tensor on the host: the host waits for the device's queue to get there
SYNCS = {"item", "tolist", "cpu", "numpy", "__int__", "__float__", "__bool__", "__index__"}
TOKEN = 1234  # what the stubbed step's logits pick, every row


class Dev(torch.Tensor):
    """A tensor standing for one on the GPU: each host read of it (SYNCS) counted in `Dev.reads`."""

    reads: Counter = Counter()

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in SYNCS:
            Dev.reads[name] += 1
        return super().__torch_function__(func, types, args, kwargs or {})


@pytest.fixture(scope="module")
def stubbed(tiny_engine_dir):
    """The tiny engine (2 layers: its prefill is real and quick) with its decode steps on the fixed-shape
    path, the step itself stubbed, the ids it is fed made as device tensors."""
    from orin_llm.runtime.engine import Engine

    eng = Engine.load(tiny_engine_dir, device="cpu", switches=TORCH_OPS)
    eng.model.layers = eng.model.layers[:2]
    # a head computed in the step, as the CUDA path's (the CPU's exact int8 head runs after it, on the host)
    arch = eng.model.arch
    eng.model.lm_head = torch.nn.Linear(arch.hidden_size, arch.vocab_size, bias=False)
    torch.nn.init.zeros_(eng.model.lm_head.weight)
    eng.runner.attach_graphs(eng.cache.target_pool, eng.manifest.limits["max_batch_size"],
                            eng.max_seq_len + eng.decode_rows, capture=False)
    vocab = eng.model.arch.vocab_size
    counts = Counter()

    def step(inp):
        counts["steps"] += 1
        logits = torch.zeros(inp.batch * inp.width, vocab)
        logits[:, TOKEN] = 1.0
        return logits.as_subclass(Dev)

    def ids(values: list[int]) -> torch.Tensor:
        counts["ids_to_device"] += 1
        return torch.tensor(values, dtype=torch.long).as_subclass(Dev)

    eng.runner.graphs.step = step
    eng.runner._tensor = ids
    return eng, counts


def _decode_steps(eng, counts, tokens: int) -> list[Counter]:
    """A plain greedy request: its prefill, then each decode step's host reads and ids sent."""
    from orin_llm.runtime.sampling import SamplingParams

    gen = eng.generate(list(range(100, 140)), SamplingParams(max_tokens=tokens), speculation="none")
    gen.stop_ids = set()
    eng.submit(gen)
    while not gen.out:
        eng.step()
    per_step = []
    while eng.busy:
        Dev.reads.clear()
        before = Counter(counts)
        eng.step()
        per_step.append(Dev.reads + Counter({k: v for k, v in (Counter(counts) - before).items()}))
    assert gen.out[1:] == [TOKEN] * (tokens - 1)  # (the stub's logits decided every decode step's token)
    return per_step


def test_the_count_sees_a_step_s_host_reads(stubbed):
    eng, counts = stubbed
    steps = _decode_steps(eng, counts, 6)
    assert len(steps) == 5 and all(s["steps"] == 1 for s in steps)  # every decode step took the stubbed path
    assert all(s == steps[0] for s in steps), steps  # the same host work every step
    # today: the ids made on the device and read straight back (llama._graphed: .tolist()), and the argmax
    # read on the host (speculative.verify: .tolist()); one tensor of ids sent (model_runner._tensor)
    assert steps[0]["ids_to_device"] == 1 and steps[0]["tolist"] == 2, steps[0]
    assert sum(steps[0][name] for name in SYNCS) == 2, steps[0]


@pytest.mark.xfail(strict=True, raises=AssertionError,
                   reason="issue 47 S3 not done: the argmax and the next token stay on the host")
def test_a_plain_greedy_step_does_not_wait_for_the_device(stubbed):
    eng, counts = stubbed
    step = _decode_steps(eng, counts, 4)[-1]
    assert sum(step[name] for name in SYNCS) == 0, step
