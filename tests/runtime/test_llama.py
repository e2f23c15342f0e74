"""Our forward pass against transformers' own Llama on the same weights (docs/ARCHITECTURE.md, invariant 4)."""

import pytest
import torch

from orin_llm.errors import OrinError
from orin_llm.runtime.kv_cache import KVCache

pytestmark = pytest.mark.full


def test_logits_match_transformers_full_precision(engine_fp, hf_model):
    ids = engine_fp.chat_ids([{"role": "user", "content": "Where do I usually keep the milk?"}])
    cache = KVCache(engine_fp.model.arch, 256, torch.float32)
    ours = engine_fp.model(torch.tensor(ids), cache, num_logits=len(ids))
    with torch.no_grad():
        ref = hf_model(torch.tensor([ids])).logits[0].float()
    assert ours.shape == ref.shape
    # fp32 everywhere; the only differences are fused matmuls and op order.
    assert (ours - ref).abs().max().item() < 1e-3
    assert torch.equal(ours.argmax(-1), ref.argmax(-1))


def test_chunked_prefill_and_decode_equal_one_pass(engine_fp):
    ids = torch.tensor(engine_fp.encode("The robot walks to the kitchen and opens the fridge door slowly."))
    arch = engine_fp.model.arch
    whole = engine_fp.model(ids, KVCache(arch, 64, torch.float32), num_logits=len(ids))
    cache = KVCache(arch, 64, torch.float32)
    parts = [engine_fp.model(ids[:5], cache, num_logits=5), engine_fp.model(ids[5:9], cache, num_logits=4)]
    parts += [engine_fp.model(ids[i:i + 1], cache) for i in range(9, len(ids))]
    assert cache.length == len(ids)
    assert torch.allclose(torch.cat(parts), whole, atol=1e-4)


def test_crop_rolls_back_without_copying(engine_fp):
    ids = torch.tensor(engine_fp.encode("Open the door and switch on the lamp."))
    cache = KVCache(engine_fp.model.arch, 64, torch.float32)
    engine_fp.model(ids[:4], cache)
    k_ptr = cache.k.data_ptr()
    first = engine_fp.model(ids[4:], cache, num_logits=len(ids) - 4)
    cache.crop(4)
    again = engine_fp.model(ids[4:], cache, num_logits=len(ids) - 4)
    assert cache.k.data_ptr() == k_ptr and torch.equal(first, again)


def test_cache_overflow_is_an_error(engine_fp):
    cache = KVCache(engine_fp.model.arch, 4, torch.float32)
    with pytest.raises(OrinError, match="exceeds the KV cache"):
        engine_fp.model(torch.tensor(engine_fp.encode("one two three four five six")), cache)
    assert cache.length == 0
