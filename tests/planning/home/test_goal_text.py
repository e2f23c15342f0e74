"""Goals from the task text (planning/home/goal_text.py, planning/goal_infer.py) on the tiny random-weight
engine: its weights write nonsense, so every goal it writes that parses is the grammar's doing.
The mentions, the goal grammar (every reference goal of calibration is in it; things the task does
not name are not), the few-shot goals derived by simulation, the planner's "infer" and its refusals."""

import pytest

from orin_llm.bench.plan_quality import reference_goal
from orin_llm.errors import OrinError
from orin_llm.planning import goal_infer
from orin_llm.planning.calibration_data import load_home, load_split
from orin_llm.planning.home import EXAMPLE_HOME_PATH, environment_from_dict, load_environment, simulate
from orin_llm.planning.home.goal_text import (
    goal_examples,
    goal_grammar,
    goal_lines,
    goal_prefix_messages,
    kind_examples,
)
from orin_llm.planning.home.goal_words import cues, mentioned
from orin_llm.planning.home.goals import parse_goal
from orin_llm.planning.home.steps import check_steps
from orin_llm.planning.planner import Planner
from orin_llm.runtime.constraint import Grammar
from orin_llm.runtime.sampling import SamplingParams
from tests.conftest import tiny_fixture

tiny_engine = tiny_fixture("engine")  # random weights do here (tests/conftest.py)


def test_a_mention_is_the_longest_name_of_the_home_in_the_text():
    env = load_home("bungalow")
    assert mentioned(env, "Switch on the desk lamp.") == {"desk_lamp"}  # not the desk
    assert mentioned(env, "Put the book on the desk, then turn on the desk lamp") == {"book", "desk", "desk_lamp"}
    assert mentioned(env, "Bring the napkins to the Dining Table.") == {"napkins", "dining_table"}
    assert mentioned(env, "Wipe the towel rails.") == {"towel_rail"}  # a plural too
    assert mentioned(env, "Make some tea.") == set()
    # where a thing comes from is not what the goal is about
    assert mentioned(env, "Take the candle from the sideboard to the desk.") == {"candle", "desk"}
    assert mentioned(env, "Get the candle out of the sideboard and put it on the desk") == {"candle", "desk"}
    assert mentioned(env, "Take the candle from the sideboard to the desk.", sources_out=False) == {
        "candle", "sideboard", "desk"}


def test_every_reference_goal_is_in_the_grammar_narrowed_to_its_task(engine):
    vocab = engine.vocabulary()
    items = load_split("calib")[::9]
    homes: dict = {}
    for it in items:
        env = homes.setdefault(it.home, load_home(it.home))
        facts = reference_goal(env, it)
        c = Grammar.lark(vocab, goal_grammar(env, mentioned(env, it.task))).constraint()
        ids = engine.encode("\n".join(facts))
        assert c.valid_prefix(ids) == len(ids), (it.id, it.task, facts)
        for tok in ids:
            c.accept(tok)
        assert min(engine.eos_ids) in c.allowed().nonzero().flatten().tolist()  # the goal may end here


def test_every_reference_goal_is_in_the_grammar_narrowed_by_its_tasks_words(engine):
    """The cues (switch and open/close verbs, tell, where each object goes) never cut the goal the
    task's reference plan makes true."""
    vocab = engine.vocabulary()
    homes: dict = {}
    for it in load_split("calib")[1::6]:
        env = homes.setdefault(it.home, load_home(it.home))
        facts = reference_goal(env, it)
        only = mentioned(env, it.task)
        cue = cues(env, it.task, only)
        if cue.handover and cue.speaker:  # brought to the speaker: where they said they are, as the plan ends
            facts = facts + [f"robot_at({cue.speaker})"]
            world, _ = simulate(env, check_steps("\n".join(it.reference_plan), env)[0])
            assert not parse_goal(facts, env).missing(world), (it.id, it.reference_plan)
        c = Grammar.lark(vocab, goal_grammar(env, only, cue=cue)).constraint()
        ids = engine.encode("\n".join(facts))
        assert c.valid_prefix(ids) == len(ids), (it.id, it.task, facts, cue)
        for tok in ids:
            c.accept(tok)
        assert min(engine.eos_ids) in c.allowed().nonzero().flatten().tolist()


