#!/usr/bin/env bash
# jetson/setup.sh — prepare a Jetson AGX Orin on JetPack 6.1 (L4T R36.4) for orin-llm.
#
# What it does, in order (every step is skipped when already done, so it is safe to re-run):
#   1. checks the L4T release (JetPack 6.1 = R36.4.0; TensorRT-LLM v0.12.0-jetson is made for it)
#   2. apt packages: README4Jetson's prerequisites (python3-pip libopenblas-dev git-lfs ccache)
#      plus what the build and our venv need (git cmake build-essential python3-dev python3-venv),
#      and nvidia-jetpack (CUDA, cuDNN, TensorRT) when it is missing
#   3. cuSPARSELt (README4Jetson §1.2: PyTorch's install_cusparselt.sh with CUDA_VERSION=12.6)
#   4. a virtual environment with the system site-packages (JetPack's TensorRT Python bindings),
#      the one jetson/systemd/orin-llm.service runs: <repo>/.venv; numpy==1.26.1 (README4Jetson).
#      Every pip call from here on (TensorRT-LLM's build_wheel.py's own included) runs with
#      PIP_CONSTRAINT=jetson/constraints-0.12-jetson.txt: numpy 1.26.1, JetPack 6.1's torch,
#      transformers 4.43.4, tensorrt_llm 0.12.0, ... (the file says where each pin comes from)
#   5. TensorRT-LLM v0.12.0-jetson built from source exactly as README4Jetson §1.3 says:
#        git clone -b v0.12.0-jetson https://github.com/NVIDIA/TensorRT-LLM.git; git lfs pull
#      (shallow here: --depth 1 --recurse-submodules --shallow-submodules)
#        python3 scripts/build_wheel.py --clean --cuda_architectures 87 -DENABLE_MULTI_DEVICE=0 \
#            --build_type Release --benchmarks --use_ccache
#        pip install build/tensorrt_llm-*.whl
#      into /opt/TensorRT-LLM (the examples the trtllm build runs live there). The build takes
#      hours and a lot of memory: have a swap file (--swap) and, if it still runs out, --jobs 4.
#      Third-party prebuilt wheels / containers for 0.12-jetson exist but are UNVERIFIED: not used.
#   6. orin-llm itself: pip install -e '<repo>[device,policy]' under the same constraints, so pip can
#      never swap JetPack's CUDA torch for a CPU-only wheel nor take a newer transformers, its C++ ops
#      built for this CPU (python -m orin_llm.kernels.native build), and a check that what is
#      installed is what the constraints pin
#   7. memory: a disk swap file with --swap GB (zram, JetPack's default swap, is compressed RAM and
#      does not help a build), and advice about zram
#   8. power: sudo nvpmodel -m 0 (MAXN) and sudo jetson_clocks (clocks are unpinned again at boot)
#   9. orin-llm doctor, to show what is still wrong
#
# Usage: jetson/setup.sh [--dry-run] [--swap GB] [--jobs N] [--skip-trtllm] [--no-power] [--force]
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$REPO/.venv"
TRTLLM_DIR="/opt/TensorRT-LLM"
TRTLLM_REF="v0.12.0-jetson"
TRTLLM_URL="https://github.com/NVIDIA/TensorRT-LLM.git"
TRTLLM_VERSION="0.12.0"
# README4Jetson §1.2 pins this exact script by PyTorch commit.
CUSPARSELT_URL="https://raw.githubusercontent.com/pytorch/pytorch/9b424aac1d70f360479dd919d6b7933b5a9181ac/.ci/docker/common/install_cusparselt.sh"
SWAPFILE="/swapfile"
MIN_SWAP_GB=8
CONSTRAINTS="$REPO/jetson/constraints-0.12-jetson.txt"
# JetPack 6.1's CUDA torch, the wheel v0.12.0-jetson's requirements-jetson.txt names (L19); its version is
# the one the constraints file pins. PyPI's aarch64 torch is CPU-only.
JETPACK_TORCH_URL="https://developer.download.nvidia.cn/compute/redist/jp/v61/pytorch/torch-2.5.0a0+872d972e41.nv24.08.17622132-cp310-cp310-linux_aarch64.whl"
JETPACK_TORCH_VERSION="2.5.0a0+872d972e41.nv24.08.17622132"

