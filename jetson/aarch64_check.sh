#!/usr/bin/env bash
# aarch64 seen, not claimed (issue #45 item 8): an arm64 Debian userland under qemu-user-static, in which
# the package is installed with an aarch64 torch from PyPI, its C++ ops are built (the ARM kernels), and a
# daemon serves a plan from an engine built on the host. Each step is timed into a JSON file; a step
# that fails ends the run and says which. Emulated, so every time here is many times the Orin's: it shows
# that the aarch64 path installs, builds and answers, not how fast.
#
#   sudo bash jetson/aarch64_check.sh [ROOT] [OUT_JSON]     (make aarch64: ROOT build/arm64-root)
#
# Needs root (debootstrap, chroot, binfmt_misc), debootstrap and qemu-user-static (apt-get install
# debootstrap qemu-user-static), Debian's mirror and PyPI, and an engine directory (ENGINE, default
# engines/smollm2-135m-demo: `make demo` builds it). torch 2.5.1: PyPI's aarch64 wheels of later
# releases pull CUDA's libraries (gigabytes); 2.5.1 is CPU-only there, and JetPack 6.1's own is a 2.5.
# It has no CPU int4 kernel (aten._weight_int4pack_mm_for_cpu, torch 2.6), which a q4_1 target's
# layers run on a CPU: the daemon refuses such an engine on it and says so, so the plan is served
# from the engine's float32 export (--weights fp32); our C++ ops (the INT8 KV cache's attention,
# the q8 layers) run either way. The plan is one short request (goal none, 16 tokens): emulated, the
# home's pin alone takes about a quarter of an hour.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=${1:-build/arm64-root}
OUT=${2:-build/aarch64.json}
ENGINE=${ENGINE:-engines/smollm2-135m-demo}
TORCH=${AARCH64_TORCH:-torch==2.5.1}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
TASK="Switch off the floor lamp."
mkdir -p "$(dirname "$OUT")"
STEPS=$(mktemp)
trap 'rm -f "$STEPS"' EXIT

step() {  # step NAME COMMAND...: run it, time it, record it; a failure ends the run with the record written
    local name=$1 t0 rc=0
    shift
    echo "aarch64: $name ..." >&2
    t0=$(date +%s.%N)
    "$@" >"$STEPS.log" 2>&1 || rc=$?
    python3 - "$STEPS" "$name" "$t0" "$rc" "$STEPS.log" <<'EOF'
import json, sys, time
steps, name, t0, rc, log = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
tail = open(log, errors="replace").read()[-1500:]
with open(steps, "a") as f:
    f.write(json.dumps({"step": name, "seconds": round(time.time() - t0, 1), "ok": rc == 0,
                        "tail": tail}) + "\n")
print(f"aarch64: {name}: {'ok' if rc == 0 else 'FAILED'} in {time.time() - t0:.0f} s", file=sys.stderr)
EOF
    if [ "$rc" != 0 ]; then
        finish
        echo "aarch64: $name failed (exit $rc); its output is in $OUT" >&2
        exit 1
    fi
}

finish() {
    python3 - "$STEPS" "$OUT" "$TORCH" <<'EOF'
import json, platform, sys
steps = [json.loads(line) for line in open(sys.argv[1])]
out = {"host": platform.machine(), "emulated": "aarch64 under qemu-user-static", "torch": sys.argv[3],
       "ok": bool(steps) and all(s["ok"] for s in steps), "total_s": round(sum(s["seconds"] for s in steps), 1),
       "steps": steps}
json.dump(out, open(sys.argv[2], "w"), indent=1)
EOF
}

in_root() {  # a command in the arm64 userland, its own environment (not the host's venv or pip settings)
    chroot "$ROOT" /usr/bin/env -i PATH=/opt/venv/bin:/usr/bin:/bin HOME=/root DEBIAN_FRONTEND=noninteractive \
        /bin/bash -c "$1"
}

binfmt() {  # arm64 binaries run through qemu: the kernel's binfmt_misc, registered with the F flag
    [ -e /proc/sys/fs/binfmt_misc/register ] || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
    [ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ] || printf '%s' ':qemu-aarch64:M::\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00:\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff:'"$(command -v qemu-aarch64-static)"':F' \
        > /proc/sys/fs/binfmt_misc/register
}

userland() {
    debootstrap --arch=arm64 --variant=minbase --foreign \
        --include=python3,python3-venv,python3-dev,g++,ca-certificates bookworm "$ROOT" "$MIRROR"
    binfmt
    chroot "$ROOT" /debootstrap/debootstrap --second-stage
    cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
    [ "$(chroot "$ROOT" /usr/bin/uname -m)" = aarch64 ]
}

[ "$(id -u)" = 0 ] || { echo "aarch64: needs root (debootstrap, chroot, binfmt_misc)" >&2; exit 2; }
for tool in debootstrap qemu-aarch64-static; do
    command -v "$tool" >/dev/null || { echo "aarch64: no $tool (apt-get install debootstrap qemu-user-static)" >&2; exit 2; }
done
[ -f "$ENGINE/manifest.json" ] || { echo "aarch64: no engine at $ENGINE (make demo builds it)" >&2; exit 2; }

if [ -x "$ROOT/usr/bin/python3" ]; then
    step "binfmt (the userland exists: $ROOT)" binfmt
else
    step "debootstrap arm64 (bookworm: python3, g++)" userland
fi
rm -rf "$ROOT/src" "$ROOT/eng" && mkdir -p "$ROOT/src"
git archive HEAD | tar -x -C "$ROOT/src"
cp -rL "$ENGINE" "$ROOT/eng"
step "venv and $TORCH (aarch64, PyPI)" in_root "python3 -m venv /opt/venv && pip install -q --disable-pip-version-check '$TORCH'"
step "pip install the package" in_root "pip install -q --disable-pip-version-check /src && orin-llm --help >/dev/null"
step "build our C++ ops (the ARM kernels)" in_root "cd /tmp && python -m orin_llm.kernels.native build"
step "serve a plan (daemon on a socket)" in_root "
    orin-llm serve --engine /eng --weights fp32 --socket /tmp/p.sock --state-dir none > /tmp/serve.log 2>&1 &
    D=\$!
    trap 'kill \$D 2>/dev/null; wait \$D 2>/dev/null || true' EXIT
    orin-llm health --socket /tmp/p.sock --wait 1800 | head -c 600; echo
    orin-llm plan --socket /tmp/p.sock --json --timeout-s 3600 --goal none --max-tokens 16 '$TASK'"
finish
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(json.dumps({k: d[k] for k in ('ok', 'total_s')}))" "$OUT"
