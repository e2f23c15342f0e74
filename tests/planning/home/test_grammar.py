"""The plan grammar of a home: every valid plan is in it, nothing else is."""

import pytest

from orin_llm.errors import OrinError
from orin_llm.planning.calibration_data import home_names, load_home, load_split
from orin_llm.planning.home import EXAMPLE_HOME_PATH, environment_from_dict, load_environment
from orin_llm.planning.home.grammar import plan_grammar
from orin_llm.runtime.constraint import Grammar, GrammarError, Vocabulary
from tests.conftest import tiny_fixture

tiny_engine = tiny_fixture("engine")  # random weights do here (tests/conftest.py)


@pytest.fixture(scope="module")
def vocab(engine):
    return engine.vocabulary()


def _tokens(engine, text: str) -> list[int]:
    return engine.encode(text)


def test_every_reference_plan_of_every_home_is_in_its_grammar(engine, vocab):
    grammars = {n: Grammar.lark(vocab, plan_grammar(load_home(n)), n) for n in home_names()}
    items = load_split("calib")[::7] + load_split("heldout")[::3]
    for it in items:
        c = grammars[it.home].constraint()
        ids = _tokens(engine, "\n".join(it.reference_plan))
        assert c.valid_prefix(ids) == len(ids), (it.id, it.reference_plan)
        for tok in ids:
            c.accept(tok)
        assert min(engine.eos_ids) in c.allowed().nonzero().flatten().tolist()  # the plan may end here


def test_things_of_the_wrong_kind_or_not_in_the_home_are_cut(engine, vocab):
    home = load_environment(EXAMPLE_HOME_PATH)
    g = Grammar.lark(vocab, plan_grammar(home))
    for bad in ("pick(fridge)", "switch_off(bed)", "go_to(garage)", "fly(sofa)", "say(unquoted)",
                "place(mug,sink)", "Sure! go_to(kitchen)"):
        c = g.constraint()
        ids = _tokens(engine, bad)
        assert c.valid_prefix(ids) < len(ids), bad
    c = g.constraint()
    ok = _tokens(engine, 'go_to(fridge)\nopen(fridge)\npick(milk)\nswitch_on(kettle)\nsay("Milk is out")')
    assert c.valid_prefix(ids := ok) == len(ids)


def test_jump_forward_the_grammar_forces_single_tokens(engine, vocab):
    g = Grammar.lark(vocab, plan_grammar(load_environment(EXAMPLE_HOME_PATH)))
    c = g.constraint()
    for tok in _tokens(engine, "switch_off(bedside_lamp"):
        c.accept(tok)
    forced = c.forced()
    assert forced is not None and engine.tokenizer.decode([forced]).startswith(")")  # one way to go on


def test_a_bounded_number_of_steps_then_only_the_end(engine, vocab):
    home = load_environment(EXAMPLE_HOME_PATH)
    c = Grammar.lark(vocab, plan_grammar(home, max_steps=2)).constraint()
    for tok in _tokens(engine, "go_to(sofa)\npick(book)"):
        c.accept(tok)
    allowed = c.allowed().nonzero().flatten().tolist()
    assert min(engine.eos_ids) in allowed and all(engine.tokenizer.decode([t]) != "go" for t in allowed)


def test_what_a_grammar_cannot_express_is_refused_with_the_fix(vocab):
    text_home = environment_from_dict({"name": "plain", "text": "A flat with a kitchen."})
    with pytest.raises(OrinError, match="plain text: it declares no actions"):
        plan_grammar(text_home)
    home = load_environment(EXAMPLE_HOME_PATH).model_dump()
    for room in home["rooms"]:
        room["objects"] = []
    home["examples"], home["state"] = [], None  # its state names objects too
    with pytest.raises(OrinError, match="action pick takes an object, but the home has no objects; add objects"):
        plan_grammar(environment_from_dict(home))
    with pytest.raises(GrammarError, match="does not compile"):
        Grammar.lark(vocab, "start: undefined_rule\n", "a broken grammar")


def test_a_vocabulary_is_built_once_per_engine(engine):
    assert engine.vocabulary() is engine.vocabulary()
    assert isinstance(engine.vocabulary(), Vocabulary)
