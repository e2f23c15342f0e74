"""Loading a home from YAML, JSON or text: one-line errors that name the file and the key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from orin_llm.errors import OrinError
from orin_llm.planning.home import (
    EXAMPLE_HOME_PATH,
    SYSTEM_PROMPT,
    environment_from_dict,
    load_environment,
    prefix_messages,
)
from orin_llm.planning.home.steps import check_steps
from tests.planning.home.homes import home_dict, write


def test_unknown_key_names_the_key(tmp_path: Path) -> None:
    d = home_dict()
    d["rooms"][2]["colour"] = "blue"
    p = write(tmp_path, "home.yaml", yaml.safe_dump(d, sort_keys=False))
    with pytest.raises(OrinError) as exc:
        load_environment(p)
    msg = str(exc.value)
    assert str(p) in msg
    assert "rooms.2.colour" in msg and "unknown key" in msg
    assert "\n" not in msg

    d = home_dict()
    d["acions"] = []
    with pytest.raises(OrinError, match=r"acions: unknown key"):
        environment_from_dict(d)


def test_wrong_type_names_the_key_path(tmp_path: Path) -> None:
    d = home_dict()
    d["rooms"][2]["places"] = "sofa"
    p = write(tmp_path, "home.yaml", yaml.safe_dump(d, sort_keys=False))
    with pytest.raises(OrinError, match=r"rooms\.2\.places"):
        load_environment(p)


def test_yaml_syntax_error_reports_line(tmp_path: Path) -> None:
    p = write(
        tmp_path,
        "broken.yaml",
        "name: broken\nrooms:\n  - name: kitchen\n    places: [sink, fridge\n  - name: hall\n",
    )
    with pytest.raises(OrinError) as exc:
        load_environment(p)
    msg = str(exc.value)
    assert str(p) in msg
    assert "YAML syntax error at line 5" in msg


def test_missing_file(tmp_path: Path) -> None:
    p = tmp_path / "nope.yaml"
    with pytest.raises(OrinError, match="not found") as exc:
        load_environment(p)
    assert str(p) in str(exc.value)


def test_unsupported_suffix(tmp_path: Path) -> None:
    p = write(tmp_path, "home.toml", "name = 'x'")
    with pytest.raises(OrinError, match=r"unsupported file type '.toml'; use .yaml, .yml, .json, .txt or .md"):
        load_environment(p)


def test_a_json_home_is_the_shape_get_environment_returns(tmp_path: Path) -> None:
    import json

    home = load_environment(EXAMPLE_HOME_PATH)
    nameless = {k: v for k, v in home.model_dump(mode="json").items() if k != "name"}
    p = write(tmp_path, "flat.json", json.dumps(nameless))
    assert load_environment(p) == home.model_copy(update={"name": "flat"})  # the name defaults to the file's stem
    write(tmp_path, "bad.json", '{"name": "x",')
    with pytest.raises(OrinError, match="bad.json: JSON syntax error at line 1, column 14"):
        load_environment(tmp_path / "bad.json")


def test_text_environment_from_txt(tmp_path: Path) -> None:
    text = "A one-room studio with a bed, a desk and a kitchen corner.\nThe robot can go, pick and place."
    p = write(tmp_path, "tiny-studio.txt", text + "\n")
    env = load_environment(p)
    assert env.name == "tiny-studio"
    assert env.is_text and env.text == text
    msgs = prefix_messages(env)
    assert len(msgs) == 1 and msgs[0]["role"] == "system"
    assert msgs[0]["content"] == f"{SYSTEM_PROMPT}\n\nHome: tiny-studio\n{text}"
    assert check_steps("go_to(desk)\npick(cup)", env) == ([], [])  # no actions to check against

    empty = write(tmp_path, "empty.md", "  \n")
    with pytest.raises(OrinError, match="empty"):
        load_environment(empty)
