#!/usr/bin/env bash
# On-device benchmark: checks the device, then runs every scenario and writes JSON, plots and
# report.md (memory and power sampled by phase with tegrastats) into one folder.
#   jetson/bench.sh [--quick] [TORCH_ENGINE_DIR] [TRTLLM_ENGINE_DIR]
# Both engines run every scenario (prefix, kv, speculative, daemon, policy). On the TensorRT-LLM engine
# the KV dtype is compiled in: its kv scenario reports that engine's KV bytes, plan and decode speed,
# and the INT8 KV agreement comes from the torch engine's kv scenario (orin_llm/bench/kv.py says why).
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
orin-llm bench --engine "$torch_engine" --scenario all --out "$out/torch" "${policy_opts[@]}" "${quick[@]}"
if [[ -f "$trt_engine/manifest.json" ]]; then
  orin-llm bench --engine "$trt_engine" --scenario all --out "$out/trtllm" "${policy_opts[@]}" "${quick[@]}"
  # what the policy measured, next to what the engine's memory plan reserved for it
  orin-llm doctor --engine "$trt_engine" --policy "$out/trtllm/policy-runs/together-protected/policy-measurement.json" \
    || echo "doctor: the measured policy and the plan disagree (see above)"
else
  echo "no TensorRT-LLM engine at $trt_engine: build it with orin-llm build --profile jetson/profiles/agx-orin-64gb.toml"
fi
echo "reports: $out/torch/report.md ${trt_engine:+$out/trtllm/report.md}"