def test_the_tasks_words_say_which_facts_a_goal_may_hold():
    env = load_home("bungalow")
    c = cues(env, "Turn off the toaster and the floor lamp, then put the plate on the counter.")
    assert c.switch == {("toaster", "off"), ("floor_lamp", "off")} and c.destination and not c.said
    assert c.at == {("plate", "counter")}
    c = cues(env, "Put the plate in the microwave and turn on the microwave.")
    assert c.switch == {("microwave", "on")} and c.destination  # "in the microwave": the plate ends there
    assert cues(env, "Switch the desk lamp off.").switch == {("desk_lamp", "off")}
    assert cues(env, "Please open the sideboard, and tell me when you are done.").opening == {("sideboard", "open")}
    assert cues(env, "Close the shoe cabinet.").said is False
    assert cues(env, "Close the shoe cabinet, and tell me when you are done.").said is True
    c = cues(env, "I am in the office, please bring me the watch.")
    assert not c.destination and not c.switch  # a room is no destination: the watch stays in hand
    assert c.handover == {"watch"} and c.speaker == "office" and c.at == set()
    for task in ("Can you bring the watch to me? I'm in the office.", "Hand me the watch, I am at the desk.",
                 "Bring me the watch."):
        assert cues(env, task).handover == {"watch"}, task
    assert cues(env, "Hand me the watch, I am at the desk.").speaker == "desk"
    assert cues(env, "Bring me the watch and put the book on the desk.").handover == {"watch"}
    for task in ("Bring the watch to the desk, and tell me when you are done.", "Take the watch to the office.",
                 "Put the watch on the desk and let me know."):
        assert cues(env, task).handover == set(), task
    assert cues(env, "Clean the desk.").actions == {"wipe"} and cues(env, "Put the book on the desk.").actions == set()
    c = cues(env, "Tidy up the office: put the book on the desk and the watch on the nightstand.")
    assert c.at == {("book", "desk"), ("watch", "nightstand")}


def test_the_words_narrow_the_goal_grammar(engine):
    env = load_home("bungalow")

    def allows(task, goal):
        only = mentioned(env, task)
        g = Grammar.lark(engine.vocabulary(), goal_grammar(env, only, cue=cues(env, task, only))).constraint()
        ids = engine.encode(goal)
        if g.valid_prefix(ids) < len(ids):
            return False
        for tok in ids:
            g.accept(tok)
        return min(engine.eos_ids) in g.allowed().nonzero().flatten().tolist()
    assert allows("Turn off the desk lamp.", "off(desk_lamp)")
    assert not allows("Turn off the desk lamp.", "on(desk_lamp)")
    assert allows("Please open the sideboard.", "open(sideboard)")
    assert not allows("Please open the sideboard.", "closed(sideboard)")
    task = "Put the book on the desk, and tell me when you are done."
    assert allows(task, "at(book, desk)\nsaid") and not allows(task, "at(book, desk)")  # said is asked for
    assert not allows(task, "holding(book)\nat(book, desk)\nsaid")  # the book ends on the desk, not in hand
    assert not allows("Put the book on the desk.", "at(book, desk)\nsaid")  # nobody asked to be told
    task = "Tidy up the office: put the book on the desk and the watch on the nightstand."
    assert allows(task, "at(book, desk)\nat(watch, nightstand)")
    assert not allows(task, "at(book, nightstand)\nat(watch, desk)")
    assert not allows("Carry the book over to the desk.", "done(wipe, desk)\nat(book, desk)")
    task = "I am in the office, please bring me the watch."  # held, handed over, where the speaker is
    assert allows(task, "holding(watch)\ndone(give, watch)\nrobot_at(office)")
    assert allows(task, "robot_at(office)\ndone(give, watch)\nholding(watch)")
    assert not allows(task, "holding(watch)\ndone(give, watch)")  # not taken to the speaker
    assert not allows(task, "at(watch, office)")  # left in the room, not handed over
    assert allows("Bring me the watch.", "holding(watch)\ndone(give, watch)")  # nowhere said: anywhere


