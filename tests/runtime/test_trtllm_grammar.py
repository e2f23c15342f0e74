"""The plan grammar on TensorRT-LLM 0.12, through the fake executor: the target's logits
post-processor masks every step of a constrained request, found by its client_id."""

import json

import pytest

from orin_llm.environment import environment_from_dict
from orin_llm.errors import OrinError
from orin_llm.runtime.planner import Planner
from orin_llm.runtime.sampling import SamplingParams
from orin_llm.runtime.trtllm.engine import TrtllmEngine
from orin_llm.runtime.trtllm.grammar import PROCESSOR
from tests.conftest import tiny_fixture

from .test_trtllm_engine import install_models, make_engine_dir, target_executor

tiny_engine_dir = tiny_fixture("engine_dir")  # random weights do here (tests/conftest.py)

SMALL_HOME = environment_from_dict({  # the fabricated engine takes 512 input tokens
    "name": "small_home",
    "rooms": [{"name": "kitchen", "places": ["sink", "fridge"], "objects": ["mug"], "devices": ["fridge"]},
              {"name": "hall", "places": ["sofa"], "objects": ["book"]}],
    "actions": [{"name": "go_to", "args": ["place"]}, {"name": "pick", "args": ["object"]},
                {"name": "place", "args": ["object", "place"]}, {"name": "switch_off", "args": ["device"]}],
})


@pytest.fixture
def eng(tmp_path, engine_dir, fake):
    engine = TrtllmEngine.load(make_engine_dir(engine_dir, tmp_path / "trt"))
    install_models(fake, engine)
    yield engine
    engine.close()


def test_a_constrained_plan_is_masked_by_the_post_processor_on_every_step(eng, fake):
    planner = Planner(eng, SMALL_HOME)
    assert planner.prefix.grammar is not None  # compiled once for the version, on this engine too
    config = fake.calls("ExecutorConfig")
    assert PROCESSOR in (config[0]["logits_post_processor_map"] or {})  # the target's executor
    plan = planner.plan("Bring the mug to the sofa.", SamplingParams(max_tokens=40))
    assert plan.constrained and plan.steps  # every line a step of the home, though the model is scripted
    lines = [ln for ln in plan.text.splitlines() if ln.strip()]
    assert len(plan.steps) >= len(lines) - (plan.result.finish_reason == "length")
    request = target_executor(fake).requests[-1]
    assert request.logits_post_processor_name == PROCESSOR and request.client_id is not None
    assert request.external_draft_tokens_config is None  # constrained: plain decoding
    free = planner.plan("Bring the mug to the sofa.", SamplingParams(max_tokens=40), constrained=False)
    assert free.rejected  # the scripted model, unconstrained, writes no plan at all
    assert target_executor(fake).requests[-1].logits_post_processor_name is None
    assert eng.grammar._requests == {}  # every request's grammar state was released


def test_a_named_drafter_with_a_grammar_is_refused(eng):
    planner = Planner(eng, SMALL_HOME)
    with pytest.raises(OrinError, match="'lookup' with a grammar is not available on TensorRT-LLM 0.12"):
        planner.plan("Open the fridge.", SamplingParams(max_tokens=8), speculation="lookup")
    assert planner.plan("Open the fridge.", SamplingParams(max_tokens=8)).result.speculation.drafter == "none"


def test_an_unknown_post_processor_is_refused_like_the_executor_does(eng, fake):
    req = eng.request([1, 2, 3], 4, streaming=False, sampling=eng.greedy_config())
    req.logits_post_processor_name = "missing"
    with pytest.raises(RuntimeError, match="LogitsPostProcessor missing not found"):
        target_executor(fake).enqueue_request(req)


def test_a_chat_answer_schema_is_masked_on_the_orin_too(eng, fake):
    """server/structured.py's grammars (response_format, tool calls) reach the same post-processor."""
    from orin_llm.server.schemas import ChatRequest
    from orin_llm.server.structured import GrammarCache, answer_of

    schema = {"type": "object", "properties": {"room": {"enum": ["kitchen", "hall"]}},
              "required": ["room"], "additionalProperties": False}
    req = ChatRequest.model_validate({"messages": [{"role": "user", "content": "Where?"}], "response_format": {
        "type": "json_schema", "json_schema": {"name": "where", "schema": schema}}})
    grammar = GrammarCache().for_answer(answer_of(req), eng)
    ids = eng.encode("Where?")
    gen = eng.generate(ids, SamplingParams(max_tokens=24), constraint=grammar.constraint())
    result = gen.run()
    request = target_executor(fake).requests[-1]
    assert request.logits_post_processor_name == PROCESSOR
    assert json.loads(result.text)["room"] in ("kitchen", "hall")  # the scripted model, held to the schema
