from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from orin_llm.environment import (
    EXAMPLE_HOME_PATH,
    SYSTEM_PROMPT,
    Environment,
    environment_from_dict,
    load_environment,
    prefix_messages,
    task_message,
    version_key,
)
from orin_llm.errors import OrinError
from orin_llm.home.steps import check_steps


@pytest.fixture
def home() -> Environment:
    return load_environment(EXAMPLE_HOME_PATH)


def _home_dict() -> dict:
    return yaml.safe_load(EXAMPLE_HOME_PATH.read_text(encoding="utf-8"))


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def test_example_home_loads(home: Environment) -> None:
    assert EXAMPLE_HOME_PATH.parts[-4:] == ("orin_llm", "data", "homes", "example_home.yaml")
    assert home.name == "example_home"
    assert not home.is_text
    assert 4 <= len(home.rooms) <= 5
    assert 6 <= len(home.actions) <= 8
    assert len(home.examples) == 3
    assert [a.name for a in home.actions][:3] == ["go_to", "pick", "place"]
    assert home.action("place") is not None and home.action("place").args == ["object", "place"]
    kitchen = next(r for r in home.rooms if r.name == "kitchen")
    assert "fridge" in kitchen.places and "mug" in kitchen.objects


def test_rendering_is_deterministic_and_complete(home: Environment) -> None:
    msgs = prefix_messages(home)
    again = prefix_messages(load_environment(EXAMPLE_HOME_PATH))
    assert msgs == again
    assert repr(msgs).encode() == repr(again).encode()
    assert version_key(home) == version_key(load_environment(EXAMPLE_HOME_PATH))

    # one system message, then the examples as user/assistant pairs
    assert [m["role"] for m in msgs] == ["system"] + ["user", "assistant"] * len(home.examples)
    system = msgs[0]["content"]
    assert system.startswith(SYSTEM_PROMPT)
    for room in home.rooms:
        assert room.name in system
        for name in room.places + room.objects:
            assert name in system
    assert "- place(object, place): put the held object on or in a place" in system
    for a in home.actions:
        assert f"{a.name}({', '.join(a.args)})" in system
    # rooms keep file order
    positions = [system.index(f"- {r.name}.") for r in home.rooms]
    assert positions == sorted(positions)

    for i, ex in enumerate(home.examples):
        assert msgs[1 + 2 * i]["content"] == f"Task: {ex.task}"
        assert msgs[2 + 2 * i]["content"] == "\n".join(ex.plan)
    assert msgs[2]["content"].splitlines()[0] == "go_to(fridge)"


def test_version_key_changes_with_content(home: Environment) -> None:
    d = _home_dict()
    d["rooms"][0]["objects"].append("torch")
    other = environment_from_dict(d)
    assert len(version_key(home)) == 64
    assert version_key(other) != version_key(home)
    assert prefix_messages(other) != prefix_messages(home)


def test_task_message() -> None:
    assert task_message("bring me the mug") == {"role": "user", "content": "Task: bring me the mug"}
    msg = task_message("  bring me the mug ", ["the mug is on the counter", "the fridge is closed"])
    assert msg["content"] == (
        "Task: bring me the mug\nObservations:\n- the mug is on the counter\n- the fridge is closed"
    )
    assert task_message("x", [])["content"] == "Task: x"
    with pytest.raises(OrinError, match="task is empty"):
        task_message("   ")


def test_unknown_key_names_the_key(tmp_path: Path) -> None:
    d = _home_dict()
    d["rooms"][2]["colour"] = "blue"
    p = _write(tmp_path, "home.yaml", yaml.safe_dump(d, sort_keys=False))
    with pytest.raises(OrinError) as exc:
        load_environment(p)
    msg = str(exc.value)
    assert str(p) in msg
    assert "rooms.2.colour" in msg and "unknown key" in msg
    assert "\n" not in msg

    d = _home_dict()
    d["acions"] = []
    with pytest.raises(OrinError, match=r"acions: unknown key"):
        environment_from_dict(d)


def test_wrong_type_names_the_key_path(tmp_path: Path) -> None:
    d = _home_dict()
    d["rooms"][2]["places"] = "sofa"
    p = _write(tmp_path, "home.yaml", yaml.safe_dump(d, sort_keys=False))
    with pytest.raises(OrinError, match=r"rooms\.2\.places"):
        load_environment(p)


