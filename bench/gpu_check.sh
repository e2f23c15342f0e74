#!/usr/bin/env bash
# The GPU check of issue 36 (orin_llm/bench/gpu.py): on a CUDA machine with no network, in <= 8 minutes,
# one JSON. Wheels the image lacks travel in .whl/ (git-ignored; carry it), with the embedded default's
# exported tokenizer in .whl/tokenizer/:
#   pydantic-2.14.4, pydantic_core-2.50.5 (cp312 manylinux), annotated_types-0.8.0,
#   typing_inspection-0.4.5, llguidance-1.9.1 (abi3 manylinux_2_31)
# Usage: bash bench/gpu_check.sh [OUT_JSON] [--budget-s 330] [--cpu-smoke]
#   OUT_JSON defaults to $OUT/gpu_check.json (the device tool's output folder), else /tmp/gpu_check.json.
#   The stages run most important first (orin_llm/bench/gpu.py's doc): the CUDA tests in capped groups,
#   batch-1 decode with each int4 kernel, transformers, batch 4/8, TTFT, then what time allows.
set -u
cd "$(dirname "$0")/.."
out="${1:-${OUT:-/tmp}/gpu_check.json}"
shift || true
py="${PYTHON:-python3}"
if ls .whl/*.whl >/dev/null 2>&1; then
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/orin_llm_site \
    .whl/*.whl || echo "[gpu_check] wheel install failed: the stages that need them will say so"
  export PYTHONPATH="$PWD:/tmp/orin_llm_site${PYTHONPATH:+:$PYTHONPATH}"
else
  echo "[gpu_check] no .whl/ here: using what is installed"
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
tok=.whl/tokenizer
[ -f "$tok/tokenizer.json" ] || tok="${ORIN_LLM_TEST_TOKENIZER:-$tok}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || true
exec "$py" -m orin_llm.bench.gpu --out "$out" --tokenizer "$tok" "$@"
