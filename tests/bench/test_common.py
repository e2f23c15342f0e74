"""What the scenarios share: the scaled homes the prefix, traffic and daemon benches grow."""

from __future__ import annotations

import json

from orin_llm.bench.common import scaled_environment
from orin_llm.planning.calibration_data import home_names, load_home
from orin_llm.planning.home import parse_call


def words(text: str) -> list[str]:
    return text.split()


def render(env) -> str:
    return json.dumps(env.model_dump())


def test_a_scaled_home_keeps_the_first_homes_examples_in_its_own_names():
    """The rooms are renamed per floor (f1_kitchen); the first home's examples follow them, and only once
    every thing they name is in (a home's examples name only its own things: the model copies them)."""
    homes = [load_home(n) for n in home_names()]
    first = homes[0]
    one_room = scaled_environment(homes, words, render, 5)
    assert len(one_room.rooms) == 1 and one_room.examples == []
    big = scaled_environment(homes, words, render, 3000)
    assert len(big.rooms) > 2 * len(first.rooms)
    assert [e.task for e in big.examples] == [e.task for e in first.examples] and first.examples
    for ours, theirs in zip(big.examples, first.examples, strict=True):
        for step, original in zip(ours.plan, theirs.plan, strict=True):
            (action, args), (action0, args0) = parse_call(step), parse_call(original)
            types = first.action(action0).args
            assert action == action0
            assert args == [a if t == "text" else f"f1_{a}" for a, t in zip(args0, types, strict=True)]
