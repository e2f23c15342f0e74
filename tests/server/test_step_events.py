"""A streamed plan's `step` events (planning/step_events.py): complete lines only, typed, and each one
feasible in the state simulated from the steps sent before it."""

from __future__ import annotations

from orin_llm.planning.home import EXAMPLE_HOME_PATH, load_environment
from orin_llm.planning.home.world import World
from orin_llm.planning.step_events import FeasibleSteps

HOME = load_environment(EXAMPLE_HOME_PATH)  # robot_at hallway; the milk in the fridge, which is closed


def streamed(text: str, steps: FeasibleSteps, piece: int = 5) -> list[str]:
    out = []
    for i in range(0, len(text), piece):
        out += steps.feed(text[i:i + piece])
    out += steps.finish()
    return [f"{s['index']}:{s['action']}({', '.join(s['args'])})" for s in out]


def test_steps_come_as_their_lines_complete_and_stop_at_the_first_that_cannot_run():
    plan = "go_to(kitchen)\npick(milk)\ngo_to(sofa)\n"
    assert streamed(plan, FeasibleSteps(HOME, World.start(HOME))) == ["0:go_to(kitchen)"]
    # off: no world, only typed (as before #32)
    assert streamed(plan, FeasibleSteps(HOME, None)) == ["0:go_to(kitchen)", "1:pick(milk)", "2:go_to(sofa)"]


def test_a_feasible_plan_streams_whole_and_a_half_step_never_does():
    plan = "go_to(fridge)\nopen(fridge)\npick(milk)\ngo_to(coffee_table)\nplace(milk, coffee_table)"
    steps = FeasibleSteps(HOME, World.start(HOME))
    assert streamed(plan, steps) == ["0:go_to(fridge)", "1:open(fridge)", "2:pick(milk)", "3:go_to(coffee_table)",
                                     "4:place(milk, coffee_table)"]
    assert streamed("go_to(fridge)\npick(mi", FeasibleSteps(HOME, World.start(HOME))) == ["0:go_to(fridge)"]


def test_one_line_arriving_token_by_token_is_sent_once_complete():
    steps = FeasibleSteps(HOME, World.start(HOME))
    assert steps.feed("go_to(kit") == [] and steps.feed("chen)") == []  # no newline yet: may go on
    assert [s["args"] for s in steps.feed("\n")] == [["kitchen"]]
