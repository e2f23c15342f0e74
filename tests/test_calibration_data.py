from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from orin_llm.errors import OrinError
from orin_llm.planning.calibration_data import CalibrationItem, default_root, load_home, load_split
from orin_llm.planning.home import load_environment
from orin_llm.planning.home.steps import check_steps

REPO = Path(__file__).resolve().parents[1]
GENERATOR = REPO / "calibration" / "generate.py"
COMMITTED = REPO / "calibration"


def _generate(out: Path, seed: int | None = None) -> Path:
    cmd = [sys.executable, str(GENERATOR), "--out", str(out)]
    if seed is not None:
        cmd += ["--seed", str(seed)]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return out


def _files(root: Path) -> dict[str, bytes]:
    paths = sorted(root.glob("*.jsonl")) + sorted((root / "homes").glob("*.yaml"))
    return {str(p.relative_to(root)): p.read_bytes() for p in paths}


@pytest.fixture(scope="module")
def gen_default(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _generate(tmp_path_factory.mktemp("seed0"))


def test_generator_is_deterministic(gen_default: Path, tmp_path: Path) -> None:
    again = _generate(tmp_path / "again", seed=0)
    first = _files(gen_default)
    assert first and first == _files(again)

    other = _files(_generate(tmp_path / "seed1", seed=1))
    assert other != first
    assert (gen_default / "calib.jsonl").read_bytes() != (tmp_path / "seed1" / "calib.jsonl").read_bytes()


def test_committed_files_equal_fresh_generation(gen_default: Path) -> None:
    fresh = _files(gen_default)
    committed = _files(COMMITTED)
    assert sorted(committed) == sorted(fresh), "stale or missing files: run python calibration/generate.py"
    for name, data in fresh.items():
        assert committed[name] == data, f"calibration/{name} differs; run python calibration/generate.py"


def test_counts_and_disjoint_splits() -> None:
    calib = load_split("calib")
    heldout = load_split("heldout")
    assert all(isinstance(i, CalibrationItem) for i in calib + heldout)
    assert len(calib) + len(heldout) >= 240
    assert 0.15 <= len(heldout) / (len(calib) + len(heldout)) <= 0.25
    homes = sorted(p.stem for p in (COMMITTED / "homes").glob("*.yaml"))
    assert len(homes) >= 12

    ids = [i.id for i in calib + heldout]
    assert len(ids) == len(set(ids))
    pairs_c = {(i.home, i.task) for i in calib}
    pairs_h = {(i.home, i.task) for i in heldout}
    assert len(pairs_c) == len(calib) and len(pairs_h) == len(heldout)
    assert not pairs_c & pairs_h
    # whole homes are held out
    homes_c = {i.home for i in calib}
    homes_h = {i.home for i in heldout}
    assert len(homes_h) >= 2 and not homes_c & homes_h
    assert homes_c | homes_h <= set(homes)


def test_every_home_loads_and_is_varied() -> None:
    paths = sorted((COMMITTED / "homes").glob("*.yaml"))
    envs = [load_environment(p) for p in paths]
    for p, env in zip(paths, envs, strict=True):
        assert env.name == p.stem
        assert 2 <= len(env.examples) <= 3
        for ex in env.examples:
            assert check_steps("\n".join(ex.plan), env) == (check_steps("\n".join(ex.plan), env)[0], [])
            assert len(check_steps("\n".join(ex.plan), env)[0]) == len(ex.plan)
    room_sets = {tuple(r.name for r in env.rooms) for env in envs}
    assert len(room_sets) >= 6
    contents = {json.dumps(env.model_dump(exclude={"name", "description"}), sort_keys=True) for env in envs}
    assert len(contents) == len(envs)


def test_reference_plans_are_valid_against_their_home() -> None:
    envs: dict = {}
    items = load_split("calib") + load_split("heldout")
    for item in items:
        env = envs.get(item.home) or envs.setdefault(item.home, load_home(item.home))
        assert item.task.strip() and item.reference_plan
        steps, rejected = check_steps("\n".join(item.reference_plan), env)  # typed: things of the right kind
        assert not rejected and len(steps) == len(item.reference_plan), (item, rejected)
        assert [str(s) for s in steps] == item.reference_plan
        # few-shot examples never leak into the tasks
        assert item.task not in {ex.task for ex in env.examples}


def test_task_families_are_covered() -> None:
    items = load_split("calib") + load_split("heldout")
    actions = {s.split("(")[0] for i in items for s in i.reference_plan}
    assert {"go_to", "pick", "place", "open", "close", "switch_on", "switch_off"} <= actions
    assert any(len(i.reference_plan) >= 8 for i in items)  # multi-step
    assert any(i.task.startswith("Tidy") for i in items)


def test_loader_errors(tmp_path: Path) -> None:
    assert default_root() == COMMITTED
    with pytest.raises(OrinError, match="unknown split 'train'"):
        load_split("train")
    with pytest.raises(OrinError, match="calibration data not found"):
        load_split("calib", root=tmp_path / "missing")
    with pytest.raises(OrinError, match="split file not found"):
        load_split("calib", root=tmp_path)
    with pytest.raises(OrinError, match="no home 'nowhere'.*available: .*cottage"):
        load_home("nowhere")
    good = '{"id": "a", "home": "h", "task": "t", "reference_plan": []}'
    (tmp_path / "calib.jsonl").write_text(good + "\n{oops\n", encoding="utf-8")
    with pytest.raises(OrinError, match=r"calib\.jsonl:2: invalid JSON"):
        load_split("calib", root=tmp_path)


def test_loader_reads_custom_root(gen_default: Path) -> None:
    items = load_split("heldout", root=gen_default)
    assert items == load_split("heldout")
    env = load_home(items[0].home, root=gen_default)
    assert env.name == items[0].home


def test_the_wording_tuning_set_checks():
    """calibration/wording/ (everyday wording, homes of its own, written to tune the goal reading on):
    its homes load and every reference plan runs from the home's state to the task's goal."""
    root = Path(__file__).resolve().parents[1]
    run = subprocess.run([sys.executable, str(root / "calibration" / "wording" / "check.py")], cwd=root,
                         capture_output=True, text=True, env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})
    assert run.returncode == 0 and "all tasks pass" in run.stdout, run.stdout[-2000:] + run.stderr[-2000:]
