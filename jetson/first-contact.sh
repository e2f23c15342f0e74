#!/usr/bin/env bash
# jetson/first-contact.sh — everything a new Jetson AGX Orin needs, in order, and one tarball to attach
# to a bug report:
#   1. checks     before any install: L4T R36.4.x (JetPack 6.1/6.2.x; a JetPack 7 board is told what to do
#                 instead), the Python, free disk where the checkpoints and engines go (computed from the
#                 profile), disk swap, power mode and clocks, the checkpoints (or the login and download)
#   2. installs   jetson/setup.sh: apt packages, TensorRT-LLM v0.12.0-jetson, orin-llm, all under
#                 jetson/constraints-0.12-jetson.txt; then the doctor (JSON), MAXN and pinned clocks
#   3. build      the memory plan (JSON), then orin-llm build --profile P: NVIDIA's documented path
#                 (convert_checkpoint.py weight-only INT4, trtllm-build), each step's log kept
#   4. ladder     the feature ladder: plain, block reuse, chunked context, grammar post-processor, lookup,
#                 the 1B draft, one more per rung (the plain and reuse engines built from the profile's
#                 siblings); each rung a daemon with --trtllm-features and its smoke test (health, a plan,
#                 a streamed plan, a cancelled stream); it stops at the first rung that fails
#   5. bench      orin-llm bench --quick on the engine; the grammar post-processor's per-token cost on the GPU
#   6. tests      the TensorRT-LLM backend's tests on the real bindings and this engine (the cases the fake
#                 passes on any machine; ORIN_LLM_TEST_TRTLLM_ENGINE=the engine), a JUnit XML of them
# It stops at the first failure and says the next thing to try. Whatever happened, the run's folder
# (versions, logs, doctor JSON, the profile, the memory plan, the build commands, each ladder rung's
# build and serve logs and smoke JSON, the bench JSON,
# the tests' XML)
# is packed into <out>.tar.gz.
#
# Usage: jetson/first-contact.sh [--dry-run] [--jetpack 6|7] [--profile TOML] [--engine DIR] [--out DIR]
#                                [--swap GB] [--skip-install]
# --jetpack 7: a JetPack 7 (L4T R38) Orin on TensorRT Edge-LLM 0.11 instead (jetson/first-contact-jetpack7.sh:
# its checks, installs, the export and the build on the device, the server, a served plan, the bench).
# --dry-run prints every stage and its commands and exits 0, on any machine (it needs orin-llm's Python
# dependencies only to print the build commands: set PYTHON=/path/to/python if python3 lacks them).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
VENV="$REPO/.venv"
PROFILE="jetson/profiles/agx-orin-64gb.toml"
ENGINE=""
OUT=""
SWAP_GB=""
DRY_RUN=0
SKIP_INSTALL=0
JETPACK=6
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -n 's/^# \{0,1\}//p'; }

while [[ $# -gt 0 ]]; do
    case "$1" in
        --dry-run) DRY_RUN=1 ;;
        --profile) PROFILE="${2:?--profile needs a TOML file}"; shift ;;
        --engine) ENGINE="${2:?--engine needs a directory}"; shift ;;
        --out) OUT="${2:?--out needs a directory}"; shift ;;
        --swap) SWAP_GB="${2:?--swap needs a size in GiB}"; shift ;;
        --skip-install) SKIP_INSTALL=1 ;;
        --jetpack) JETPACK="${2:?--jetpack needs 6 or 7}"; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "first-contact.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
case "$JETPACK" in
    6) ;;
    7) [[ "$PROFILE" != "jetson/profiles/agx-orin-64gb.toml" ]] || PROFILE="jetson/profiles/agx-orin-64gb-edgellm.toml" ;;
    *) echo "first-contact.sh: --jetpack takes 6 or 7" >&2; exit 2 ;;
esac
[[ -f "$PROFILE" ]] || { echo "first-contact.sh: no profile $PROFILE" >&2; exit 2; }
if [[ -n "$SWAP_GB" && ! "$SWAP_GB" =~ ^[0-9]+$ ]]; then
    echo "first-contact.sh: --swap takes a whole number of GiB, e.g. --swap 16" >&2; exit 2
