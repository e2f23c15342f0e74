"""The example home as a fresh mapping to break, and a file writer, for the environment tests."""

from __future__ import annotations

from pathlib import Path

import yaml

from orin_llm.environment import EXAMPLE_HOME_PATH


def home_dict() -> dict:
    return yaml.safe_load(EXAMPLE_HOME_PATH.read_text(encoding="utf-8"))


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p
