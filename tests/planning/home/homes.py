"""The example home as a fresh mapping to break, and a file writer, for the environment tests."""

from __future__ import annotations

from pathlib import Path

import yaml

from orin_llm.planning.home import EXAMPLE_HOME_PATH


def home_dict() -> dict:
    return yaml.safe_load(EXAMPLE_HOME_PATH.read_text(encoding="utf-8"))


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def flat_dict() -> dict:
    """A small home with every kind of action, its own action names with kinds, openable places and
    devices (one of them a thing of its own, not a place): what the simulator tests walk through."""
    return {
        "name": "flat",
        "rooms": [
            {"name": "kitchen", "places": ["counter", "fridge", "sink"], "objects": ["mug", "milk"],
             "devices": ["fridge", "ceiling_light"], "openable": ["fridge"]},
            {"name": "lounge", "places": ["sofa", "tv_stand", "cupboard"], "objects": ["remote", "book"],
             "devices": ["tv_stand"], "openable": ["cupboard"]},
        ],
        "actions": [
            {"name": "walk_to", "args": ["place"], "kind": "navigate"},
            {"name": "grab", "args": ["object"], "kind": "pick"},
            {"name": "put", "args": ["object", "place"], "kind": "place"},
            {"name": "open_up", "args": ["place"], "kind": "open"},
            {"name": "shut", "args": ["place"], "kind": "close"},
            {"name": "power_on", "args": ["device"], "kind": "switch_on"},
            {"name": "power_off", "args": ["device"], "kind": "switch_off"},
            {"name": "announce", "args": ["text"], "kind": "say"},
            {"name": "wipe", "args": ["place"]},
            {"name": "give", "args": ["object"]},
        ],
    }