fi
NAME="$(sed -n 's/^name *= *"\([^"]*\)".*/\1/p' "$PROFILE" | head -n 1)"
ENGINE="${ENGINE:-engines/$NAME}"
OUT="${OUT:-first-contact-$(hostname)-$(date -u +%Y%m%dT%H%M%SZ)}"
PYTHON="${PYTHON:-}"
if [[ -z "$PYTHON" ]]; then
    if [[ -x "$VENV/bin/python" ]]; then PYTHON="$VENV/bin/python"; else PYTHON="python3"; fi
fi
ORIN_LLM=("$PYTHON" -m orin_llm.cli)
STAGE="start"

say() { printf '\n== %s\n' "$*"; }
note() { printf '   %s\n' "$*"; }
# show CMD...: print it as a user would type it (orin-llm, python), whichever Python runs it here
show() {
    local text="$*"
    text="${text//"$PYTHON -m orin_llm.cli"/orin-llm}"
    printf '+ %s\n' "${text//"$PYTHON "/python }"
}
# fail NEXT: stop here, saying what failed and the next thing to try (the EXIT trap packs the folder)
fail() {
    printf '\nFAILED at stage %s\n   next: %s\n' "$STAGE" "$1" >&2
    [[ $DRY_RUN -eq 1 ]] || printf '%s\n%s\n' "$STAGE" "$1" >"$OUT/FAILED"
    exit 1
}
# step LOG CMD...: show it; unless --dry-run run it with its output in $OUT/logs/LOG (and on screen)
step() {
    local log="$1"; shift
    show "$*"
    [[ $DRY_RUN -eq 1 ]] && return 0
    "$@" 2>&1 | tee -a "$OUT/logs/$log"
    return "${PIPESTATUS[0]}"
}

pack() {
    local code=$?
    [[ $DRY_RUN -eq 1 || ! -d "$OUT" ]] && return
    {
        echo "# first-contact $(date -u +%FT%TZ), exit $code, last stage: $STAGE"
        echo "## uname"; uname -a
        echo "## /etc/nv_tegra_release"; cat /etc/nv_tegra_release 2>/dev/null || echo "(none: not a Jetson)"
        echo "## nvpmodel -q"; nvpmodel -q 2>/dev/null || echo "(unavailable)"
        echo "## df -h"; df -h "$REPO" /opt 2>/dev/null || true
        echo "## /proc/swaps"; cat /proc/swaps 2>/dev/null || true
        echo "## pins (jetson/constraints-0.12-jetson.txt)"; "$PYTHON" -m orin_llm.doctor.pins 2>&1 || true
        echo "## pip freeze"; "$PYTHON" -m pip freeze 2>/dev/null || true
    } >"$OUT/versions.txt" 2>&1
    cp "$PROFILE" "$OUT/profile.toml" 2>/dev/null || true
    # the profile's engine's build logs, and the ladder's plain and reuse engines' (doctor/ladder.py)
    for built in "$ENGINE" "$ENGINE-plain" "$ENGINE-reuse"; do
        if [[ -d "$built/logs" ]]; then
            mkdir -p "$OUT/logs/build/$(basename "$built")" && cp "$built"/logs/*.log "$OUT/logs/build/$(basename "$built")/" 2>/dev/null || true
        fi
    done
    [[ -f "$ENGINE/manifest.json" ]] && cp "$ENGINE/manifest.json" "$OUT/manifest.json"
    tar czf "$OUT.tar.gz" "$OUT"
    echo "packed: $OUT.tar.gz (attach it to the bug report)"
}
trap pack EXIT

if [[ $DRY_RUN -eq 1 ]]; then
    echo "first-contact dry run: profile $PROFILE, engine $ENGINE, run folder $OUT (nothing is changed)"
else
    mkdir -p "$OUT/logs"
    echo "first-contact: profile $PROFILE, engine $ENGINE, everything into $OUT/ and $OUT.tar.gz"
fi

if [[ $JETPACK -eq 7 ]]; then
    # shellcheck source=jetson/first-contact-jetpack7.sh
    source "$REPO/jetson/first-contact-jetpack7.sh"
    exit 0
fi

# ---------------------------------------------------------------------------------------------
STAGE="1/6 checks"
say "$STAGE: JetPack, Python, disk, swap, power, checkpoints: before anything is installed"
# The Orin's own Python and the standard library only (doctor/first_checks.py): nothing is installed yet.
checks=("$PYTHON" -m orin_llm.doctor.first_checks --profile "$PROFILE" --engine "$ENGINE")
[[ -z "$SWAP_GB" ]] || checks+=(--swap "$SWAP_GB")
show "${checks[*]}"
if [[ $DRY_RUN -eq 1 ]]; then
    "${checks[@]}" --dry-run | sed 's/^/   /'
else
    code=0
    "${checks[@]}" >"$OUT/checks.txt" || code=$?
    sed 's/^/   /' "$OUT/checks.txt"
    (( code == 0 )) || fail "$(sed -n 's/^next: //p' "$OUT/checks.txt" | tail -n 1)"
fi

# ---------------------------------------------------------------------------------------------
STAGE="2/6 installs"
say "$STAGE: pinned (jetson/constraints-0.12-jetson.txt), then the doctor"
if [[ $SKIP_INSTALL -eq 1 ]]; then
    note "skipped (--skip-install)"
else
    setup=(jetson/setup.sh)
    [[ -n "$SWAP_GB" ]] && setup+=(--swap "$SWAP_GB")
    step setup.log "${setup[@]}" || fail "jetson/setup.sh failed: its last lines are above and in $OUT/logs/setup.log; fix that step and rerun (setup.sh skips what is done)"
    [[ $DRY_RUN -eq 1 ]] || PYTHON="$VENV/bin/python"; ORIN_LLM=("$PYTHON" -m orin_llm.cli)
fi
# the build's python3 and trtllm-build are the venv's, where setup.sh installed TensorRT-LLM
[[ $DRY_RUN -eq 1 ]] || export PATH="$VENV/bin:$PATH"
show "orin-llm doctor --json > $OUT/doctor.json"
if [[ $DRY_RUN -eq 0 ]]; then
    code=0
    "${ORIN_LLM[@]}" doctor --json >"$OUT/doctor.json" || code=$?
    "$PYTHON" - "$OUT/doctor.json" <<'PY' || fail "the doctor found errors (above, and in doctor.json): fix them first; each line says how"
import json, sys
report = json.load(open(sys.argv[1]))
for c in report["checks"]:
    print(f"   {c['status']:5} {c['section']}: {c['message']}")
sys.exit(2 if any(c["status"] == "ERROR" for c in report["checks"]) else 0)
PY
    "$PYTHON" - "$OUT/doctor.json" <<'PY' || fail "not MAXN with pinned clocks, so no number would be reproducible: sudo nvpmodel -m 0 (reboot if it asks), then sudo jetson_clocks, and rerun with --skip-install"
import json, sys
power = [c for c in json.load(open(sys.argv[1]))["checks"] if c["section"] == "power"]
maxn = any(c["status"] == "OK" and "MAXN" in c["message"] for c in power)
unpinned = any(c["status"] == "WARN" and "not pinned" in c["message"] for c in power)
sys.exit(0 if maxn and not unpinned else 1)
PY
fi

# ---------------------------------------------------------------------------------------------
STAGE="3/6 build"
say "$STAGE: the memory plan, then NVIDIA's documented path (README4Jetson) for $PROFILE"
show "orin-llm memory --profile $PROFILE --json > $OUT/memory-plan.json"
if [[ $DRY_RUN -eq 0 ]]; then
    "${ORIN_LLM[@]}" memory --profile "$PROFILE" --json >"$OUT/memory-plan.json" \
        || fail "the profile does not fit this device's memory (the plan above says by how much): edit $PROFILE"
fi
note "the commands orin-llm build runs (each step's log in $ENGINE/logs/):"
"$PYTHON" -m orin_llm.build.trtllm --profile "$PROFILE" --out "$ENGINE" | sed 's/^/   /' \
    || fail "cannot print the build commands: PYTHON=$PYTHON lacks orin-llm's dependencies (set PYTHON=...)"
[[ $DRY_RUN -eq 1 ]] || "$PYTHON" -m orin_llm.build.trtllm --profile "$PROFILE" --out "$ENGINE" >"$OUT/commands.txt"
if [[ $DRY_RUN -eq 0 && -f "$ENGINE/manifest.json" ]]; then
    note "$ENGINE is built already: using it (delete it to build again)"
else
    step build.log "${ORIN_LLM[@]}" build --profile "$PROFILE" --out "$ENGINE" \
        || fail "the build stopped: the failing step's log is in $ENGINE/logs/ (copied to $OUT/logs/build/$(basename "$ENGINE")/); docs/trtllm-0.12-jetson.md §7 lists what only the Orin settles"
fi
# the plan again with the engine files' real sizes (measured) in place of the estimates
show "orin-llm memory --profile $PROFILE --engine $ENGINE --json > $OUT/memory-plan-measured.json"
if [[ $DRY_RUN -eq 0 ]]; then
    "${ORIN_LLM[@]}" memory --profile "$PROFILE" --engine "$ENGINE" --json >"$OUT/memory-plan-measured.json" \
        || fail "the engines are bigger than the plan holds ($OUT/memory-plan-measured.json says by how much): lower the profile's limits or cached_prefix_tokens and rebuild"
fi

# ---------------------------------------------------------------------------------------------
STAGE="4/6 ladder"
say "$STAGE: one feature at a time, each rung a daemon on its engine: health, plan, stream, cancel"
# plain -> block reuse -> chunked context -> grammar post-processor -> lookup -> the 1B draft
# (orin_llm/backends/trtllm/features.py); it stops at the first rung that fails, whose logs go in the bundle
ladder=("$PYTHON" -m orin_llm.doctor.ladder --profile "$PROFILE" --engine "$ENGINE" --out "$OUT")
show "${ladder[*]}"
if [[ $DRY_RUN -eq 1 ]]; then
    "${ladder[@]}" --dry-run | sed 's/^/   /'
else
    code=0
    "${ladder[@]}" | tee "$OUT/logs/ladder.log" || code=$?
    (( code == 0 )) || fail "$(sed -n 's/^next: //p' "$OUT/logs/ladder.log" | tail -n 1) (the failing rung's logs: $OUT/ladder/)"
fi

# ---------------------------------------------------------------------------------------------
STAGE="5/6 bench"
say "$STAGE: orin-llm bench --quick"
step bench.log "${ORIN_LLM[@]}" bench --engine "$ENGINE" --out "$OUT/bench" --quick \
    || fail "the quick bench failed: $OUT/logs/bench.log; jetson/GUIDE.md (Benchmarks) runs each scenario alone"
# the grammar post-processor's per-token parts with the logits on the GPU: the mask's copy to the device is
# measured only here (docs/trtllm-0.12-jetson.md §13)
step bench.log "$PYTHON" bench/grammar_callback.py --engine "$ENGINE" --device cuda --out "$OUT/bench/grammar_callback.json" \
    || fail "the grammar post-processor's bench failed: $OUT/logs/bench.log"

# ---------------------------------------------------------------------------------------------
# Last, so a test that fails still leaves the bench's numbers. `-k real`: the real-bindings case of each test
# (tests/backends/trtllm/trtllm_both.py `eng` and `bindings`: every file with such a test is listed, a test checks it);
# the fake's cases run anywhere.
STAGE="6/6 tests"
say "$STAGE: the TensorRT-LLM backend's tests on the real bindings and $ENGINE"
TESTS=(tests/backends/trtllm/test_trtllm_contract.py tests/backends/trtllm/test_trtllm_engine.py tests/backends/trtllm/test_trtllm_grammar.py
       tests/backends/trtllm/test_trtllm_homes.py tests/planning/test_feasibility_trtllm.py tests/runtime/test_backend.py
       tests/backends/test_loader.py tests/server/test_worker.py tests/bench/test_bench_trtllm.py
       tests/build/test_shipped_profiles.py)
# tests/server/conftest.py imports httpx (pyproject's dev extra): nothing on the device path brings it
step tests.log env PIP_CONSTRAINT=jetson/constraints-0.12-jetson.txt "$PYTHON" -m pip install --quiet "pytest>=8" \
    "httpx>=0.27" || fail "pytest and httpx did not install: $OUT/logs/tests.log"
step tests.log env ORIN_LLM_TEST_TRTLLM_ENGINE="$ENGINE" "$PYTHON" -m pytest "${TESTS[@]}" -k real -rA \
    --junitxml "$OUT/tests.xml" \
    || fail "a TensorRT-LLM test failed on the real bindings ($OUT/logs/tests.log, $OUT/tests.xml): the fake is kinder than 0.12 there; attach the tarball to an issue"

STAGE="done"
say "done"
if [[ $DRY_RUN -eq 1 ]]; then
    note "on the Orin, run it without --dry-run; it packs $OUT.tar.gz"
fi
