# jetson/first-contact-jetpack7.sh — first contact's stages on a JetPack 7 (L4T R38) Orin, TensorRT Edge-LLM 0.11:
# sourced by jetson/first-contact.sh --jetpack 7 (its options, helpers and the tarball's trap are that script's).
#   1. checks   L4T R38 (JetPack 7), power mode, disk swap, free disk
#   2. installs Edge-LLM 0.11 for JetPack 7 (NVIDIA's guide, not scripted here), orin-llm, the doctor (JSON)
#   3. build    the memory plan; orin-llm build (the export, here or on an x86 host with make edgellm); then the
#               manifest's device steps: llm_build (the C++ runtime's engine) and the server, which builds its
#               own engines from the checkpoint on its first start
#   4. smoke    orin-llm serve on the engine, its backend the server on loopback; health, plan, stream, cancel
#   5. bench    orin-llm bench --quick
#   6. tests    the Edge-LLM backend's tests: the fake's cases, then the cases that hold on both, on this server
# Nothing of it has run on an Orin.

SERVER_PID=""
SERVE_PID=""
SOCKET="/tmp/orin-first-contact-$$.sock"  # a socket path must stay under 108 bytes
[[ $DRY_RUN -eq 0 ]] || SOCKET="/tmp/orin-first-contact-<pid>.sock"
# What the Edge-LLM path needs free: the two checkpoints, the export and the engines the server and llm_build
# make from them. An estimate: the tarball records `df` so the first run can correct it.
MIN_DISK_GIB=60
MIN_SWAP_GIB=8  # disk swap for the export and the engine builds, as jetson/setup.sh advises for 0.12
EDGE_PORT=8000
EDGE_URL="http://127.0.0.1:$EDGE_PORT"