DRY_RUN=0
SWAP_GB=""
JOBS=""
SKIP_TRTLLM=0
POWER=1
FORCE=0

usage() {
    cat <<EOF
Prepare a Jetson AGX Orin (JetPack 6.1) for orin-llm: apt packages, TensorRT-LLM v0.12.0-jetson
built from source, orin-llm in $VENV, swap, MAXN power mode.

  --dry-run        print what would run; change nothing
  --swap GB        create (or grow) the swap file $SWAPFILE to GB GiB and enable it at boot
  --jobs N         parallel compile jobs for TensorRT-LLM (default: all cores; lower it on OOM)
  --venv DIR       the virtual environment (default: $VENV, what the systemd unit uses)
  --trtllm-dir DIR where TensorRT-LLM is cloned and built (default: $TRTLLM_DIR)
  --skip-trtllm    do not build or install TensorRT-LLM
  --no-power       leave the power mode and clocks alone
  --force          go on although this is not L4T R36.4 (JetPack 6.1)
  -h, --help       this text
EOF
}

while [[ $# -gt 0 ]]; do
    case "$1" in
        --dry-run) DRY_RUN=1 ;;
        --swap) SWAP_GB="${2:?--swap needs a size in GiB}"; shift ;;
        --jobs) JOBS="${2:?--jobs needs a number}"; shift ;;
        --venv) VENV="${2:?--venv needs a directory}"; shift ;;
        --trtllm-dir) TRTLLM_DIR="${2:?--trtllm-dir needs a directory}"; shift ;;
        --skip-trtllm) SKIP_TRTLLM=1 ;;
        --no-power) POWER=0 ;;
        --force) FORCE=1 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "setup.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
if [[ -n "$SWAP_GB" && ! "$SWAP_GB" =~ ^[0-9]+$ ]]; then
    echo "setup.sh: --swap takes a whole number of GiB, e.g. --swap 16" >&2; exit 2
fi
if [[ -n "$JOBS" && ! "$JOBS" =~ ^[1-9][0-9]*$ ]]; then
    echo "setup.sh: --jobs takes a positive number" >&2; exit 2
fi

SUDO=()
if [[ $EUID -ne 0 ]]; then SUDO=(sudo); fi

