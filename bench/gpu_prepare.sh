#!/usr/bin/env bash
# Fills .whl/ for bench/gpu_check.sh, here (with network), for a GPU machine without it: the wheels
# bench/gpu_wheels.txt lists, for the GPU image's Python (3.12, x86-64 manylinux; PY_VERSION and
# PLATFORM to change), and the embedded default's tokenizer exported to .whl/tokenizer/.
# Usage: bash bench/gpu_prepare.sh     (then carry .whl with the run: docs/BENCHMARKS.md, "On a GPU")
set -eu
cd "$(dirname "$0")/.."
py="${PYTHON:-python3}"
mkdir -p .whl
failed=()
while read -r want; do
  case "$want" in ''|'#'*) continue ;; esac
  "$py" -m pip download -q --no-deps --only-binary=:all: --python-version "${PY_VERSION:-3.12}" \
    --platform "${PLATFORM:-manylinux_2_31_x86_64}" -d .whl "$(echo "$want" | sed 's/-\([^-]*\)$/==\1/')" \
    || failed+=("$want")
done < bench/gpu_wheels.txt
"$py" - <<'PY'
import json
from pathlib import Path

from orin_llm.build.convert import export_tokenizer, load_hf_tokenizer
from orin_llm.build.source import resolve_source
from orin_llm.profile import embedded_profile

out = Path(".whl/tokenizer")
tok = load_hf_tokenizer(resolve_source(embedded_profile().target.model))
export_tokenizer(tok, out)
(out / "generation_config.json").write_text(json.dumps({"bos_token_id": tok.bos_token_id,
                                                        "eos_token_id": tok.eos_token_id}))
print(f"[gpu_prepare] {len(list(Path('.whl').glob('*.whl')))} wheels and the tokenizer in .whl/")
PY
if [ ${#failed[@]} -gt 0 ]; then
  echo "[gpu_prepare] not downloaded: ${failed[*]} (bench/gpu_check.sh will refuse to start without them)"
  exit 1
fi
