#!/usr/bin/env bash
# On-device benchmark: checks the device, then runs every scenario and writes JSON, plots and
# report.md (memory and power sampled by phase with tegrastats) into one folder.
#   jetson/bench.sh [--quick] [TORCH_ENGINE_DIR] [TRTLLM_ENGINE_DIR]
# Both engines run every scenario (prefix, kv, speculative, constrained, daemon, policy). On the
# TensorRT-LLM engine the KV dtype is compiled in: its kv scenario reports that engine's KV bytes, plan
# and decode speed, and the INT8 KV agreement comes from the torch engine's kv scenario
# (orin_llm/bench/kv.py says why). First it settles what only the device can (jetson/GUIDE.md §2a):
# whether the installed TensorRT-LLM has the rules orin-llm enforces, and whether the checkpoint kept
# Llama 3.2's tied lm_head; last, what the executor's cache served in the prefix scenario.
# The policy scenario runs the robot's policy next to the planner: POLICY_ONNX=/path/policy.onnx for
# yours; by default the SmolVLA-class STAND-IN (random weights, ~0.42 B parameters, float16) is
# generated once, and run with TensorRT (its engine is built on the first run and cached beside it).
# POLICY_RATE_HZ sets the control rate (default 30).
set -euo pipefail
quick=()
if [[ "${1:-}" == "--quick" ]]; then quick=(--quick); shift; fi
torch_engine="${1:-engines/smollm2-135m-demo}"
trt_engine="${2:-engines/agx-orin-64gb}"
out="bench-$(hostname)-$(date -u +%Y%m%dT%H%M%SZ)"
policy="${POLICY_ONNX:-policies/stand-in-smolvla.onnx}"
if [[ -z "${POLICY_ONNX:-}" && ! -f "$policy" ]]; then
  python3 -m orin_llm.policy.standin --shape smolvla --out "$policy"
fi
policy_opts=(--policy "$policy" --policy-rate-hz "${POLICY_RATE_HZ:-30}")
orin-llm doctor --engine "$trt_engine" || echo "doctor reported problems (see above); continuing"
echo "TensorRT-LLM 0.12's rules in the installed library (docs/trtllm-0.12-jetson.md §8):"
python3 -m orin_llm.backends.trtllm.rules --check-install || echo "could not look into the installed TensorRT-LLM; continuing"
ckpt="$trt_engine/ckpt/target/rank0.safetensors"
if [[ -f "$ckpt" ]]; then
  python3 -c "import sys; from safetensors import safe_open; ok = 'lm_head.weight' in safe_open(sys.argv[1], 'pt').keys(); print(('lm_head.weight present in ' if ok else 'lm_head.weight MISSING from ') + sys.argv[1])" "$ckpt"
fi
orin-llm bench --engine "$torch_engine" --scenario all --out "$out/torch" "${policy_opts[@]}" "${quick[@]}"
if [[ -f "$trt_engine/manifest.json" ]]; then
  orin-llm bench --engine "$trt_engine" --scenario all --out "$out/trtllm" "${policy_opts[@]}" "${quick[@]}"
  # what the policy measured, next to what the engine's memory plan reserved for it
  orin-llm doctor --engine "$trt_engine" --policy "$out/trtllm/policy-runs/together-protected/policy-measurement.json" \
    || echo "doctor: the measured policy and the plan disagree (see above)"
  python3 - "$out/trtllm/prefix.json" <<'PY'
import json
import sys

for r in json.load(open(sys.argv[1]))["rows"]:
    print(f"prefix {r['prefix_tokens']} tokens: the cache served {r['cached_prompt_tokens']} "
          f"(stored blocks could serve at most {r['requests']['warm']['reusable_tokens']})")
PY
else
  echo "no TensorRT-LLM engine at $trt_engine: build it with orin-llm build --profile jetson/profiles/agx-orin-64gb.toml"
fi
echo "reports: $out/torch/report.md ${trt_engine:+$out/trtllm/report.md}"
