"""K smoothing (runtime/k_smoothing.py): factors shared within RoPE pairs, in [1, MAX_FACTOR], the
head's largest channels untouched; folded into the q and k rows, they scale each key channel by its
factor (the rotation commutes with them) and leave the model's logits as they were."""

import pytest
import torch

from orin_llm.manifest import load_manifest
from orin_llm.runtime import k_smoothing
from orin_llm.runtime.kv_cache import AbsmaxObserver
from orin_llm.runtime.weights import load_llama
from tests.conftest import tiny_fixture

tiny_engine_dir = tiny_fixture("engine_dir")  # random weights do here (tests/conftest.py)


def test_factors_lift_the_small_channels_up_to_the_cap_and_keep_the_largest():
    a = torch.tensor([[[8.0, 1.0, 0.5, 0.01, 2.0, 4.0, 0.5, 0.02]]])  # [1 layer, 1 head, D=8]: pairs (c, c+4)
    s = k_smoothing.factors(a)
    pair = torch.maximum(a[..., :4], a[..., 4:])  # 8, 4, 0.5, 0.02
    assert torch.equal(s[..., :4], s[..., 4:])  # one factor per RoPE pair
    assert torch.allclose(s[0, 0, :4], torch.tensor([1.0, 2.0, k_smoothing.MAX_FACTOR, k_smoothing.MAX_FACTOR]))
    assert float(s.min()) >= 1.0 and float(s.max()) <= k_smoothing.MAX_FACTOR
    # the head's largest channel is unchanged, so its INT8 scale is the same as without smoothing
    assert torch.equal(k_smoothing.smoothed_absmax(a, s), a.amax(-1))
    lifted = torch.tensor([8.0, 8.0, 0.5 * k_smoothing.MAX_FACTOR, 0.02 * k_smoothing.MAX_FACTOR])
    assert torch.allclose((pair * s[..., :4])[0, 0], lifted)


def test_wrong_shapes_are_refused(tiny_engine_dir):
    arch = load_manifest(tiny_engine_dir).target.arch
    with pytest.raises(ValueError, match="K smoothing factors have shape"):
        k_smoothing.apply({}, torch.ones(arch.num_layers, arch.num_kv_heads, arch.head_dim + 2), arch)


def _load(engine_dir, k_smooth=None):
    m = load_manifest(engine_dir)
    return load_llama(engine_dir / m.target.dir, m.target.arch, torch.float32, "cpu", 256, m.target.weights,
                      kv_cache="fp32", k_smooth=k_smooth)


def test_folded_into_the_rows_they_scale_each_key_channel_and_keep_the_logits(tiny_engine_dir):
    arch = load_manifest(tiny_engine_dir).target.arch
    g = torch.Generator().manual_seed(0)
    half = torch.rand(arch.num_layers, arch.num_kv_heads, arch.head_dim // 2, generator=g) * 7 + 1
    s = torch.cat([half, half], dim=-1)  # pair-shared, in [1, 8]
    plain, smooth = _load(tiny_engine_dir), _load(tiny_engine_dir, s)
    ids = torch.randint(0, arch.vocab_size, (40,), generator=g)
    observed = {}
    for name, model in (("plain", plain), ("smooth", smooth)):
        obs = AbsmaxObserver(arch, 64, torch.float32)
        observed[name] = (model(ids, obs, num_logits=40), obs.k_channel_absmax)
    # keys: channel c times s_c after RoPE too (a factor not shared by its pair would not commute): in the
    # first layer to float rounding, in later ones as far as the rounding of the layers before carries
    got, want = observed["smooth"][1], observed["plain"][1] * s
    assert torch.allclose(got[0], want[0], rtol=1e-5, atol=1e-7)
    assert torch.allclose(got, want, rtol=2e-3, atol=1e-6)
    # scores, hence logits, as they were (float rounding only)
    a, b = observed["plain"][0], observed["smooth"][0]
    assert float((a - b).abs().max()) <= 1e-3 * float(a.abs().max())
    assert torch.equal(a.argmax(-1), b.argmax(-1))


def test_each_row_format_takes_one_factor_a_row():
    """A Q4_1 row's scales and mins [rows, groups], an int8 row's scales [rows] (a draft), a float
    row's weights [rows, in]: each row times its factor, nothing broadcast across rows."""
    from orin_llm.arch import Arch

    arch = Arch(architecture="llama", num_layers=1, hidden_size=8, intermediate_size=16, num_heads=2,
                num_kv_heads=1, head_dim=4, vocab_size=10, tie_word_embeddings=True, max_position_embeddings=64,
                rms_norm_eps=1e-5, rope_theta=1e4)
    s = torch.tensor([[[2.0, 3.0, 2.0, 3.0]]])
    rows = k_smoothing.row_factors(s, arch)[0]  # q: 2 heads x 4, k: 4, v: 4
    assert torch.allclose(rows, torch.tensor([0.5, 1 / 3, 0.5, 1 / 3] * 2 + [2.0, 3.0, 2.0, 3.0] + [1.0] * 4))
    name = "layers.0.self_attn.qkv_proj"
    for suffix, shape in (("scales", (16,)), ("scales", (16, 3)), ("weight", (16, 8))):
        state = {f"{name}.{suffix}": torch.ones(shape, dtype=torch.float16 if suffix == "scales" else torch.float32)}
        k_smoothing.apply(state, s, arch)
        got = state[f"{name}.{suffix}"]
        assert got.shape == shape and got.dtype == torch.float32
        assert torch.allclose(got, rows.view(-1, *([1] * (len(shape) - 1))).expand(shape))


def test_the_scales_file_carries_them_and_older_files_load_without(tmp_path):
    from orin_llm.build.calibrate import write_scales
    from orin_llm.runtime.kv_pool import load_k_smoothing, load_scales

    g = torch.Generator().manual_seed(1)
    channel = torch.rand(2, 3, 8, generator=g) + 0.01
    k_absmax, v_absmax = channel.amax(-1), torch.rand(2, 3, generator=g) + 0.1
    write_scales(tmp_path / "new.safetensors", k_absmax, v_absmax, {}, channel)
    write_scales(tmp_path / "old.safetensors", k_absmax, v_absmax, {})
    for name in ("new", "old"):
        k, v = load_scales(tmp_path / f"{name}.safetensors")
        assert torch.allclose(k, k_absmax / 127) and torch.allclose(v, v_absmax / 127)
    assert torch.equal(load_k_smoothing(tmp_path / "new.safetensors"), k_smoothing.factors(channel))
    assert load_k_smoothing(tmp_path / "old.safetensors") is None
