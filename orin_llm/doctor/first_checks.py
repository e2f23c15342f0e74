"""First contact's stage 1: every check that can fail the hours after it, before anything is installed.

`python3 -m orin_llm.doctor.first_checks --profile P --engine DIR [--swap GB] [--dry-run]`, run by
jetson/first-contact.sh with the Orin's own Python, before its installs: so the standard library only
(JetPack 6's Python 3.10 has no tomllib, so the profile is read with pip's own tomli, and without pip
the check says to install it). It checks, in order: the L4T release (R36.4.x; a JetPack 7 / L4T R38 board
is told what to do instead), the Python, the disk where the engines and the checkpoints go (the need
computed from the profile's models, doctor/disk_need.py), the swap, the power mode and clocks (the
doctor's own check), and the checkpoints (present, or the Hugging Face login and the download command).

It prints one line per check and exits 1 at the end if any is an error, its last line "next: ..." the
first error's fix; `--dry-run` prints what it would check and the disk need, and exits 0.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path
from typing import Optional

from ..errors import OrinError
from .disk_need import DiskItem, disk_need, free_bytes, gib, mount_of, read_profile
from .host import Probe, read_file, swap_kib
from .machine import JETPACK, check_power, parse_l4t
from .report import ERROR, INFO, OK, WARN, Report

MIN_SWAP_GIB = 8  # jetson/setup.sh's advice for building the engines
SUPPORTED = "JetPack 6.1/6.2.x (L4T R36.4.x)"
TORCH_PROFILE = "jetson/profiles/agx-orin-64gb-torch.toml"


class FirstChecks(Report):
    """A Report whose errors carry the next thing to try, the first one of which first contact prints."""

    def __init__(self) -> None:
        super().__init__(jetson=True)
        self.next: list[str] = []

    def fail(self, section: str, message: str, next_step: str) -> None:
        self.add(section, ERROR, message)
        self.next.append(next_step)


def check_release(r: FirstChecks, p: Probe) -> bool:
    release = read_file(p.tegra_release)
    if release is None:
        r.fail("device", f"not a Jetson ({p.tegra_release} not found)",
               "this is not a Jetson (no /etc/nv_tegra_release): run first-contact on the Orin, or --dry-run here")
        return False
    l4t = parse_l4t(release)
    if l4t is None:
        r.fail("device", f"cannot read the L4T release in {p.tegra_release}: {release.splitlines()[0]!r}",
               f"flash {SUPPORTED} with NVIDIA SDK Manager")
        return False
    text = "L4T R{}.{}.{}".format(*l4t)
    named = f"{text} (JetPack {JETPACK[l4t]})" if l4t in JETPACK else text
    if l4t[:2] == (36, 4):
        status = OK if l4t == (36, 4, 0) else INFO
        r.add("device", status, f"{named}: the CUDA 12.6 / TensorRT 10.3 line TensorRT-LLM v0.12.0-jetson is built "
                                "for" + ("" if l4t == (36, 4, 0) else " (made on R36.4.0, JetPack 6.1)"))
        return True
    if l4t[0] >= 38:
        # JetPack 7 (L4T R38) brings CUDA 13 and a newer TensorRT; 0.12-jetson's wheel links CUDA 12.6 and
        # TensorRT 10.3, and no TensorRT-LLM release after it supports Jetson (docs/trtllm-0.12-jetson.md §12).
        r.fail("device", f"{named}: JetPack 7 (CUDA 13): TensorRT-LLM v0.12.0-jetson does not run on it",
               "on JetPack 7, run jetson/first-contact.sh --jetpack 7 (TensorRT Edge-LLM, NVIDIA's engine for "
               f"Jetson there: jetson/GUIDE.md §3b), or serve the torch engine ({TORCH_PROFILE}); or reflash "
               f"{SUPPORTED} with SDK Manager for the TensorRT-LLM engines")
        return False
    r.fail("device", f"{named}: TensorRT-LLM v0.12.0-jetson is built for {SUPPORTED}",
           f"flash {SUPPORTED} with NVIDIA SDK Manager: TensorRT-LLM v0.12.0-jetson is built for it")
    return False


def check_python(r: FirstChecks, version: str) -> None:
    if version.startswith("3.10."):
        r.add("python", OK, f"python3 {version} (TensorRT-LLM v0.12.0-jetson's wheels are cp310)")
    else:
        r.fail("python", f"python3 is {version}; TensorRT-LLM v0.12.0-jetson and JetPack 6's torch are cp310",
               "use JetPack 6's own /usr/bin/python3 (3.10): PYTHON=/usr/bin/python3 jetson/first-contact.sh")


def check_disk(r: FirstChecks, items: list[DiskItem]) -> None:
    """Sum what goes on each filesystem and compare it with what is free there."""
    by_mount: dict[str, list[DiskItem]] = {}
    for item in items:
        by_mount.setdefault(mount_of(item.path), []).append(item)
    for mount, group in by_mount.items():
        need = sum(i.bytes for i in group)
        free = free_bytes(mount)
        what = ", ".join(f"{i.label} {gib(i.bytes)}" for i in group if i.bytes)
        device = _block_device(mount)
        emmc = device is not None and "mmcblk" in device
        if free < need:
            r.fail("disk", f"{mount}: {gib(free)} free, the build needs {gib(need)} there ({what})",
                   f"free {gib(need - free)} on {mount}, or put /opt/orin-llm and the engines on an NVMe drive")
        else:
            r.add("disk", WARN if emmc else OK, f"{mount}: {gib(free)} free, {gib(need)} needed ({what})"
                  + (f"; {device} is the eMMC: an NVMe drive is recommended (faster builds, engine loads "
                     "and swap)" if emmc else ""))


def _block_device(mount: str) -> Optional[str]:
    for line in (read_file("/proc/mounts") or "").splitlines():
        cols = line.split()
        if len(cols) >= 2 and cols[1] == mount:
            return cols[0]
    return None


def check_swap(r: FirstChecks, p: Probe, swap_gb: Optional[int]) -> None:
    disk, zram = swap_kib(read_file(p.proc_swaps))
    text = f"disk swap {disk / 1048576:.1f} GiB, zram {zram / 1048576:.1f} GiB"
    if disk >= MIN_SWAP_GIB * 1048576:
        r.add("swap", OK, text)
    elif swap_gb is not None and swap_gb >= MIN_SWAP_GIB:
        r.add("swap", INFO, f"{text}; stage 2 makes a {swap_gb} GiB swap file (--swap)")
    else:
        r.fail("swap", f"{text}: under {MIN_SWAP_GIB} GiB of disk swap (zram is compressed RAM and does not help "
                       "a build)", "rerun with --swap 16 (stage 2 makes the swap file)")


def hf_token_present() -> bool:
    if os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN"):
        return True
    home = Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface"))
    return (home / "token").is_file()


def download_command(repo: str, model_dir: str) -> str:
    # Meta's repositories carry original/ (the consolidated .pth weights, ~6 GB for the 3B, 2.5 GB for the
    # 1B) that nothing here reads: convert_checkpoint.py reads the safetensors.
    return f'huggingface-cli download {repo} --exclude "original/*" --local-dir {model_dir}'


def check_checkpoints(r: FirstChecks, models: list[tuple[str, str, Optional[str]]], token: bool) -> None:
    """models: (section, model directory, hf_repo)."""
    missing = []
    for section, model_dir, repo in models:
        d = Path(model_dir)
        if (d / "config.json").is_file() and any(d.glob("*.safetensors")):
            r.add("checkpoints", OK, f"[{section}] {model_dir}")
        else:
            missing.append((section, model_dir, repo))
    if not missing:
        return
    steps = [] if token else ["huggingface-cli login (the Llama 3.2 repositories are gated: accept Meta's licence "
                              "on their pages first)"]
    if shutil.which("huggingface-cli") is None:
        steps.insert(0, 'python3 -m pip install --user "huggingface-hub[cli]==0.24.6" (the version the '
                        "constraints pin)")
    for section, model_dir, repo in missing:
        command = download_command(repo, model_dir) if repo else f"put the checkpoint in {model_dir}"
        r.fail("checkpoints", f"[{section}] {model_dir}: no checkpoint (config.json and *.safetensors)",
               "; then ".join(steps + [command]))
        steps = []  # the login is said once


def run(profile_path: Path, engine_dir: Path, swap_gb: Optional[int], probe: Probe,
        python_version: str) -> FirstChecks:
    r = FirstChecks()
    profile = read_profile(profile_path)
    if not check_release(r, probe):
        return r  # nothing else matters on the wrong JetPack
    check_python(r, python_version)
    check_disk(r, disk_need(profile, profile_path.parent, engine_dir))
    check_swap(r, probe, swap_gb)
    check_power(r, probe)
    models = [(s, profile[s]["model"], profile[s].get("hf_repo")) for s in ("target", "draft") if s in profile]
    check_checkpoints(r, models, hf_token_present())
    return r


def dry_run(profile_path: Path, engine_dir: Path) -> list[str]:
    profile = read_profile(profile_path)
    lines = [f"check: /etc/nv_tegra_release says {SUPPORTED}; a JetPack 7 board (L4T R38) stops "
             "here with what to do instead (first-contact --jetpack 7: Edge-LLM; or reflash)",
             "check: python3 is 3.10 (TensorRT-LLM v0.12.0-jetson's wheels are cp310)",
             "check: free disk where each of these goes (an eMMC gets a warning: NVMe recommended):"]
    items = disk_need(profile, profile_path.parent, engine_dir, fresh=True)
    lines += [f"  {item.label}: {gib(item.bytes)} in {item.path}" for item in items]
    lines.append(f"  in all {gib(sum(i.bytes for i in items))}, summed per filesystem on the Orin")
    lines += [f"check: disk swap >= {MIN_SWAP_GIB} GiB in /proc/swaps, or --swap GB (stage 2 makes it)",
              "check: nvpmodel -q (MAXN wanted) and jetson_clocks --show (pinned); stage 2 sets both",
              "check: the checkpoints; for one that is missing, the Hugging Face login and:"]
    lines += [f"  {download_command(profile[s]['hf_repo'], profile[s]['model'])}"
              for s in ("target", "draft") if s in profile and profile[s].get("hf_repo")]
    return lines


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m orin_llm.doctor.first_checks", description=__doc__.splitlines()[0])
    ap.add_argument("--profile", required=True, type=Path)
    ap.add_argument("--engine", required=True, type=Path, help="where the engine directory goes")
    ap.add_argument("--swap", type=int, default=None, help="the swap file stage 2 makes, GiB")
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args(argv)
    try:
        if args.dry_run:
            print("\n".join(dry_run(args.profile, args.engine)))
            return 0
        r = run(args.profile, args.engine, args.swap, Probe(), ".".join(map(str, sys.version_info[:3])))
    except OrinError as e:
        print(f"error: {e}\nnext: {e}")
        return 1
    for c in r.checks:
        print(f"{c.status:5} {c.section}: {c.message}")
    if r.next:
        print(f"next: {r.next[0]}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
