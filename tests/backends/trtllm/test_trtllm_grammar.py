"""The plan grammar on TensorRT-LLM 0.12, through the fake executor and the real bindings (`eng`,
tests/backends/trtllm/trtllm_both.py): the target's logits post-processor masks every step of a constrained
request, found by its client_id."""

import json
import threading

import pytest

from orin_llm.backends.trtllm.grammar import PROCESSOR
from orin_llm.errors import OrinError
from orin_llm.planning.home import environment_from_dict
from orin_llm.planning.planner import Planner
from orin_llm.runtime.sampling import SamplingParams
from tests.conftest import tiny_fixture

from .test_trtllm_engine import need_mode, target_executor
from .trtllm_both import fake_only, on_fake

tiny_engine_dir = tiny_fixture("engine_dir")  # random weights do here (tests/conftest.py)

SMALL_HOME = environment_from_dict({  # the fabricated engine takes 512 input tokens
    "name": "small_home",
    "rooms": [{"name": "kitchen", "places": ["sink", "fridge"], "objects": ["mug"], "devices": ["fridge"]},
              {"name": "hall", "places": ["sofa"], "objects": ["book"]}],
    "actions": [{"name": "go_to", "args": ["place"]}, {"name": "pick", "args": ["object"]},
                {"name": "place", "args": ["object", "place"]}, {"name": "switch_off", "args": ["device"]}],
})


def test_a_constrained_plan_is_masked_by_the_post_processor_on_every_step(eng):
    planner = Planner(eng, SMALL_HOME)
    assert planner.prefix.grammar is not None  # compiled once for the version, on this engine too
    rows = eng.grammar.rows
    plan = planner.plan("Bring the mug to the sofa.", SamplingParams(max_tokens=40), goal="none")
    assert plan.constrained and plan.steps  # every line a step of the home
    lines = [ln for ln in plan.text.splitlines() if ln.strip()]
    assert len(plan.steps) >= len(lines) - (plan.result.finish_reason == "length")
    assert eng.grammar.rows - rows >= len(plan.result.token_ids)  # the executor masked every token it decided
    free = planner.plan("Bring the mug to the sofa.", SamplingParams(max_tokens=40), constrained=False, goal="none")
    assert not free.constrained
    assert eng.grammar._requests == {}  # every request's grammar state was released
    fake = on_fake(eng)
    if fake is not None:
        config = fake.calls("ExecutorConfig")
        assert PROCESSOR in (config[0]["logits_post_processor_map"] or {})  # the target's executor
        target = target_executor(fake)
        assert target.requests[-1].logits_post_processor_name is None  # the unconstrained plan
        masked = [r for r in target.requests if r.logits_post_processor_name == PROCESSOR]
        assert masked and all(r.client_id is not None for r in masked)
        assert free.rejected  # the scripted model, unconstrained, writes no plan at all


@pytest.mark.parametrize("mode", ["lookup", "draft_model", "combined"])
def test_constrained_plans_speculate_and_plan_what_plain_decoding_plans(eng, mode):
    """Drafts are cut on the host at the first token the grammar forbids, go to the target as external
    draft tokens, and the target decides every position under the post-processor (1 + drafts rows)."""
    need_mode(eng, mode)
    planner = Planner(eng, SMALL_HOME)
    task, params = "Bring the mug to the sofa.", SamplingParams(max_tokens=48)
    # the grammar alone ("report"): the fake's scripted draft engine continues the grammar's plan, which
    # the state-narrowed one (the default, enforce) cuts at its first token; the narrowed constraint on
    # this backend is tested in test_feasibility_trtllm.py
    plain = planner.plan(task, params, speculation="none", feasibility="report", goal="none")
    fake = on_fake(eng)
    before = len(target_executor(fake).requests) if fake is not None else 0
    runs = [planner.plan(task, params, speculation=mode, feasibility="report", goal="none")
            for _ in range(2)]  # the 2nd looks up the 1st
    assert all(spec.result.token_ids == plain.result.token_ids and spec.text == plain.text for spec in runs)
    s = runs[1].result.speculation
    assert s.drafter == mode and s.drafted > 0 and 0 < s.accepted <= s.drafted
    # some calls masked several positions at once: 0.12 hands the post-processor 1 + drafts rows
    # (docs/trtllm-0.12-jetson.md §13, inferred from the first open sources: the Orin confirms it here)
    assert eng.grammar.rows > eng.grammar.calls
    assert eng.grammar._requests == {}
    if fake is None:
        return
    target = target_executor(fake)
    drafted = [r for r in target.requests[before:] if r.external_draft_tokens_config is not None]
    assert drafted and all(r.logits_post_processor_name == PROCESSOR and r.client_id is not None for r in drafted)
    grammar = planner.prefix.grammar
    for r in drafted:  # every draft the target saw is one the grammar allows from that request's context
        c = grammar.constraint()
        for tok in r.input_token_ids[_prompt_len(target, r):]:
            c.accept(tok)
        draft = r.external_draft_tokens_config.tokens
        assert c.valid_prefix(draft) == len(draft)
    assert threading.main_thread().ident not in target.processor_threads  # the executor's own thread


def _prompt_len(target, request) -> int:
    """The planner's prompt length: the input of the first request of that plan (no drafts)."""
    firsts = [r for r in target.requests if r.input_token_ids == request.input_token_ids[:len(r.input_token_ids)]
              and r.external_draft_tokens_config is None and r.logits_post_processor_name == PROCESSOR]
    return min(len(r.input_token_ids) for r in firsts)


