"""Greedy tokens from our decode loop equal transformers' generate(do_sample=False), token for token."""

import pytest
import torch

from orin_llm.runtime.sampling import SamplingParams

pytestmark = pytest.mark.full

PROMPTS = [
    "Name three rooms in a house.",
    "What should a robot do before picking up a glass?",
    "Give me a short plan to water the plants.",
    "Which objects are usually found in a kitchen?",
    "Explain what a bedroom is in one sentence.",
    "List the steps to put a mug in the sink.",
    "How do I turn on the living room lamp?",
    "Write one sentence about a tidy hallway.",
    "What is the capital of France?",
    "Say hello to the user politely.",
    "Count from one to five.",
    "Describe a sofa in five words.",
]
MAX_NEW = 24


@pytest.mark.parametrize("prompt", PROMPTS)
def test_greedy_equals_transformers_generate(engine_fp, hf_model, prompt):
    ids = engine_fp.chat_ids([{"role": "user", "content": prompt}])
    ours = engine_fp.run(engine_fp.generate(ids, SamplingParams(max_tokens=MAX_NEW))).token_ids
    with torch.no_grad():
        out = hf_model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                max_new_tokens=MAX_NEW, do_sample=False,
                                eos_token_id=sorted(engine_fp.eos_ids),
                                pad_token_id=sorted(engine_fp.eos_ids)[0])
    ref = out[0, len(ids):].tolist()
    while ref and ref[-1] in engine_fp.eos_ids:  # transformers keeps the EOS it stopped on; we drop it
        ref.pop()
    assert len(ours) > 0
    assert ours == ref