def test_yaml_syntax_error_reports_line(tmp_path: Path) -> None:
    p = _write(
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
    p = _write(tmp_path, "home.toml", "name = 'x'")
    with pytest.raises(OrinError, match=r"unsupported file type '.toml'; use .yaml, .yml, .json, .txt or .md"):
        load_environment(p)


def test_a_json_home_is_the_shape_get_environment_returns(tmp_path: Path) -> None:
    import json

    home = load_environment(EXAMPLE_HOME_PATH)
    nameless = {k: v for k, v in home.model_dump(mode="json").items() if k != "name"}
    p = _write(tmp_path, "flat.json", json.dumps(nameless))
    assert load_environment(p) == home.model_copy(update={"name": "flat"})  # the name defaults to the file's stem
    _write(tmp_path, "bad.json", '{"name": "x",')
    with pytest.raises(OrinError, match="bad.json: JSON syntax error at line 1, column 14"):
        load_environment(tmp_path / "bad.json")


def test_example_calling_undeclared_action(tmp_path: Path) -> None:
    d = _home_dict()
    d["examples"][1]["plan"].insert(2, "teleport(kitchen)")
    p = _write(tmp_path, "home.yaml", yaml.safe_dump(d, sort_keys=False))
    with pytest.raises(OrinError) as exc:
        load_environment(p)
    msg = str(exc.value)
    assert "examples.1.plan.2" in msg
    assert "teleport" in msg and "undeclared" in msg


def test_example_wrong_arg_count() -> None:
    d = _home_dict()
    d["examples"][0]["plan"][5] = "place(milk)"
    with pytest.raises(OrinError, match=r"examples\.0\.plan\.5: 'place\(milk\)' passes 1 argument"):
        environment_from_dict(d)


def test_example_step_not_a_call() -> None:
    d = _home_dict()
    d["examples"][2]["plan"][0] = "walk to the tv"
    with pytest.raises(OrinError, match=r"examples\.2\.plan\.0: .* not an action call"):
        environment_from_dict(d)


def test_identifiers_and_uniqueness_are_checked() -> None:
    d = _home_dict()
    d["rooms"][2]["name"] = "living room"
    with pytest.raises(OrinError, match=r"rooms\.2\.name: .*must be an identifier"):
        environment_from_dict(d)
    d = _home_dict()
    d["actions"][0]["name"] = "go-to"
    with pytest.raises(OrinError, match=r"actions\.0\.name"):
        environment_from_dict(d)
    d = _home_dict()
    d["rooms"][3]["places"].append("sink")
    with pytest.raises(OrinError, match=r"rooms\.3\.places: 'sink' is already used at rooms\.1\.places"):
        environment_from_dict(d)


def test_structured_or_text_required() -> None:
    with pytest.raises(OrinError, match="give rooms and actions"):
        environment_from_dict({"name": "empty"})
    with pytest.raises(OrinError, match="not both"):
        environment_from_dict({**_home_dict(), "text": "a flat"})
    with pytest.raises(OrinError, match="must be a mapping"):
        environment_from_dict(["not", "a", "dict"], source="x.yaml")


def test_text_environment_from_txt(tmp_path: Path) -> None:
    text = "A one-room studio with a bed, a desk and a kitchen corner.\nThe robot can go, pick and place."
    p = _write(tmp_path, "tiny-studio.txt", text + "\n")
    env = load_environment(p)
    assert env.name == "tiny-studio"
    assert env.is_text and env.text == text
    msgs = prefix_messages(env)
    assert len(msgs) == 1 and msgs[0]["role"] == "system"
    assert msgs[0]["content"] == f"{SYSTEM_PROMPT}\n\nHome: tiny-studio\n{text}"
    assert check_steps("go_to(desk)\npick(cup)", env) == ([], [])  # no actions to check against

    empty = _write(tmp_path, "empty.md", "  \n")
    with pytest.raises(OrinError, match="empty"):
        load_environment(empty)


def test_devices_and_argument_types(tmp_path: Path) -> None:
    home = load_environment(EXAMPLE_HOME_PATH)
    assert home.names("device") == ["hallway_light", "kettle", "tv", "floor_lamp", "bedside_lamp"]
    assert "kitchen" in home.names("place") and "fridge" in home.names("place")
    assert "Devices: tv, floor_lamp." in prefix_messages(home)[0]["content"]
    legacy = _home_dict()
    for room in legacy["rooms"]:
        room.pop("devices", None)
    old = environment_from_dict(legacy)  # a home that names no devices still loads:
    assert old.names("device") == [n for r in old.rooms for n in r.places + r.objects]  # any place or object
    bad = _home_dict()
    bad["actions"][0]["args"] = ["surface"]
    with pytest.raises(OrinError, match="'surface' is not an argument type; .* place, object, device, text"):
        environment_from_dict(bad)
    elsewhere = _home_dict()
    elsewhere["rooms"][0]["devices"] = ["tv"]  # the tv is in the living room
    with pytest.raises(OrinError, match="rooms.0.devices: 'tv' is used at rooms.2.places"):
        environment_from_dict(elsewhere)
    own = _home_dict()
    own["rooms"][1]["devices"] = ["kettle", "ceiling_light"]  # a device of its own name
    assert "ceiling_light" in environment_from_dict(own).names("device")


def test_text_arguments_are_rendered_quoted(home: Environment) -> None:
    said = [m["content"] for m in prefix_messages(home) if m["role"] == "assistant"][-1]
    assert said.endswith('say("The tv is off")')
