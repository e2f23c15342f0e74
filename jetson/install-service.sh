#!/usr/bin/env bash
# jetson/install-service.sh — install the planning daemon as the systemd service orin-llm.
#
# The steps of jetson/systemd/README.md, idempotent (re-run it after editing the unit):
#   1. the system group and user orin-llm (no login, no home; in video and render for the GPU)
#   2. the checkout readable by that group (group orin-llm, g+rX, nothing for others; the owner
#      is left alone so you can still rebuild), homes/home.yaml from the example home if missing
#   3. jetson/systemd/orin-llm.service → /etc/systemd/system/ (its /opt/orin-llm paths rewritten
#      when the checkout lives elsewhere), daemon-reload, enable (and start with --now)
#   4. users that may call the planner (orin-llm plan, the ROS 2 node) join the group orin-llm
#
# Usage: sudo jetson/install-service.sh [--dry-run] [--now] [--add-user USER]... [--prefix DIR]
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PREFIX="$REPO"
UNIT_SRC="$REPO/jetson/systemd/orin-llm.service"
UNIT_DST="/etc/systemd/system/orin-llm.service"
UNIT_PREFIX="/opt/orin-llm"  # the paths the unit is written for
GROUP="orin-llm"
USER_NAME="orin-llm"

DRY_RUN=0
START=0
ADD_USERS=()

usage() {
    cat <<EOF
Install the orin-llm planning daemon as a systemd service (unit: jetson/systemd/orin-llm.service).

  --dry-run        print what would run; change nothing
  --now            also start it now (systemctl enable --now; returns once the planner is READY)
  --add-user USER  let USER call the planner (adds USER to group $GROUP); repeatable
  --prefix DIR     the checkout the service runs from (default: $PREFIX)
  -h, --help       this text
EOF
}

while [[ $# -gt 0 ]]; do
    case "$1" in
        --dry-run) DRY_RUN=1 ;;
        --now) START=1 ;;
        --add-user) ADD_USERS+=("${2:?--add-user needs a user name}"); shift ;;
        --prefix) PREFIX="$(cd "${2:?--prefix needs a directory}" && pwd)"; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "install-service.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done

say() { printf '\n== %s\n' "$*"; }
note() { printf '   %s\n' "$*"; }
warn() { printf 'warning: %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }
run() {
    printf '+ %s\n' "$*"
    if [[ $DRY_RUN -eq 0 ]]; then "$@"; fi
}

[[ -f "$UNIT_SRC" ]] || die "$UNIT_SRC not found"
command -v systemctl >/dev/null || die "systemctl not found: this needs systemd"
if [[ $EUID -ne 0 && $DRY_RUN -eq 0 ]]; then die "run it as root: sudo $0 $*"; fi
for u in "${ADD_USERS[@]}"; do
    id "$u" >/dev/null 2>&1 || die "no such user: $u"
done

# ---------------------------------------------------------------------------------------------
say "1/4 group and user $USER_NAME"
if getent group "$GROUP" >/dev/null; then
    note "group $GROUP exists"
else
    run groupadd --system "$GROUP"
fi
gpu_groups=()
for g in video render; do
    if getent group "$g" >/dev/null; then gpu_groups+=("$g"); else warn "group $g does not exist"; fi
done
if id "$USER_NAME" >/dev/null 2>&1; then
    note "user $USER_NAME exists"
    for g in "${gpu_groups[@]}"; do
        if id -nG "$USER_NAME" | tr ' ' '\n' | grep -qx "$g"; then continue; fi
        run usermod -aG "$g" "$USER_NAME"
    done
else
    extra=()
    if [[ ${#gpu_groups[@]} -gt 0 ]]; then extra=(--groups "$(IFS=,; echo "${gpu_groups[*]}")"); fi
    run useradd --system --gid "$GROUP" "${extra[@]}" --no-create-home --shell /usr/sbin/nologin "$USER_NAME"
fi

# ---------------------------------------------------------------------------------------------
say "2/4 $PREFIX readable by group $GROUP"
# What the unit's ExecStart needs, relative to the checkout.
for need in .venv/bin/orin-llm engines/agx-orin-64gb/manifest.json; do
    [[ -e "$PREFIX/$need" ]] || warn "$PREFIX/$need is missing: run jetson/setup.sh and build the engine first (jetson/GUIDE.md)"
done
if [[ -f "$PREFIX/homes/home.yaml" ]]; then
    note "$PREFIX/homes/home.yaml exists"
else
    run mkdir -p "$PREFIX/homes"
    run cp "$PREFIX/orin_llm/data/homes/example_home.yaml" "$PREFIX/homes/home.yaml"
    note "homes/home.yaml is the example home: describe your home there (or PUT /v1/environment)"
fi
run chgrp -R "$GROUP" "$PREFIX"
run chmod -R g+rX,o-rwx "$PREFIX"

# ---------------------------------------------------------------------------------------------
say "3/4 the unit"
unit_text="$(sed "s|$UNIT_PREFIX|$PREFIX|g" "$UNIT_SRC")"
if [[ "$PREFIX" != "$UNIT_PREFIX" ]]; then note "rewriting $UNIT_PREFIX to $PREFIX in the unit"; fi
if [[ -f "$UNIT_DST" ]] && [[ "$(cat "$UNIT_DST")" == "$unit_text" ]]; then
    note "$UNIT_DST is up to date"
else
    printf '+ install -m 0644 <unit> %s\n' "$UNIT_DST"
    if [[ $DRY_RUN -eq 0 ]]; then
        printf '%s\n' "$unit_text" >"$UNIT_DST.tmp"
        chmod 0644 "$UNIT_DST.tmp"
        mv "$UNIT_DST.tmp" "$UNIT_DST"
    fi
    run systemctl daemon-reload
fi
if [[ $START -eq 1 ]]; then
    run systemctl enable --now orin-llm
else
    run systemctl enable orin-llm
    note "enabled (starts at boot); start it now with: sudo systemctl start orin-llm"
fi

# ---------------------------------------------------------------------------------------------
say "4/4 callers"
if [[ ${#ADD_USERS[@]} -eq 0 ]]; then
    note "no --add-user given: add the robot's user with sudo usermod -aG $GROUP USER (effective at next login)"
fi
for u in "${ADD_USERS[@]}"; do
    if id -nG "$u" | tr ' ' '\n' | grep -qx "$GROUP"; then
        note "$u is in $GROUP already"
    else
        run usermod -aG "$GROUP" "$u"
        note "$u can use the socket from its next login (or: newgrp $GROUP)"
    fi
done

cat <<EOF

Check: systemctl status orin-llm; journalctl -u orin-llm -f
       orin-llm plan --socket /run/orin-llm/planner.sock "Bring the mug to the sofa."
EOF
