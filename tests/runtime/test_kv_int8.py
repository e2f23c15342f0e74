"""INT8 KV cache: byte count, quantization error, calibration statistics, no silent fp fallback."""

import json
import os
import shutil

import pytest
import torch

from orin_llm.errors import OrinError
from orin_llm.planning.calibration_data import load_split
from orin_llm.runtime.engine import Engine
from orin_llm.runtime.kv_cache import AbsmaxObserver, Int8KVCache, KVCache
from orin_llm.runtime.kv_pool import load_scales


@pytest.mark.full
def test_int8_is_exactly_half_of_fp16_per_token(engine):
    arch = engine.model.arch
    fp16 = KVCache(arch, 8, torch.float16)
    int8 = engine.contiguous_cache(8)
    assert isinstance(int8, Int8KVCache)
    assert int8.bytes_per_token * 2 == fp16.bytes_per_token == arch.kv_bytes_per_token(2)
    assert int8.scales_nbytes == 2 * arch.num_layers * arch.num_kv_heads * 4  # fixed, not per token
    pool = engine.cache.target_pool  # the engine's paged pool stores the same bytes per token
    assert pool.int8 and pool.bytes_per_token == int8.bytes_per_token


@pytest.mark.full
def test_calibrated_scales_cover_the_observed_range(engine_dir, engine):
    k_scale, v_scale = load_scales(engine_dir / engine.manifest.target.kv_cache.scales)
    arch = engine.model.arch
    assert k_scale.shape == v_scale.shape == (arch.num_layers, arch.num_kv_heads)
    assert torch.all(k_scale > 0) and torch.all(v_scale > 0)
    # the absmax a fresh observation finds on calibration text equals what the scales encode
    item = load_split("calib")[0]
    ids = torch.tensor(engine.encode(item.task + " " + " ".join(item.reference_plan)))
    obs = AbsmaxObserver(arch, 128, torch.float32)
    engine.model(ids, obs)
    assert torch.allclose(obs.k_absmax[0], obs.k[0, :, : len(ids)].abs().amax(dim=(1, 2)))
    # per-head scales differ across heads (the reason to keep them per head)
    assert not torch.allclose(k_scale[:, 0], k_scale[:, 1])


def test_quantization_error_is_within_half_a_step():
    from orin_llm.arch import Arch

    arch = Arch(num_layers=1, hidden_size=8, intermediate_size=8, num_heads=2, num_kv_heads=2, head_dim=4,
                vocab_size=10, tie_word_embeddings=True, max_position_embeddings=16, rms_norm_eps=1e-5,
                rope_theta=1e4)
    scale = torch.tensor([[0.02, 0.05]])
    cache = Int8KVCache(arch, 16, scale, scale, torch.float32)
    # uniform within the representable range (randn drew past 4 sigma now and then: a value clipped
    # at 127 steps is not a rounding error, and the test failed by the draw)
    gen = torch.Generator().manual_seed(0)
    k = (torch.rand(5, 2, 4, generator=gen) * 2 - 1) * torch.tensor([0.02, 0.05])[None, :, None] * 127
    cache.write(0, 0, k, k)
    got, _ = cache.read(0, 5)
    err = (got.transpose(0, 1) - k).abs()
    assert torch.all(err <= scale[0][None, :, None] / 2 + 1e-7)
    assert cache.k.dtype == torch.int8
    # what attention reads: the stored int8 values (views, no copy), and the scales it folds into q
    # and its output
    raw_k, raw_v, k_scale, v_scale = cache.read_unscaled(0, 5)
    assert raw_k.dtype == torch.int8 and raw_k.data_ptr() == cache.k.data_ptr()
    assert torch.equal(raw_k, cache.k[0, :, :5]) and torch.equal(k_scale, scale[0])
    assert torch.allclose(raw_v.float() * v_scale[:, None, None], cache.read(0, 5)[1])


@pytest.mark.full
def test_int8_without_scales_is_an_error(engine_dir, tmp_path):
    dst = tmp_path / "eng"
    shutil.copytree(engine_dir, dst, copy_function=os.link)
    manifest = dst / "manifest.json"
    data = json.loads(manifest.read_text())
    data["target"]["kv_cache"]["scales"] = None
    manifest.unlink()  # a hard link: write a new file rather than through the shared inode
    manifest.write_text(json.dumps(data))
    with pytest.raises(OrinError, match="INT8 KV cache asked for, but the target has no calibrated"):
        Engine.load(dst, device="cpu")
    eng = Engine.load(dst, device="cpu", kv_cache="fp32", draft=False)  # asked for fp explicitly: fine
    assert eng.cache.target_pool.k.dtype == torch.float32


@pytest.mark.full
def test_int8_kv_agrees_with_full_precision_on_held_out_plans(engine, engine_fp):
    """Teacher-forced argmax agreement on held-out planning answers (the benchmark measures it
    on the whole split; this guards against a broken quantizer)."""
    items = load_split("heldout")[:4]
    agree = total = 0
    for it in items:
        ids = torch.tensor(engine.encode(f"Task: {it.task}\n" + "\n".join(it.reference_plan)))
        lanes = []
        for e in (engine, engine_fp):
            lanes.append(e.model(ids, e.contiguous_cache(len(ids)), num_logits=len(ids)).argmax(-1))
        agree += int((lanes[0] == lanes[1]).sum())
        total += len(ids)
    assert agree / total >= 0.9
