"""The systemd unit keeps the daemon's state: StateDirectory= makes /var/lib/orin-llm and sets
$STATE_DIRECTORY, which the daemon takes as its default --state-dir (the unit passes none)."""

from __future__ import annotations

import configparser
import shlex
from pathlib import Path

from orin_llm.server.config import DaemonConfig

UNIT = Path(__file__).resolve().parents[2] / "jetson" / "systemd" / "orin-llm.service"


def service() -> configparser.SectionProxy:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.optionxform = str  # systemd's keys are case-sensitive
    parser.read_string(UNIT.read_text())
    return parser["Service"]


def test_the_unit_keeps_its_state_where_systemd_says():
    unit = service()
    assert unit["StateDirectory"] == "orin-llm" and unit["StateDirectoryMode"] == "0750"
    command = shlex.split(unit["ExecStart"].replace("\\\n", " "))
    assert command[1] == "serve" and "--state-dir" not in command  # the default: $STATE_DIRECTORY
    # what systemd sets for StateDirectory=orin-llm (a system unit): the daemon's default directory
    config = DaemonConfig.from_options({}, environ={"STATE_DIRECTORY": "/var/lib/orin-llm"})
    assert config.state_path == Path("/var/lib/orin-llm")
