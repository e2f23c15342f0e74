"""A home rendered into chat messages: deterministic, complete, and quoted as the grammar writes."""

from __future__ import annotations

import pytest

from orin_llm.errors import OrinError
from orin_llm.planning.home import (
    EXAMPLE_HOME_PATH,
    SYSTEM_PROMPT,
    Environment,
    environment_from_dict,
    load_environment,
    prefix_messages,
    task_message,
    version_key,
)
from orin_llm.planning.home.render import state_text


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

    # an example's turn is laid out as a task's: the home's state first, where it has one
    for i, ex in enumerate(home.examples):
        assert msgs[1 + 2 * i] == task_message(ex.task, None, state_text(home.state))
        assert msgs[1 + 2 * i]["content"].startswith("State:\n- the robot is at hallway")
        assert msgs[2 + 2 * i]["content"] == "\n".join(ex.plan)
    stateless = environment_from_dict({**home.model_dump(mode="json", exclude_none=True), "state": None})
    assert prefix_messages(stateless)[1]["content"] == f"Task: {home.examples[0].task}"
    assert msgs[2]["content"].splitlines()[0] == "go_to(fridge)"


def test_task_message() -> None:
    assert task_message("bring me the mug") == {"role": "user", "content": "Task: bring me the mug"}
    msg = task_message("  bring me the mug ", ["the mug is on the counter", "the fridge is closed"])
    assert msg["content"] == (
        "Task: bring me the mug\nObservations:\n- the mug is on the counter\n- the fridge is closed"
    )
    assert task_message("x", [])["content"] == "Task: x"
    with pytest.raises(OrinError, match="task is empty"):
        task_message("   ")


def test_text_arguments_are_rendered_quoted(home: Environment) -> None:
    said = [m["content"] for m in prefix_messages(home) if m["role"] == "assistant"][-1]
    assert said.endswith('say("The tv is off")')

