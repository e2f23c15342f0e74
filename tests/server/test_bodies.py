"""bodies.py: JSON and YAML bodies under limits (aliases, depth, values, lone surrogates)."""

from __future__ import annotations

import datetime
import json

import pytest
import yaml

from orin_llm.server import bodies
from orin_llm.server.bodies import MAX_DEPTH, MAX_NODES, BodyError, check_tree, load_json, load_yaml


@pytest.fixture(autouse=True, params=["libyaml", "python"])
def loader(request, monkeypatch):
    """Every test with libyaml's parser (what the daemon uses where PyYAML has it) and without."""
    if request.param == "libyaml":
        if not hasattr(yaml, "CSafeLoader"):
            pytest.skip("PyYAML was built without libyaml here")
        monkeypatch.setattr(bodies, "BaseLoader", yaml.CSafeLoader)
    else:
        monkeypatch.setattr(bodies, "BaseLoader", yaml.SafeLoader)


def alias_bomb(levels: int = 8) -> str:
    """About 400 bytes that safe_load makes a list of 10^levels leaves (the issue's was 552)."""
    lines = ['a0: &a0 ["x","x","x","x","x","x","x","x","x","x"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 10) + "]")
    return "\n".join([*lines, f"rooms: [*a{levels - 1}]"]) + "\n"


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def error(fn, *args) -> BodyError:
    with pytest.raises(BodyError) as e:
        fn(*args)
    return e.value


def test_an_ordinary_home_reads_as_safe_load_reads_it():
    text = open(bodies.__file__.replace("server/bodies.py", "data/homes/example_home.yaml")).read()
    assert load_yaml(text) == yaml.safe_load(text)
    assert load_yaml("d: 2024-01-02\nn: ~\n") == {"d": datetime.date(2024, 1, 2), "n": None}
    assert load_yaml("") is None and load_yaml("# only a comment\n") is None
    assert load_json('{"name": "h", "rooms": []}') == {"name": "h", "rooms": []}


def test_aliases_are_refused_before_they_multiply():
    assert len(alias_bomb()) < 600
    e = error(load_yaml, alias_bomb())
    assert e.status == 422 and "YAML aliases (*name) are not accepted" in e.message and "as JSON" in e.message
    # a single alias of a scalar, and a merge key, are aliases too
    assert "aliases" in error(load_yaml, "a: &x 1\nb: *x\n").message
    assert "aliases" in error(load_yaml, "base: &b {x: 1}\nroom: {<<: *b, y: 2}\n").message
    # a recursive one (an anchor inside itself)
    assert "aliases" in error(load_yaml, "a: &x [*x]\n").message
    assert load_yaml("a: &x 1\n") == {"a": 1}  # an anchor nobody uses multiplies nothing


@pytest.mark.parametrize("load, text", [(load_yaml, nested(MAX_DEPTH + 1)), (load_json, nested(MAX_DEPTH + 1)),
                                        (load_yaml, nested(5000)), (load_json, nested(100_000)),
                                        (load_yaml, '{"a": ' * (MAX_DEPTH + 1) + "1" + "}" * (MAX_DEPTH + 1))])
def test_depth_is_bounded_and_named(load, text):
    """Past our limit, past libyaml's own (1000) and past Python's recursion limit: the same 422."""
    e = error(load, text)
    assert e.status == 422 and f"nested more than {MAX_DEPTH} levels deep" in e.message


def test_depth_at_the_limit_passes():
    assert load_yaml(nested(MAX_DEPTH)) == load_json(nested(MAX_DEPTH)) == json.loads(nested(MAX_DEPTH))


@pytest.mark.parametrize("load, text", [
    (load_yaml, "[" + ",".join(["a"] * MAX_NODES) + "]"),
    (load_json, json.dumps(["a"] * MAX_NODES)),
    (load_json, json.dumps({f"k{i}": i for i in range(MAX_NODES // 2)})),  # keys count too
    (load_yaml, "".join(f"k{i}: v\n" for i in range(MAX_NODES // 2))),
])
def test_values_are_bounded_and_named(load, text):
    e = error(load, text)
    assert e.status == 413 and f"more than {MAX_NODES} values" in e.message and "send less" in e.message


def test_values_at_the_limit_pass():
    items = ["a"] * (MAX_NODES - 1)  # and the list itself
    assert load_json(json.dumps(items)) == items
    assert load_yaml("[" + ",".join(items) + "]") == items


def test_lone_surrogates_are_refused_unless_the_models_check_them():
    for text in ('{"task": "open \\ud800 the fridge"}', '{"\\udfff": 1}', '[["\\ud800"]]'):
        assert "no lone surrogates" in error(load_json, text).message
        load_json(text, unicode=False)  # the plan and chat models name the field themselves
    check_tree({"a": ["é", "✓"]})


@pytest.mark.parametrize("text, words", [
    ("name: [broken\n", "not valid YAML at line 2, column 1"),
    ("x: " + "9" * 5000 + "\n", "not valid YAML: Exceeds the limit (4300 digits)"),
    ("\x00", "not valid YAML"),
    ("{[1]: 2}\n", "not valid YAML"),  # an unhashable key
])
def test_what_yaml_cannot_read_is_a_422_with_its_message(text, words):
    e = error(load_yaml, text)
    assert e.status == 422 and words in e.message
