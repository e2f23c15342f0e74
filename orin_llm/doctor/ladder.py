"""First contact's stage 4: the feature ladder (backends/trtllm/features.py `LADDER`), rung by rung.

    python -m orin_llm.doctor.ladder --profile P --engine DIR --out RUNDIR [--dry-run]

Each rung: its engine built when it is not there yet (`<DIR>-plain`, `<DIR>-reuse` from the profile's
sibling profiles, `<DIR>` itself from the profile), `orin-llm serve --trtllm-features` with that rung's
features, the daemon's smoke test (doctor/smoke.py) with its plans constrained or not and its speculation,
the daemon stopped. Everything a rung wrote goes to RUNDIR/ladder/<n>-<rung>/ (build.log, serve.log,
smoke.json); it stops at the first rung that fails and says which rung last passed and how to serve it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..backends.trtllm.features import ENGINES, LADDER, Rung

SERVE_STOP_S = 60.0


@dataclass(frozen=True)
class Step:
    index: int
    rung: Rung
    profile: Path
    engine: Path
    folder: Path

    @property
    def features(self) -> str:
        return ",".join(self.rung.features) or "none"

    def build(self, python: str) -> list[str]:
        return [python, "-m", "orin_llm.cli", "build", "--profile", str(self.profile), "--out", str(self.engine)]

    def serve(self, python: str, socket: str) -> list[str]:
        return [python, "-m", "orin_llm.cli", "serve", "--engine", str(self.engine), "--socket", socket,
                "--trtllm-features", self.features, "--state-dir", "none"]

    def smoke(self, python: str, socket: str) -> list[str]:
        argv = [python, "-m", "orin_llm.doctor.smoke", "--socket", socket, "--out", str(self.folder / "smoke.json")]
        if not self.rung.constrained:
            argv.append("--unconstrained")
        return argv + ["--speculation", self.rung.speculation]


def steps(profile: Path, engine: Path, out: Path) -> list[Step]:
    found = []
    for i, rung in enumerate(LADDER, 1):
        suffix = ENGINES[rung.engine]
        folder = out / "ladder" / f"{i}-{rung.name.replace(' ', '-')}"
        found.append(Step(i, rung, profile.with_name(f"{profile.stem}{suffix}.toml"),
                          engine.with_name(f"{engine.name}{suffix}"), folder))
    return found


def _show(argv: list[str], python: str) -> str:
    text = " ".join(argv).replace(f"{python} -m orin_llm.cli", "orin-llm")
    return text.replace(f"{python} ", "python ")


def dry_run(all_steps: list[Step], python: str) -> list[str]:
    lines = []
    for s in all_steps:
        lines.append(f"rung {s.index}/{len(all_steps)} {s.rung.name}: features {s.features}, plans "
                     f"{'constrained' if s.rung.constrained else 'unconstrained'}, speculation {s.rung.speculation}")
        if s.engine.name not in {t.engine.name for t in all_steps[:s.index - 1]}:
            lines.append(f"  + {_show(s.build(python), python)}  (unless built; log {s.folder}/build.log)")
        lines.append(f"  + {_show(s.serve(python, '<socket>'), python)} > {s.folder}/serve.log &")
        lines.append(f"  + {_show(s.smoke(python, '<socket>'), python)}")
    return lines


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(SERVE_STOP_S)
        except subprocess.TimeoutExpired:
            proc.kill()  # an executor that hangs on shutdown: the rung's log says so
            proc.wait()


def walk(all_steps: list[Step], python: str) -> tuple[Optional[Step], Optional[Step], str]:
    """(the last rung that passed, the rung that failed, why); runs each rung's commands for real."""
    from .smoke import run_smoke

    passed: Optional[Step] = None
    for s in all_steps:
        s.folder.mkdir(parents=True, exist_ok=True)
        print(f"rung {s.index}/{len(all_steps)} {s.rung.name}: features {s.features}", flush=True)
        if not (s.engine / "manifest.json").is_file():
            with open(s.folder / "build.log", "w") as log:
                code = subprocess.call(s.build(python), stdout=log, stderr=subprocess.STDOUT)
            if code != 0:
                return passed, s, f"the build of {s.engine} failed (exit {code}): {s.folder}/build.log"
        socket = f"/tmp/orin-ladder-{os.getpid()}-{s.index}.sock"
        with open(s.folder / "serve.log", "w") as log:
            proc = subprocess.Popen(s.serve(python, socket), stdout=log, stderr=subprocess.STDOUT)
        try:
            smoke = run_smoke(socket, say=lambda line: print(f"   {line}", flush=True),
                              constrained=s.rung.constrained, speculation=s.rung.speculation)
        finally:
            _stop(proc)
        (s.folder / "smoke.json").write_text(json.dumps(smoke.as_dict(), indent=2) + "\n")
        if not smoke.ok:
            failed = next(c for c in smoke.checks if not c.ok)
            return passed, s, f"{failed.name}: {failed.detail} (logs: {s.folder}/serve.log, smoke.json)"
        passed = s
    return passed, None, ""


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m orin_llm.doctor.ladder", description=__doc__.splitlines()[0])
    ap.add_argument("--profile", required=True, type=Path)
    ap.add_argument("--engine", required=True, type=Path, help="the profile's engine directory")
    ap.add_argument("--out", required=True, type=Path, help="the run's folder (first contact's)")
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args(argv)
    python = sys.executable
    all_steps = steps(a.profile, a.engine, a.out)
    if a.dry_run:
        print("\n".join(dry_run(all_steps, python)))
        return 0
    passed, failed, why = walk(all_steps, python)
    if failed is None:
        print(f"all {len(all_steps)} rungs passed")
        return 0
    last = (f"rung {passed.index} ({passed.rung.name}) passed: serve that until this one is fixed, orin-llm serve "
            f"--engine {passed.engine} --trtllm-features {passed.features}" if passed else "no rung passed")
    print(f"rung {failed.index} ({failed.rung.name}) failed: {why}\nnext: {last}; attach the tarball to an issue")
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
