"""Plan lines checked against the home: typed steps, and rejected lines with their reason."""

import pytest

from orin_llm.planning.home import EXAMPLE_HOME_PATH, Environment, Step, load_environment
from orin_llm.planning.home.steps import check_steps


@pytest.fixture
def home() -> Environment:
    return load_environment(EXAMPLE_HOME_PATH)


def test_realistic_outputs(home: Environment) -> None:
    steps, rejected = check_steps("go_to(fridge)\nopen(fridge)\npick(milk)\nclose(fridge)\n", home)
    assert steps == [Step("go_to", ["fridge"]), Step("open", ["fridge"]), Step("pick", ["milk"]),
                     Step("close", ["fridge"])] and rejected == []

    numbered = ("Sure! Here is the plan:\n1. go_to(kitchen)\n2) pick(mug)\n3. go_to( sink )\n4. place(mug,sink)\n"
                "\nThis plan puts the mug in the sink.\n5. say(done)\n")
    steps, rejected = check_steps(numbered, home)
    assert [str(s) for s in steps] == ["go_to(kitchen)", "pick(mug)", "go_to(sink)", "place(mug, sink)"]
    assert [(r.line, r.reason) for r in rejected] == [
        ("Sure! Here is the plan:", "not an action call like go_to(kitchen)"),
        ("This plan puts the mug in the sink.", "not an action call like go_to(kitchen)"),
        ("5. say(done)", "after the end of the plan")]

    steps, rejected = check_steps('- go_to(tv)\n* switch_off(tv)\n- `say("The tv is off, good night")`\n', home)
    assert steps[2] == Step("say", ["The tv is off, good night"]) and not rejected
    assert str(steps[2]) == 'say("The tv is off, good night")'


def test_things_the_home_does_not_have_are_rejected_with_why(home: Environment) -> None:
    text = "\n".join(["go_to(bedroom)", "pick(socks_basket)", "pick(fridge)", "switch_off(bed)", "fly(bedroom)",
                      "pick(phone, bed)", "pick(phone)"])
    steps, rejected = check_steps(text, home)
    assert [str(s) for s in steps] == ["go_to(bedroom)", "pick(phone)"]
    reasons = {r.line: r.reason for r in rejected}
    assert reasons["pick(socks_basket)"].startswith("'socks_basket' is not an object of this home (umbrella, keys")
    assert reasons["pick(fridge)"].startswith("'fridge' is not an object of this home")
    assert reasons["switch_off(bed)"] == ("'bed' is not a device of this home "
                                          "(hallway_light, kettle, tv, floor_lamp, bedside_lamp)")
    assert reasons["fly(bedroom)"].startswith("'fly' is not an action of this home (go_to, pick")
    assert reasons["pick(phone, bed)"] == "pick(object) takes 1 argument(s), not 2"
    assert check_steps("I cannot help with that.", home)[0] == []
    assert check_steps("", home) == ([], [])


def test_every_example_plan_round_trips(home: Environment) -> None:
    for ex in home.examples:
        steps, rejected = check_steps("\n".join(ex.plan), home)
        assert [str(s) for s in steps] == ex.plan and not rejected