@fake_only("the fake post-processes only one row of a verifying iteration, a case 0.12's sources leave open")
def test_positions_decided_unmasked_are_dropped_on_the_host(eng, fake, monkeypatch, caplog):
    """Were 0.12 to post-process only one row of a verifying iteration, a target correction the grammar
    forbids is dropped on the host and decoding goes on from the valid prefix: the same plan."""
    planner = Planner(eng, SMALL_HOME)
    task, params = "Put the book on the sofa.", SamplingParams(max_tokens=40)
    plain = planner.plan(task, params, speculation="none", goal="none")
    monkeypatch.setattr(fake, "PROCESS_DRAFT_ROWS", False)
    for _ in range(2):  # the second looks up the first: drafts the grammar allows
        spec = planner.plan(task, params, speculation="lookup", goal="none")
        assert spec.result.token_ids == plain.result.token_ids
    assert "the grammar forbids (its logits were not post-processed)" in caplog.text  # it did happen


def test_a_step_the_post_processor_cannot_place_fails_the_request(eng, monkeypatch):
    """No client_id (and a request id it was never told): an error in the answer, never an unmasked plan."""
    planner = Planner(eng, SMALL_HOME)
    real_request = eng.request

    def without_client(*args, **kwargs):
        req = real_request(*args, **kwargs)
        req.client_id = None  # as a 4-argument 0.12 call would come
        return req

    monkeypatch.setattr(eng, "request", without_client)
    monkeypatch.setattr(eng.grammar, "bind", lambda client, request_id: None)
    with pytest.raises(OrinError, match="grammar could not be applied to this request: .*without a client_id"):
        planner.plan("Open the fridge.", SamplingParams(max_tokens=8), speculation="none", goal="none")
    fake = on_fake(eng)
    if fake is not None:
        target = target_executor(fake)
        assert target.idle()
        assert target.runs[max(target.runs)].output in ([], [eng.end_id])  # ended at once: only end_id allowed
    monkeypatch.undo()
    again = planner.plan("Open the fridge.", SamplingParams(max_tokens=16), speculation="none", goal="none")
    assert again.steps  # serves on


def test_a_call_without_client_id_is_placed_by_request_id(eng, monkeypatch):
    planner = Planner(eng, SMALL_HOME)
    plain = planner.plan("Open the fridge.", SamplingParams(max_tokens=16), speculation="none", goal="none")
    real_request = eng.request

    def without_client(*args, **kwargs):
        req = real_request(*args, **kwargs)
        req.client_id = None
        return req

    monkeypatch.setattr(eng, "request", without_client)
    again = planner.plan("Open the fridge.", SamplingParams(max_tokens=16), speculation="none", goal="none")
    assert again.result.token_ids == plain.result.token_ids


@fake_only("the fake's refusal of an unknown post-processor name (0.12's executor.cpp is closed): a check of the fake")
def test_an_unknown_post_processor_is_refused_like_the_executor_does(eng):
    req = eng.request([1, 2, 3], 4, streaming=False, sampling=eng.greedy_config())
    req.logits_post_processor_name = "missing"
    with pytest.raises(RuntimeError, match="LogitsPostProcessor missing not found"):
        eng.target_executor.enqueue_request(req)


def test_a_chat_answer_schema_is_masked_on_the_orin_too(eng):
    """server/structured.py's grammars (response_format, tool calls) reach the same post-processor."""
    from orin_llm.server.schemas import ChatRequest
    from orin_llm.server.structured import GrammarCache, answer_of

    schema = {"type": "object", "properties": {"room": {"enum": ["kitchen", "hall"]}},
              "required": ["room"], "additionalProperties": False}
    req = ChatRequest.model_validate({"messages": [{"role": "user", "content": "Where?"}], "response_format": {
        "type": "json_schema", "json_schema": {"name": "where", "schema": schema}}})
    grammar = GrammarCache().for_answer(answer_of(req), eng)
    ids = eng.encode("Where?")
    calls = eng.grammar.calls
    gen = eng.generate(ids, SamplingParams(max_tokens=24), constraint=grammar.constraint())
    result = gen.run()
    assert eng.grammar.calls > calls  # the executor's post-processor decided it
    assert json.loads(result.text)["room"] in ("kitchen", "hall")  # held to the schema, whatever the model
    fake = on_fake(eng)
    if fake is not None:
        assert target_executor(fake).requests[-1].logits_post_processor_name == PROCESSOR


def test_a_late_step_of_a_released_request_ends_it_and_an_unknown_client_is_an_error(eng):
    """After a cancel the executor may still decide one step: nobody owns it, it is ended; a client id the
    engine never gave out is an error against that request id."""
    import torch

    planner = Planner(eng, SMALL_HOME)
    grammar = eng.grammar
    client = grammar.register(planner.prefix.grammar.constraint(), 3)
    grammar.bind(client, 77)
    grammar.release(client, [])
    logits = torch.zeros(1, 64)
    grammar(77, logits, [[1, 2, 3]], 0, client)
    assert grammar.error(77) is None and int(logits.argmax()) == eng.end_id
    assert torch.isinf(logits).sum() == logits.numel() - 1
    grammar(78, torch.zeros(1, 64), [[1, 2, 3]], 0, 10_000)
    assert "client_id 10000 is not a request of this engine" in grammar.error(78)
