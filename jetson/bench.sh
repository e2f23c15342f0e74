#!/usr/bin/env bash
# On-device benchmark: checks the device, then runs every scenario and writes JSON, plots and
# report.md (memory and power sampled by phase with tegrastats) into one folder.
#   jetson/bench.sh [--quick] [TORCH_ENGINE_DIR] [TRTLLM_ENGINE_DIR]
# Both engines run every scenario (prefix, kv, speculative, daemon). On the TensorRT-LLM engine the
# KV dtype is compiled in: its kv scenario reports that engine's KV bytes, plan and decode speed, and
# the INT8 KV agreement comes from the torch engine's kv scenario (orin_llm/bench/kv.py says why).
set -euo pipefail
quick=()
if [[ "${1:-}" == "--quick" ]]; then quick=(--quick); shift; fi
torch_engine="${1:-engines/smollm2-135m-demo}"
trt_engine="${2:-engines/agx-orin-64gb}"
out="bench-$(hostname)-$(date -u +%Y%m%dT%H%M%SZ)"
orin-llm doctor --engine "$trt_engine" || echo "doctor reported problems (see above); continuing"
orin-llm bench --engine "$torch_engine" --scenario all --out "$out/torch" "${quick[@]}"
if [[ -f "$trt_engine/manifest.json" ]]; then
  orin-llm bench --engine "$trt_engine" --scenario all --out "$out/trtllm" "${quick[@]}"
else
  echo "no TensorRT-LLM engine at $trt_engine: build it with orin-llm build --profile jetson/profiles/agx-orin-64gb.toml"
fi
echo "reports: $out/torch/report.md ${trt_engine:+$out/trtllm/report.md}"
