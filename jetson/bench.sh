#!/usr/bin/env bash
# On-device benchmark: checks the device, then runs every scenario and writes JSON, plots and
# report.md (memory and power sampled by phase with tegrastats) into one folder.
#   jetson/bench.sh [--quick] [TORCH_ENGINE_DIR] [TRTLLM_ENGINE_DIR]
# Both engines run every scenario (prefix, kv, speculative, daemon). On the TensorRT-LLM engine the
# KV dtype is compiled in: its kv scenario reports that engine's KV bytes, plan and decode speed, and
# the INT8 KV agreement comes from the torch engine's kv scenario (orin_llm/bench/kv.py says why).
# First it settles what only the device can (jetson/GUIDE.md §2a): whether the installed TensorRT-LLM
# has the rules orin-llm enforces, and whether the checkpoint kept Llama 3.2's tied lm_head; last, what
# the executor's cache served in the prefix scenario.
set -euo pipefail
quick=()
if [[ "${1:-}" == "--quick" ]]; then quick=(--quick); shift; fi
torch_engine="${1:-engines/smollm2-135m-demo}"
trt_engine="${2:-engines/agx-orin-64gb}"
out="bench-$(hostname)-$(date -u +%Y%m%dT%H%M%SZ)"
orin-llm doctor --engine "$trt_engine" || echo "doctor reported problems (see above); continuing"
echo "TensorRT-LLM 0.12's rules in the installed library (docs/trtllm-0.12-jetson.md §8):"
python3 -m orin_llm.trtllm_rules --check-install || echo "could not look into the installed TensorRT-LLM; continuing"
ckpt="$trt_engine/ckpt/target/rank0.safetensors"
if [[ -f "$ckpt" ]]; then
  python3 -c "import sys; from safetensors import safe_open; ok = 'lm_head.weight' in safe_open(sys.argv[1], 'pt').keys(); print(('lm_head.weight present in ' if ok else 'lm_head.weight MISSING from ') + sys.argv[1])" "$ckpt"
fi
orin-llm bench --engine "$torch_engine" --scenario all --out "$out/torch" "${quick[@]}"
if [[ -f "$trt_engine/manifest.json" ]]; then
  orin-llm bench --engine "$trt_engine" --scenario all --out "$out/trtllm" "${quick[@]}"
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
