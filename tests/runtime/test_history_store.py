"""The lookup drafter's history survives restarts: atomic files per environment, refused when they
were written for another engine or tokenizer."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orin_llm.runtime.history_store import HistoryStore

ID = {"engine": "demo", "tokenizer_sha256": "ab" * 32, "vocab_size": 1000}
SEED = [[1, 2, 3, 4]]


def test_a_restart_finds_what_the_last_run_learned(tmp_path):
    store = HistoryStore(tmp_path, ID, SEED)
    h = store.get("env:home")
    h.add([10, 11, 12, 13])
    assert store.dirty == ["env:home"] and store.save_dirty() == 1 and store.dirty == []
    again = HistoryStore(tmp_path, ID, SEED).get("env:home")
    assert again.outputs() == [[1, 2, 3, 4], [10, 11, 12, 13]]  # the seed plans, then what it learned
    assert HistoryStore(tmp_path, ID, SEED).get("env:other").outputs() == SEED  # per environment


@pytest.mark.parametrize("change", [{"tokenizer_sha256": "cd" * 32}, {"engine": "other"}, {"vocab_size": 5}])
def test_a_file_from_another_engine_or_tokenizer_is_refused(tmp_path, caplog, change):
    store = HistoryStore(tmp_path, ID, SEED)
    store.get("env:home").add([10, 11, 12])
    store.save("env:home")
    with caplog.at_level("WARNING"):
        other = HistoryStore(tmp_path, {**ID, **change}, SEED).get("env:home")
    assert other.outputs() == SEED  # never silently used
    name = next(iter(change))
    assert f"lookup history {store.path('env:home')} refused: written for {name}" in caplog.text


def test_a_damaged_file_is_refused_not_used(tmp_path, caplog):
    store = HistoryStore(tmp_path, ID, SEED)
    path = store.path("env:home")
    path.write_text('{"format": 1, "identity": ' + json.dumps(ID) + ', "key": "env:home", "outputs": [[1, "x"]]}')
    with caplog.at_level("WARNING"):
        assert store.get("env:home").outputs() == SEED
    assert "not lists of this vocabulary's token ids" in caplog.text
    path.write_text("{trunc")
    assert HistoryStore(tmp_path, ID, SEED).get("env:home").outputs() == SEED


WRITER = r"""
import sys
from pathlib import Path
from orin_llm.runtime.history_store import HistoryStore
ID = {"engine": "demo", "tokenizer_sha256": "ab" * 32, "vocab_size": 1000}
store = HistoryStore(Path(sys.argv[1]), ID)
h = store.get("env:home")
n = 0
while True:
    n += 1
    h.add([n % 1000] * 300)  # each save holds every output so far: a file of growing size
    store.save("env:home")
    print(n, flush=True)
"""


def test_sigkill_mid_write_leaves_the_last_good_history(tmp_path):
    """A writer saving as fast as it can is killed with SIGKILL at varied moments; every time, the
    file on disk is a whole history (never empty, never cut), and it only grows."""
    root = Path(__file__).resolve().parents[2]
    last = 0
    for delay in (0.0, 0.013, 0.05, 0.2):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)], stdout=subprocess.PIPE,
                                cwd=root, env={**os.environ, "PYTHONPATH": str(root)})
        assert proc.stdout.readline()  # its first save is done (the import took a while)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        out = proc.communicate()[0].decode().split()
        assert proc.returncode == -signal.SIGKILL
        out = out or ["1"]
        outputs = HistoryStore(tmp_path, ID).get("env:home").outputs()
        assert outputs and all(len(o) == 300 for o in outputs)  # whole outputs only
        assert len(outputs) >= int(out[-1]) - 1 and len(outputs) >= last  # the last finished save, or the one after
        last = len(outputs)
    HistoryStore(tmp_path, ID)  # the next start clears what a killed write left behind
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