def test_the_narrowed_grammar_cuts_things_the_task_does_not_name(engine):
    env = load_home("bungalow")
    g = Grammar.lark(engine.vocabulary(), goal_grammar(env, mentioned(env, "Put the book on the desk.")))
    for bad in ("at(book, bed)", "at(watch, desk)", "on(desk_lamp)", "at(desk, book)", "open(sideboard)",
                "holding(book)\nholding(book)\nholding(book)\nholding(book)", "go_to(desk)"):
        ids = engine.encode(bad)
        assert g.constraint().valid_prefix(ids) < len(ids), bad
    whole = Grammar.lark(engine.vocabulary(), goal_grammar(env))
    ids = engine.encode("at(watch, bed)\noff(desk_lamp)\nclosed(sideboard)")
    assert whole.constraint().valid_prefix(ids) == len(ids)  # nothing mentioned: the whole home


def test_the_few_shot_goals_are_what_the_example_plans_make_true():
    env = load_home("bungalow")
    examples = goal_examples(env)
    assert examples == [("Get the candle out of the sideboard and put it on the desk.", ["at(candle, desk)"]),
                        ("Put the watch away on the nightstand.", ["at(watch, nightstand)"]),
                        ("Please open the guest wardrobe.", ["open(guest_wardrobe)"])]
    kinds = kind_examples(env)  # one per fact kind, in the home's own names
    assert {f.split("(")[0] for _, facts in kinds for f in facts} == {"at", "off", "on", "closed"}
    assert ("Turn off the hallway light.", ["off(hallway_light)"]) in kinds
    messages = goal_prefix_messages(env)
    assert messages[0]["role"] == "system" and "Home: bungalow" in messages[0]["content"]
    answers = [m["content"].split("\n") for m in messages[2::2]]
    assert answers == [f for _, f in kinds] + [["at(candle, desk)"], ["at(watch, nightstand)"],
                                                ["open(guest_wardrobe)"]]
    for facts in answers:
        parse_goal(facts, env)  # each one a goal of the home
    hard = environment_from_dict({"name": "h", "rooms": [{"name": "hall", "places": ["hook"], "objects": ["key"]}],
                                  "actions": [{"name": "walk", "args": ["place"], "kind": "navigate"}]})
    assert kind_examples(hard) == [("Put the key on the hook.", ["at(key, hook)"])]  # only kinds it has


def test_goal_lines_are_each_fact_once():
    assert goal_lines("at(mug,sink)\nsaid\n\nat(mug, sink)\n") == ["at(mug, sink)", "said"]


@pytest.fixture(scope="module")
def planner(engine):
    p = Planner(engine, load_environment(EXAMPLE_HOME_PATH))
    yield p
    engine.unpin(p.pin)


def test_an_inferred_goal_is_the_homes_and_the_plan_aims_at_it(planner):
    task = "Bring the milk to the coffee table."
    plan = planner.plan(task, SamplingParams(max_tokens=32), speculation="none", goal="infer", deadline_s=60)
    env = planner.prefix.environment
    assert plan.goal_inferred, plan
    goal = parse_goal(plan.goal_inferred, env)  # names only the home's things, of the right sorts
    only = mentioned(env, task)
    assert all(a in only for f in goal.facts for a in f.args), plan.goal_inferred
    assert plan.goal_reached is not None and plan.search["source"] in ("model", "search", "none")
    if plan.goal_reached:
        assert plan.goal_missing == []
    again = planner.plan(task, SamplingParams(max_tokens=32), speculation="none", goal="infer", deadline_s=60)
    assert again.goal_inferred == plan.goal_inferred  # greedy: the same goal
    given = planner.plan(task, SamplingParams(max_tokens=32), speculation="none", goal=["said"])
    assert given.goal_inferred is None


def test_infer_is_refused_where_it_cannot_run(planner, engine):
    with pytest.raises(OrinError, match='"infer" to have the model read them in the task text, or "none"'):
        planner.plan("Open the fridge.", SamplingParams(max_tokens=8), goal="guess")
    with pytest.raises(OrinError, match='feasibility "off" simulates nothing'):
        planner.plan("Open the fridge.", SamplingParams(max_tokens=8), goal="infer", feasibility="off")
    text = Planner(engine, environment_from_dict({"name": "words", "text": "A kitchen with a fridge."}))
    try:
        with pytest.raises(OrinError, match="plain text"):
            text.plan("Open the fridge.", SamplingParams(max_tokens=8), goal="infer", constrained=False)
    finally:
        engine.unpin(text.pin)


