"""The paraphrase split (heldout/paraphrase/, issue 43) is for measuring only: nothing that tunes the
product reads it. Two checks: no file of the tuning side names it (the calibration generator, the
build and its calibration, the planning wing's goal reading and prompts, the runtime), and the tuning
steps themselves, run here, open none of its files (an audit hook sees every open)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SPLIT = ROOT / "heldout" / "paraphrase"
# where the product is tuned or its prompts, word lists and grammars are written
TUNING = ("calibration/", "orin_llm/build/", "orin_llm/planning/", "orin_llm/runtime/", "orin_llm/kernels/",
          "orin_llm/data/", "orin_llm/profiles/", "bench/goal_reading.py", "bench/goal_scoring_probe.py")
NAMES = ("heldout/paraphrase", "paraphrase/tasks", "PARAPHRASE")


def test_the_split_is_there_and_checks():
    assert len((SPLIT / "tasks.jsonl").read_text().splitlines()) >= 40
    assert len(list((SPLIT / "homes").glob("*.yaml"))) >= 3
    run = subprocess.run([sys.executable, str(SPLIT / "check.py")], cwd=ROOT, capture_output=True, text=True,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert run.returncode == 0 and "all tasks pass" in run.stdout, run.stdout[-2000:] + run.stderr[-2000:]


def test_no_tuning_file_names_the_split():
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    named = []
    for f in files:
        if not f.startswith(TUNING):
            continue
        try:
            text = (ROOT / f).read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue
        named += [f for n in NAMES if n in text]
    assert not named, f"tuning code names the held-out paraphrase split: {sorted(set(named))}"


def test_the_tuning_steps_open_none_of_its_files(tmp_path):
    """The calibration generator (writing its splits into tmp_path), the build's calibration prompts
    and the goal reading's modules, under an audit hook that records every file opened."""
    code = f"""
import sys
opened = []
def hook(ev, args):
    if ev == "open" and args and isinstance(args[0], str):
        opened.append(args[0])
sys.addaudithook(hook)
sys.argv = ["generate.py", "--out", {str(tmp_path / "gen")!r}]
sys.path.insert(0, {str(ROOT / "calibration")!r})
import generate
generate.main(sys.argv[1:])
from orin_llm.build.calib_prompts import write_calib_dataset
write_calib_dataset({str(tmp_path / "calib.jsonl")!r})
import orin_llm.planning.goal_infer, orin_llm.planning.home.goal_words, orin_llm.planning.home.goal_text
from orin_llm.planning.calibration_data import load_split
load_split("calib"); load_split("heldout")
print("@opened", len(opened))
print("\\n".join("@" + p for p in opened if "paraphrase" in p))
"""
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert run.returncode == 0, run.stderr[-3000:]
    lines = [line[1:] for line in run.stdout.splitlines() if line.startswith("@")]
    assert lines[0].startswith("opened ") and int(lines[0].split()[1]) > 10  # the hook saw the opens
    assert lines[1:] == [], f"a tuning step opened the held-out paraphrase split: {lines[1:]}"
