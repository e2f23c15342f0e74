"""The docs' x86 ROS 2 commands, run as written (jetson/ros2/README.md, blocks marked
`<!-- docs-test: skip: x86-ros: ... -->`, which tests/test_docs.py leaves to this file).

As tests/test_docs.py does: bash, `set -euo pipefail`, a scratch directory laid out like a checkout
after `make demo` (its `.venv`, its engine), the socket /tmp/planner.sock made private, and here also
`.venv-ros` = the ROS venv of `make ros`, and ROS_DOMAIN_ID=42 made a random domain (parallel runs)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ..test_docs import BLOCKS, SOCKET, scratch_checkout
from .conftest import ROS_VENV, ros_python

pytestmark = pytest.mark.full
ROS_BLOCKS = [b for b in BLOCKS if "x86-ros:" in b.skip]


def test_the_docs_have_x86_ros_commands():
    assert [b.doc.name for b in ROS_BLOCKS] == ["README.md"] and "plan_client" in ROS_BLOCKS[0].text


@pytest.mark.parametrize("block", ROS_BLOCKS, ids=[b.id for b in ROS_BLOCKS])
def test_the_ros_blocks_run_as_written(block, engine_dir):
    ros_python()  # fails, saying why, without the ROS venv
    where = scratch_checkout(engine_dir)
    (where / ".venv-ros").symlink_to(ROS_VENV.resolve())
    text = block.text.replace(SOCKET, str(where / "planner.sock"))
    text = text.replace("ROS_DOMAIN_ID=42", f"ROS_DOMAIN_ID={random.randint(102, 200)}")
    env = {k: v for k, v in os.environ.items()
           if k not in ("ORIN_LLM_SOCKET", "VIRTUAL_ENV", "_ROS_WHEELS_BOOTSTRAP_COMPLETE", "PYTHONPATH")}
    env.update(PYTHONUNBUFFERED="1", PATH=f"{Path(sys.prefix) / 'bin'}:{env['PATH']}")
    proc = subprocess.Popen(["bash", "-c", "set -euo pipefail\n" + text], cwd=where, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=600)
    finally:
        try:  # what the block started in the background and did not stop (it failed before `kill`)
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    assert proc.returncode == 0, f"{block.id} failed ({proc.returncode}):\n{out[-6000:]}"
    assert "Traceback" not in out, out[-6000:]
    assert "step 0: " in out and '"state": "succeeded"' in out and "('default', 'example_home'" in out, out[-3000:]