def test_a_fact_read_that_contradicts_an_earlier_one_is_left_out_and_the_answer_says_so(engine, monkeypatch):
    """A goal read from the task never contradicts itself (a goal that can never be reached had the
    search run to the deadline): the later fact goes, and the answer says which and why. The goal
    grammar here allows only a contradictory goal, so the real engine must write one."""
    monkeypatch.setattr(goal_infer, "goal_grammar", lambda env, only, max_facts, cue=None: (
        'start: "open(fridge)\\nclosed(fridge)\\nsaid\\n"\n'))
    p = Planner(engine, load_environment(EXAMPLE_HOME_PATH))  # its own: the grammar is kept per home
    try:
        plan = p.plan("Open the fridge.", SamplingParams(max_tokens=32), speculation="none", goal="infer",
                      deadline_s=60)
    finally:
        engine.unpin(p.pin)
    assert plan.goal_inferred == ["open(fridge)", "said"]
    assert plan.goal_dropped == ["closed(fridge): contradicts open(fridge) (fridge cannot be open and closed at "
                                 "once), left out"]
    assert plan.goal_reached is True and plan.search["source"] in ("model", "search")  # reachable once it went


def test_a_sampled_candidate_aims_at_the_goal_read_once(planner, monkeypatch):
    """The model's further candidates plan to the goal already read (not read again), and the answer
    says it whichever candidate or the search found the plan."""
    seen = []
    finish_one = planner.finish_one

    def spy(run, prefix):
        seen.append(run.inferred)
        return finish_one(run, prefix)
    monkeypatch.setattr(planner, "finish_one", spy)
    # a goal the tiny model's first plan does not reach: "infer" over a task that names the remote only
    plan = planner.plan("Put the remote on the sofa.", SamplingParams(max_tokens=16), speculation="none",
                        goal="infer", deadline_s=60)
    assert plan.goal_inferred and seen[0] is not None
    assert all(s is seen[0] for s in seen), seen  # every candidate: the same inferred goal
    if not plan.search["reason"].startswith("the model's plan"):
        assert len(seen) == 2  # the request's plan, then one sampled candidate


def test_a_narrowed_goal_names_every_target_the_task_mentions(engine):
    """The goal may not end before each thing the task names (not a room, not a source) is in a fact;
    which kind of fact and which pairing stays the model's."""
    env = load_home("bungalow")
    task = "Put the book on the desk, then turn on the desk lamp"
    g = Grammar.lark(engine.vocabulary(), goal_grammar(env, mentioned(env, task)))
    end = min(engine.eos_ids)

    def ends_after(text):
        c = g.constraint()
        ids = engine.encode(text)
        assert c.valid_prefix(ids) == len(ids), text
        for tok in ids:
            c.accept(tok)
        return end in c.allowed().nonzero().flatten().tolist()
    assert not ends_after("at(book, desk)")  # the lamp is left out
    assert not ends_after("on(desk_lamp)\nholding(book)")  # the desk
    assert ends_after("at(book, desk)\non(desk_lamp)")
    assert ends_after("on(desk_lamp)\nat(book, desk)")  # any order
    assert ends_after("holding(book)\nrobot_at(desk)\noff(desk_lamp)")  # any kinds: the model's choice
    ids = engine.encode("said\nsaid\nat(book, desk)")  # no room left for the lamp
    assert g.constraint().valid_prefix(ids) < len(ids)
    # a room the task names is where things happen, not a target: "said" alone may end
    room = mentioned(env, "Tell the people in the kitchen that dinner is ready.")
    assert room == {"kitchen"}
    gr = Grammar.lark(engine.vocabulary(), goal_grammar(env, room)).constraint()
    for tok in engine.encode("said"):
        gr.accept(tok)
    assert end in gr.allowed().nonzero().flatten().tolist()
