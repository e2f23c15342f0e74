#!/usr/bin/env bash
# The GPU check of issues 36 and 47 (orin_llm/bench/gpu.py): on a CUDA machine with no network, one JSON,
# written after every stage, in <= 6 minutes with a minute left to rerun one stage (--stages).
# Wheels the image lacks travel in .whl/ (git-ignored; carry it; bench/gpu_prepare.sh fills it), as
# bench/gpu_wheels.txt lists them, with the embedded default's exported tokenizer in .whl/tokenizer/.
# They are checked first, before anything slow (the device's minutes are few): one missing ends the run
# at once, saying which (--cpu-smoke: a warning, what is installed runs).
# Usage: ORIN_LLM_COMMIT=<sha> bash bench/gpu_check.sh [OUT_JSON] [--budget-s 300] [--stages a,b] [--cpu-smoke]
#   OUT_JSON defaults to $OUT/gpu_check.json (the device tool's output folder), else /tmp/gpu_check.json.
#   ORIN_LLM_COMMIT: the commit the tree is (stamped into the JSON: a copied tree's .git may be stale).
#   ORIN_LLM_WHEELS: the wheel folder (default .whl). GPU_CHECK_HARD_S: the hard limit (default 345 s).
set -u
cd "$(dirname "$0")/.."
out="${1:-${OUT:-/tmp}/gpu_check.json}"
shift || true
py="${PYTHON:-python3}"
wheels="${ORIN_LLM_WHEELS:-.whl}"
smoke=0
for arg in "$@"; do [ "$arg" = "--cpu-smoke" ] && smoke=1; done
missing=()
while read -r want; do
  case "$want" in ''|'#'*) continue ;; esac
  ls "$wheels/$want"-*.whl >/dev/null 2>&1 || missing+=("$want")
done < bench/gpu_wheels.txt
[ -f "$wheels/tokenizer/tokenizer.json" ] || missing+=("tokenizer/tokenizer.json")
if [ ${#missing[@]} -gt 0 ]; then
  echo "[gpu_check] missing in $wheels/: ${missing[*]} (bench/gpu_prepare.sh fills it; carry it)"
  [ "$smoke" = 1 ] || exit 3
else
  echo "[gpu_check] wheels checked: $(ls "$wheels"/*.whl | wc -l) in $wheels/, and the tokenizer"
fi
if ls "$wheels"/*.whl >/dev/null 2>&1; then
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/orin_llm_site \
    "$wheels"/*.whl || echo "[gpu_check] wheel install failed: the stages that need them will say so"
  export PYTHONPATH="$PWD:/tmp/orin_llm_site${PYTHONPATH:+:$PYTHONPATH}"
else
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false ORIN_LLM_WHEELS="$wheels"
tok="$wheels/tokenizer"
[ -f "$tok/tokenizer.json" ] || tok="${ORIN_LLM_TEST_TOKENIZER:-$tok}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || true
# the hard limit: SIGTERM (gpu.py writes its JSON and goals and exits), SIGKILL 10 s later
exec timeout --kill-after=10 "${GPU_CHECK_HARD_S:-345}" "$py" -m orin_llm.bench.gpu --out "$out" --tokenizer "$tok" "$@"