say() { printf '\n== %s\n' "$*"; }
note() { printf '   %s\n' "$*"; }
warn() { printf 'warning: %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# run CMD...: show it, and run it unless --dry-run.
run() {
    printf '+ %s\n' "$*"
    if [[ $DRY_RUN -eq 0 ]]; then "$@"; fi
}
# run_sh 'shell text': the same for a command that needs a shell (pipes, redirections, cd).
run_sh() {
    printf '+ %s\n' "$1"
    if [[ $DRY_RUN -eq 0 ]]; then bash -c "$1"; fi
}

have_pkg() { dpkg-query -W --showformat='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

venv_version() {  # the version of a distribution installed in the venv, or nothing
    [[ -x "$VENV/bin/python" ]] || return 0
    "$VENV/bin/python" - "$1" <<'PY' 2>/dev/null || true
import importlib.metadata as md, sys
try:
    print(md.version(sys.argv[1]))
except md.PackageNotFoundError:
    pass
PY
}

# ---------------------------------------------------------------------------------------------
say "1/9 JetPack / L4T"
if [[ -r /etc/nv_tegra_release ]]; then
    release="$(head -n 1 /etc/nv_tegra_release)"
    major="$(sed -n 's/^# R\([0-9]*\) (release).*/\1/p' <<<"$release")"
    revision="$(sed -n 's/.*REVISION: \([0-9.]*\),.*/\1/p' <<<"$release")"
    note "L4T R${major:-?}.${revision:-?} ($release)"
    if [[ "$major" == "36" && "$revision" == "4.0" ]]; then
        note "JetPack 6.1: the release TensorRT-LLM v0.12.0-jetson is made for"
    elif [[ "$major" == "36" && "$revision" == 4.* ]]; then
        warn "L4T R36.$revision is newer than JetPack 6.1 (R36.4.0); same CUDA 12.6 / TensorRT 10.3 line, unverified"
    elif [[ -n "$major" && "$major" -ge 38 && $FORCE -eq 0 ]]; then
        die "L4T R$major.$revision is JetPack 7 (CUDA 13): TensorRT-LLM v0.12.0-jetson does not run on it; run jetson/first-contact.sh --jetpack 7 (TensorRT Edge-LLM), serve the torch engine (jetson/profiles/agx-orin-64gb-torch.toml), or reflash JetPack 6.1/6.2.x (L4T R36.4.x)"
    elif [[ $FORCE -eq 1 ]]; then
        warn "L4T R$major.$revision is not JetPack 6.1; going on because of --force"
    else
        die "L4T R$major.$revision is not JetPack 6.1 (R36.4): TensorRT-LLM v0.12.0-jetson needs it; flash JetPack 6.1 with SDK Manager (or --force)"
    fi
elif [[ $DRY_RUN -eq 1 || $FORCE -eq 1 ]]; then
    warn "not a Jetson (/etc/nv_tegra_release not found): showing the steps anyway"
else
    die "not a Jetson (/etc/nv_tegra_release not found): run this on the Orin (or --dry-run to see the steps)"
fi
python_version="$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
if [[ "$python_version" != "3.10" ]]; then
    warn "python3 is $python_version; JetPack 6.1 (Ubuntu 22.04) has 3.10, which TensorRT-LLM 0.12.0-jetson is built for"
fi

# ---------------------------------------------------------------------------------------------
say "2/9 apt packages"
packages=(python3-pip python3-venv python3-dev libopenblas-dev git git-lfs ccache cmake build-essential wget)
if ! have_pkg nvidia-jetpack; then
    note "nvidia-jetpack (CUDA, cuDNN, TensorRT) is not installed: adding it"
    packages+=(nvidia-jetpack)
fi
missing=()
for p in "${packages[@]}"; do have_pkg "$p" || missing+=("$p"); done
if [[ ${#missing[@]} -eq 0 ]]; then
    note "all there: ${packages[*]}"
else
    run "${SUDO[@]}" apt-get update
    run "${SUDO[@]}" apt-get install -y "${missing[@]}"
fi

# ---------------------------------------------------------------------------------------------
say "3/9 cuSPARSELt"
if compgen -G "/usr/local/cuda/lib64/libcusparseLt.so*" >/dev/null; then
    note "already installed in /usr/local/cuda/lib64"
else
    tmp="${TMPDIR:-/tmp}/orin-llm-cusparselt"
    run mkdir -p "$tmp"
    run wget -q -O "$tmp/install_cusparselt.sh" "$CUSPARSELT_URL"
    run "${SUDO[@]}" env CUDA_VERSION=12.6 bash "$tmp/install_cusparselt.sh"
    run rm -rf "$tmp"
fi

# ---------------------------------------------------------------------------------------------
say "4/9 virtual environment $VENV"
if [[ -x "$VENV/bin/python" ]]; then
    note "already there"
else
    run python3 -m venv --system-site-packages "$VENV"
fi
# Every pip call below (and build_wheel.py's `pip install -r requirements-dev-jetson.txt`) sees the pins.
[[ -r "$CONSTRAINTS" ]] || die "$CONSTRAINTS is missing: run setup.sh from a full checkout of orin-llm"
export PIP_CONSTRAINT="$CONSTRAINTS"
note "PIP_CONSTRAINT=$CONSTRAINTS"
if [[ "$(venv_version numpy)" == "1.26.1" ]]; then
    note "numpy 1.26.1 already installed"
else
    run "$VENV/bin/python" -m pip install --upgrade pip
    run "$VENV/bin/python" -m pip install numpy  # the version: the constraints file (README4Jetson's 1.26.1)
fi
if [[ "$(venv_version torch)" == "$JETPACK_TORCH_VERSION" ]]; then
    note "torch $JETPACK_TORCH_VERSION (JetPack 6.1's CUDA build) already installed"
else
    run "$VENV/bin/python" -m pip install "torch @ $JETPACK_TORCH_URL"
fi

# ---------------------------------------------------------------------------------------------
say "5/9 TensorRT-LLM $TRTLLM_REF"
installed_trtllm="$(venv_version tensorrt_llm)"
if [[ $SKIP_TRTLLM -eq 1 ]]; then
    note "skipped (--skip-trtllm)"
elif [[ "$installed_trtllm" == "$TRTLLM_VERSION" ]]; then
    note "tensorrt_llm $installed_trtllm already installed in $VENV"
else
    if [[ -d "$TRTLLM_DIR/.git" ]]; then
        note "source already in $TRTLLM_DIR"
    else
        parent="$(dirname "$TRTLLM_DIR")"
        if [[ ! -w "$parent" ]]; then
            run "${SUDO[@]}" mkdir -p "$TRTLLM_DIR"
            run "${SUDO[@]}" chown "$(id -u):$(id -g)" "$TRTLLM_DIR"
        fi
        # Shallow, submodules included: the build needs the tree at the tag, not its history (build_wheel.py
        # runs `git submodule update --init --recursive` only when 3rdparty/cutlass/.git is missing: J
        # scripts/build_wheel.py main()).
        run git clone --depth 1 --recurse-submodules --shallow-submodules -b "$TRTLLM_REF" "$TRTLLM_URL" "$TRTLLM_DIR"
    fi
    run git -C "$TRTLLM_DIR" lfs install --local
    run git -C "$TRTLLM_DIR" lfs pull
    wheels=("$TRTLLM_DIR"/build/tensorrt_llm-"$TRTLLM_VERSION"-*.whl)
    if [[ -e "${wheels[0]}" ]]; then
        note "wheel already built: ${wheels[0]} (delete it to rebuild)"
    else
        export PATH="/usr/local/cuda/bin:$PATH"
        build=("$VENV/bin/python" scripts/build_wheel.py --clean --cuda_architectures 87 -DENABLE_MULTI_DEVICE=0
               --build_type Release --benchmarks --use_ccache)
        if [[ -n "$JOBS" ]]; then build+=(--job_count "$JOBS"); fi
        note "this takes hours; if the compiler is killed (out of memory) re-run with --swap 16 and/or --jobs 4"
        cmd="$(printf '%q ' "${build[@]}")"
        run_sh "cd $(printf '%q' "$TRTLLM_DIR") && ${cmd% }"
    fi
    run_sh "$(printf '%q' "$VENV/bin/python") -m pip install $(printf '%q' "$TRTLLM_DIR")/build/tensorrt_llm-$TRTLLM_VERSION-*.whl"
fi

# ---------------------------------------------------------------------------------------------
say "6/9 orin-llm (editable, with the device extras)"
export PATH="/usr/local/cuda/bin:$PATH"  # pycuda compiles against CUDA
run "$VENV/bin/python" -m pip install -e "${REPO}[device,policy]"
# our C++ ops (NEON kernels), compiled here for this CPU and torch: the daemon only loads them
run "$VENV/bin/python" -m orin_llm.kernels.native build
# what is installed must be what the constraints pin (a package installed before them may differ)
if [[ $DRY_RUN -eq 0 ]]; then
    "$VENV/bin/python" -m orin_llm.doctor.pins "$CONSTRAINTS" \
        || die "installed versions differ from $CONSTRAINTS (above); reinstall those packages: $VENV/bin/python -m pip install --force-reinstall <name> (PIP_CONSTRAINT=$CONSTRAINTS)"
else
    run "$VENV/bin/python" -m orin_llm.doctor.pins "$CONSTRAINTS"
fi

# ---------------------------------------------------------------------------------------------
say "7/9 memory: swap and zram"
disk_swap_kib=0
zram_kib=0
while read -r name _type size _rest; do
    [[ "$size" =~ ^[0-9]+$ ]] || continue
    if [[ "$name" == /dev/zram* ]]; then zram_kib=$((zram_kib + size)); else disk_swap_kib=$((disk_swap_kib + size)); fi
done < <(tail -n +2 /proc/swaps 2>/dev/null || true)
note "disk swap: $((disk_swap_kib / 1048576)) GiB, zram: $((zram_kib / 1048576)) GiB"
if [[ -n "$SWAP_GB" ]]; then
    want_kib=$((SWAP_GB * 1048576))
    current_kib=0
    if [[ -f "$SWAPFILE" ]]; then current_kib=$(( $(stat -c %s "$SWAPFILE") / 1024 )); fi
    if (( current_kib >= want_kib - 1024 )) && grep -q "^$SWAPFILE " /proc/swaps; then
        note "$SWAPFILE ($((current_kib / 1048576)) GiB) is already on"
    else
        if grep -q "^$SWAPFILE " /proc/swaps; then run "${SUDO[@]}" swapoff "$SWAPFILE"; fi
        if (( current_kib < want_kib - 1024 )); then
            run "${SUDO[@]}" fallocate -l "${SWAP_GB}G" "$SWAPFILE"
        fi
        run "${SUDO[@]}" chmod 600 "$SWAPFILE"
        run "${SUDO[@]}" mkswap "$SWAPFILE"
        run "${SUDO[@]}" swapon "$SWAPFILE"
    fi
    if grep -q "^$SWAPFILE " /etc/fstab 2>/dev/null; then
        note "$SWAPFILE is in /etc/fstab already"
    else
        run_sh "echo '$SWAPFILE none swap sw 0 0' | ${SUDO[*]} tee -a /etc/fstab >/dev/null"
    fi
elif (( disk_swap_kib < MIN_SWAP_GB * 1048576 )); then
    note "advice: quantizing and building the 3B engines can run out of memory with less than ${MIN_SWAP_GB} GiB"
    note "of disk swap; re-run with --swap 16 (creates $SWAPFILE and enables it at boot)"
fi
if (( zram_kib > 0 )); then
    note "advice: zram is compressed RAM; it does not add memory for a build. To give its RAM back to the"
    note "planner and the policy: sudo systemctl disable nvzramconfig && sudo reboot (keep a disk swap file)"
fi

# ---------------------------------------------------------------------------------------------
say "8/9 power mode and clocks"
if [[ $POWER -eq 0 ]]; then
    note "skipped (--no-power)"
elif ! command -v nvpmodel >/dev/null; then
    warn "nvpmodel not found (not a Jetson?): skipping the power mode"
else
    mode="$(nvpmodel -q 2>/dev/null | sed -n 's/^NV Power Mode: *//p' | head -n 1)"
    if [[ "$mode" == *MAXN* ]]; then
        note "power mode is already $mode"
    else
        note "power mode is ${mode:-unknown}; switching to MAXN (mode 0; nvpmodel may ask to reboot)"
        run "${SUDO[@]}" nvpmodel -m 0
    fi
    run "${SUDO[@]}" jetson_clocks
    note "jetson_clocks lasts until the next boot: run sudo jetson_clocks again after a reboot"
fi

# ---------------------------------------------------------------------------------------------
say "9/9 orin-llm doctor"
if [[ $DRY_RUN -eq 1 ]]; then
    run "$VENV/bin/python" -m orin_llm.doctor
else
    "$VENV/bin/python" -m orin_llm.doctor || true
fi
cat <<EOF

Next (jetson/GUIDE.md): put the Llama 3.2 3B / 1B Instruct checkpoints in /opt/orin-llm/models, then
  source $VENV/bin/activate
  orin-llm build --profile jetson/profiles/agx-orin-64gb.toml --out engines/agx-orin-64gb
  sudo jetson/install-service.sh --now --add-user "\$USER"
EOF