stop_server() {
    if [[ -n "$SERVE_PID" ]] && kill -0 "$SERVE_PID" 2>/dev/null; then
        kill -TERM "$SERVE_PID" 2>/dev/null || true
        wait "$SERVE_PID" 2>/dev/null || true
    fi
    rm -f "$SOCKET"
    if [[ -n "$SERVER_PID" ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill -TERM "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
}
trap 'stop_server; pack' EXIT

# the manifest's record of a device step (build/edgellm.py): its command line
manifest_argv() {
    "$PYTHON" - "$ENGINE/manifest.json" "$1" <<'PY'
import json, shlex, sys
m = json.load(open(sys.argv[1]))["edgellm"]
if sys.argv[2] == "serve":
    print(shlex.join(m["server_argv"]))
else:
    print(next(shlex.join(s["argv"]) for s in m["device_steps"] if s["name"] == sys.argv[2]))
PY
}

# ---------------------------------------------------------------------------------------------
STAGE="1/6 checks"
say "$STAGE: JetPack 7, power mode, swap, disk"
if [[ $DRY_RUN -eq 1 ]]; then
    note "check: /etc/nv_tegra_release says L4T R38 (JetPack 7: TensorRT Edge-LLM 0.11; Orin official on JetPack 7.2)"
    note "check: nvpmodel -q (MAXN wanted) and jetson_clocks --show (pinned)"
    note "check: disk swap >= $MIN_SWAP_GIB GiB in /proc/swaps, or --swap GB"
    note "check: >= $MIN_DISK_GIB GiB free on the repository's disk"
else
    release="$(head -n 1 /etc/nv_tegra_release 2>/dev/null || true)"
    [[ -n "$release" ]] || fail "this is not a Jetson (no /etc/nv_tegra_release): run first-contact on the Orin, or --dry-run here"
    note "$release"
    [[ "$release" == *"R38 (release)"* ]] || fail "not JetPack 7 (L4T R38): on JetPack 6 run jetson/first-contact.sh without --jetpack 7"
    note "power mode: $(nvpmodel -q 2>/dev/null | sed -n 's/^NV Power Mode: *//p' | head -n 1)"
    disk_swap_kib="$(awk 'NR > 1 && $1 !~ /zram/ {s += $3} END {print s + 0}' /proc/swaps)"
    note "disk swap: $((disk_swap_kib / 1048576)) GiB"
    free_gib="$(( $(df -Pk "$REPO" | awk 'NR == 2 {print $4}') / 1048576 ))"
    note "free on $REPO: $free_gib GiB"
    (( free_gib >= MIN_DISK_GIB )) || fail "only $free_gib GiB free on $REPO; free at least $MIN_DISK_GIB GiB"
fi

# ---------------------------------------------------------------------------------------------
STAGE="2/6 installs"
say "$STAGE: TensorRT Edge-LLM 0.11 for JetPack 7, orin-llm, then the doctor"
if [[ $SKIP_INSTALL -eq 1 ]]; then
    note "skipped (--skip-install)"
else
    note "Edge-LLM on the Orin: its 0.11 Installation guide for JetPack 7 (C++ runtime with llm_build, the Python"
    note "package with its server extra); not scripted here: its JetPack 7 build flags are the guide's to give"
    step install.log "$PYTHON" -m pip install -e ".[device,policy]" \
        || fail "orin-llm did not install: $OUT/logs/install.log"
fi
show "orin-llm doctor --json > $OUT/doctor.json"
if [[ $DRY_RUN -eq 0 ]]; then
    "${ORIN_LLM[@]}" doctor --json >"$OUT/doctor.json" || true
    "$PYTHON" - "$OUT/doctor.json" <<'PY' || fail "the doctor found errors (above, and in doctor.json): fix them first; each line says how"
import json, sys
report = json.load(open(sys.argv[1]))
for c in report["checks"]:
    print(f"   {c['status']:5} {c['section']}: {c['message']}")
sys.exit(2 if any(c["status"] == "ERROR" for c in report["checks"]) or report.get("jetpack") != 7 else 0)
PY
fi

# ---------------------------------------------------------------------------------------------
STAGE="3/6 build"
say "$STAGE: the memory plan, the export, then Edge-LLM's engine build on this Orin for $PROFILE"
show "orin-llm memory --profile $PROFILE --json > $OUT/memory-plan.json"
if [[ $DRY_RUN -eq 0 ]]; then
    "${ORIN_LLM[@]}" memory --profile "$PROFILE" --json >"$OUT/memory-plan.json" \
        || fail "the profile does not fit this device's memory (the plan above says by how much): edit $PROFILE"
fi
note "every command of the build with where it runs and its source (orin-llm build --dry-run):"
"${ORIN_LLM[@]}" build --profile "$PROFILE" --out "$ENGINE" --dry-run | sed -n '/^# TensorRT Edge-LLM/,$p' | sed 's/^/   /' \
    || fail "cannot print the build commands: PYTHON=$PYTHON lacks orin-llm's dependencies (set PYTHON=...)"
if [[ $DRY_RUN -eq 0 && -f "$ENGINE/manifest.json" ]]; then
    note "$ENGINE is exported already: using it (delete it to export again)"
else
    note "the export runs where tensorrt-edgellm-export is (ORIN_LLM_EDGELLM_BIN, or make edgellm on an x86 host,"
    note "then copy $ENGINE here); an INT4 AWQ profile quantizes on a GPU host first (the dry run's step 1)"
    step build.log "${ORIN_LLM[@]}" build --profile "$PROFILE" --out "$ENGINE" \
        || fail "the export stopped: $ENGINE/logs/export.log (or the message above)"
fi
if [[ $DRY_RUN -eq 1 ]]; then
    show "<the manifest's llm_build command: edgellm.device_steps, printed above as step llm_build>"
    show "<the manifest's server command, edgellm.server_argv, started in the background> > $OUT/logs/server.log &"
else
    read -r -a llm_build <<<"$(manifest_argv llm_build)"
    step build.log "${llm_build[@]}" || fail "llm_build failed: $OUT/logs/build.log"
    read -r -a serve <<<"$(manifest_argv serve)"
    show "${serve[*]} > $OUT/logs/server.log &"
    "${serve[@]}" >"$OUT/logs/server.log" 2>&1 &
    SERVER_PID=$!
fi
show "curl -sf $EDGE_URL/health/ready   # until ready: its first start builds the engines from the checkpoint"
if [[ $DRY_RUN -eq 0 ]]; then
    for _ in $(seq 1 720); do
        curl -sf "$EDGE_URL/health/ready" >/dev/null && break
        kill -0 "$SERVER_PID" 2>/dev/null || fail "the Edge-LLM server stopped: $OUT/logs/server.log"
        sleep 5
    done
    curl -sf "$EDGE_URL/health" >"$OUT/server-health.json" || fail "the Edge-LLM server is not ready after an hour: $OUT/logs/server.log"
fi

# ---------------------------------------------------------------------------------------------
STAGE="4/6 smoke"
say "$STAGE: the daemon on $ENGINE (backend edgellm, the server on loopback): health, plan, stream, cancel"
show "ORIN_LLM_EDGELLM_URL=$EDGE_URL orin-llm serve --engine $ENGINE --socket $SOCKET > $OUT/logs/serve.log &"
show "python -m orin_llm.doctor.smoke --socket $SOCKET --out $OUT/smoke.json"
if [[ $DRY_RUN -eq 0 ]]; then
    ORIN_LLM_EDGELLM_URL="$EDGE_URL" "${ORIN_LLM[@]}" serve --engine "$ENGINE" --socket "$SOCKET" >"$OUT/logs/serve.log" 2>&1 &
    SERVE_PID=$!
    "$PYTHON" -m orin_llm.doctor.smoke --socket "$SOCKET" --out "$OUT/smoke.json" \
        || fail "the smoke test failed (above; the daemon's log is $OUT/logs/serve.log, the server's $OUT/logs/server.log)"
    kill -TERM "$SERVE_PID" && wait "$SERVE_PID" || true
    SERVE_PID=""
fi

# ---------------------------------------------------------------------------------------------
STAGE="5/6 bench"
say "$STAGE: orin-llm bench --quick"
step bench.log env ORIN_LLM_EDGELLM_URL="$EDGE_URL" "${ORIN_LLM[@]}" bench --engine "$ENGINE" --out "$OUT/bench" --quick \
    || fail "the quick bench failed: $OUT/logs/bench.log"

# ---------------------------------------------------------------------------------------------
STAGE="6/6 tests"
say "$STAGE: the Edge-LLM backend's tests"
note "the fake server's cases (any machine), then test_edgellm_both.py's real cases against this server"
step tests.log env ORIN_LLM_TEST_EDGELLM_ENGINE="$ENGINE" ORIN_LLM_EDGELLM_URL="$EDGE_URL" \
    "$PYTHON" -m pytest tests/backends/edgellm -rA --junitxml "$OUT/tests.xml" \
    || fail "an Edge-LLM backend test failed: $OUT/logs/tests.log (a [real] case that fails where [fake] passes: the fake is kinder than the server; attach the tarball to an issue)"
if [[ $DRY_RUN -eq 0 ]] && ! grep -q 'PASSED tests/backends/edgellm/test_edgellm_both.py::.*\[real\]' "$OUT/logs/tests.log"; then
    fail "the real server's cases did not run (skipped: $OUT/logs/tests.log says why)"
fi

STAGE="done"
say "done"
if [[ $DRY_RUN -eq 1 ]]; then
    note "on a JetPack 7 Orin, run it without --dry-run; it packs $OUT.tar.gz"
fi
