"""Plans that respect the home's state on TensorRT-LLM 0.12, through the fake executor and the real
bindings (`eng`, tests/backends/trtllm/trtllm_both.py): its logits
post-processor calls the request's constraint (accept, allowed), which is the grammar narrowed by
the simulated state, so "enforce" holds there too without a change to the backend."""


from orin_llm.planning.feasibility import FeasibleConstraint
from orin_llm.planning.home import environment_from_dict
from orin_llm.planning.home.world import simulate
from orin_llm.planning.planner import Planner
from orin_llm.runtime.sampling import SamplingParams
from tests.conftest import tiny_fixture

from ..backends.trtllm.trtllm_both import on_fake

tiny_engine_dir = tiny_fixture("engine_dir")  # random weights do here (tests/conftest.py)

HOME = environment_from_dict({  # the fabricated engine takes 512 input tokens
    "name": "small_home",
    "rooms": [{"name": "kitchen", "places": ["sink", "fridge"], "objects": ["mug"], "devices": ["fridge"],
               "openable": ["fridge"]},
              {"name": "hall", "places": ["sofa"], "objects": ["book"]}],
    "actions": [{"name": "go_to", "args": ["place"]}, {"name": "pick", "args": ["object"]},
                {"name": "place", "args": ["object", "place"]}, {"name": "open", "args": ["place"]}],
    "state": {"robot_at": "sofa", "holding": "book", "object_at": {"mug": "fridge"}, "open": {"fridge": False}},
})


def test_enforce_narrows_the_post_processors_mask(eng, monkeypatch):
    planner = Planner(eng, HOME)
    seen = []
    allowed = FeasibleConstraint.allowed
    monkeypatch.setattr(FeasibleConstraint, "allowed", lambda self: seen.append(1) or allowed(self))
    reported = 0
    for seed in range(3):
        params = SamplingParams(max_tokens=24, temperature=1.0, seed=seed)
        plan = planner.plan("Put the book in the fridge.", params, goal="none")
        assert plan.feasibility == "enforce" and plan.steps, plan.text
        _, violations = simulate(HOME, plan.steps, HOME.state)
        assert violations == [] and plan.violations == [], (plan.text, violations)
        reported += len(planner.plan("Put the book in the fridge.", params, feasibility="report",
                                     goal="none").violations)
    assert seen  # the executor's post-processor asked the narrowed constraint
    if on_fake(eng) is not None:  # a real model may plan only what can run; the random weights do not
        assert reported > 0  # the grammar alone, on the same random weights, writes steps that cannot run
