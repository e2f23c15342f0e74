"""Goals from the task text: the model translates a task into goal facts (LLM+P's division of
labour: the model reads the words, the simulator and the search plan to the facts).

The facts are decoded under a grammar built from the home (`goal_grammar`): each fact is one of
planning/home/goals.py's predicates over things of the right sort (at(object, place), on(device),
open(openable place), done(other action, thing), ...), one per line. When the task names things of
the home (goal_words.py `mentioned`), the grammar allows only those: a goal's things are the task's
own in every calibration task; a thing named as a source ("from the bathroom", "out of the
cupboard") is left out, for what the goal is about ends somewhere else; and the goal may not end
before every other thing it mentions, rooms aside, is in some fact (_covering). The task's verbs and
prepositions narrow it further (goal_words.py `cues`): on/off and open/closed only as a verb says,
said only (and then surely) when the task asks to be told, nothing left in hand when the task names
where something goes, an object only at the place named after it, and an object to be brought to
the speaker held and handed over (holding and done of a give action, both) where the speaker says
they are (robot_at). The few-shot turns are one short example per
fact kind in the home's own names (kind_examples) and the home's own examples, each with the goal
its plan makes true by simulation (goals.py goal_of_plan), rendered after a system message that
holds the home, so the home and the examples stay one cached prefix and a request computes only
its task.
"""

from __future__ import annotations

import json
from typing import Optional

from ...errors import OrinError
from . import Environment, format_call, parse_call
from .goal_words import Cues, allowed_by, give_actions
from .goals import goal_of_plan
from .render import system_message
from .steps import check_steps

MAX_FACTS = 3  # the most facts a goal is decoded with (calibration's goals have one to three)
GOAL_MAX_TOKENS = 64  # three facts of long names fit

GOAL_SYSTEM_PROMPT = (
    "You translate a home robot's task into its goal: the facts that are true once the task is done.\n"
    "Answer with one fact per line, using only the names of this home:\n"
    "at(object, place): the object lies at the place; holding(object): the robot holds it; "
    "robot_at(place); open(place); closed(place); on(device); off(device); "
    "done(action, thing): the action was done there; said: the robot told the people something.\n"
    "Write nothing else."
)


def _alt(names) -> str:
    return " | ".join(json.dumps(n) for n in sorted(set(names)))


def goal_grammar(env: Environment, only: Optional[set[str]] = None, max_facts: int = MAX_FACTS,
                 cue: Optional[Cues] = None) -> str:
    """Lark text for a goal of `env`: 1 to `max_facts` facts, one a line. `only`: the things a fact
    may name (mentioned(); a predicate whose sort has none of them is left out); None or empty:
    every thing of the home. `cue`: with `only`, the facts the task's words allow (cues())."""
    if env.is_text:
        raise OrinError(f"environment {env.name!r} is plain text: a goal needs rooms, objects and actions to name")
    if max_facts < 1:
        raise OrinError(f"a goal has at least one fact; max_facts is {max_facts}")
    places, objects = env.names("place"), env.names("object")
    devices, openable = env.names("device"), sorted(env.openable_places())
    if only:
        def keep(names):
            return [n for n in names if n in only]
        places, objects, devices, openable = keep(places), keep(objects), keep(devices), keep(openable)
    sorts = {"place": places, "object": objects, "device": devices, "openable": openable}
    facts = ['"said"']
    if objects and places:
        facts.append('"at(" object ", " place ")"')
    if objects:
        facts.append('"holding(" object ")"')
    if places:
        facts.append('"robot_at(" place ")"')
    if openable:
        facts += ['"open(" openable ")"', '"closed(" openable ")"']
    if devices:
        facts += ['"on(" device ")"', '"off(" device ")"']
    for a in env.actions:
        if a.effective_kind != "other":  # not narrowed by mentions: "bring it to me" is done(give, it)
            continue
        if not a.args or a.args[0] == "text":
            facts.append(f'"done({a.name})"')
        elif sorts.get(a.args[0]):
            facts.append(f'"done({a.name}, " {a.args[0]} ")"')
    lines = [f"{sort}: {_alt(names)}" for sort, names in sorts.items() if names]
    covering = _covering(env, sorts, only, max_facts, cue) if only else None
    if covering:
        return "\n".join(covering) + "\n"
    lines = [f'start: fact ("\\n" fact){{0,{max_facts - 1}}} "\\n"?', "fact: " + " | ".join(facts)] + lines
    return "\n".join(lines) + "\n"


def _covering(env: Environment, sorts: dict, only: set[str], max_facts: int,
              cue: Optional[Cues] = None) -> Optional[list[str]]:
    """Rules for goals that name every target the task mentions (an object, a device or a place that is
    no room; a room is where things happen, "in the kitchen", seldom a goal's thing), in facts of the
    kinds goal_grammar allows. The model still picks the kinds and the pairings; it only may not end
    before each target is in some fact (on the dev subset it left out the second of two). The state
    of a rule is the set of targets named so far and the facts left; None when the targets cannot all
    be named in `max_facts` facts."""
    rooms = {r.name for r in env.rooms}
    targets = frozenset(n for n in only if n not in rooms)
    said_target = cue is not None and cue.said
    if said_target:
        targets |= {"said"}  # the fact said is a target too: the task asked to be told
    handed = set(cue.handover) & targets if cue is not None else set()
    gives = set(give_actions(env)) if handed else set()
    # an object to bring to the speaker is held and handed over, where the speaker is when the task
    # says so (a room too, then): a target each, a fact each
    targets |= {f"hold:{o}" for o in handed} | {f"give:{o}" for o in handed}
    if handed and cue.speaker in only:
        targets |= {cue.speaker}
    if not targets:
        return None
    allow = allowed_by(cue, env)
    # every fact, grouped by the targets it names, each one literal (a fact's text is no prefix of
    # another's); those that name none are `plain`
    by_cover: dict[frozenset, list[str]] = {frozenset(): []}

    def add(pred: str, args: tuple, covered) -> None:
        if allow(pred, args):
            text = pred if pred == "said" else f"{pred}({', '.join(args)})"
            by_cover.setdefault(frozenset(covered) & targets, []).append(text)
    add("said", (), {"said"})
    pairs = [("holding", "object"), ("robot_at", "place"), ("open", "openable"), ("closed", "openable"),
             ("on", "device"), ("off", "device")]
    for pred, sort in pairs:
        for n in sorts[sort]:
            add(pred, (n,), {n, f"hold:{n}"} if pred == "holding" else {n})
    for o in sorts["object"]:
        for p in sorts["place"]:
            add("at", (o, p), {o, p})
    for a in env.actions:
        if a.effective_kind != "other":
            continue
        if not a.args or a.args[0] == "text":
            add("done", (a.name,), ())
        for n in (sorts.get(a.args[0]) or []) if a.args else []:
            add("done", (a.name, n), {n, f"give:{n}"} if a.name in gives else {n})
    plain = by_cover.pop(frozenset())
    by_cover = {c: facts for c, facts in by_cover.items() if facts}
    covers = sorted(by_cover, key=lambda c: sorted(c))
    # a target no allowed fact names (a device the task mentions without a switch verb) is not asked for
    targets = targets & frozenset().union(*covers) if covers else frozenset()
    if not targets:
        return None

    def can(left: frozenset, k: int) -> bool:  # `left` can be named in k facts
        return not left or (k > 0 and any(c & left and can(left - c, k - 1) for c in covers))
    if not can(targets, max_facts):
        return None
    names: dict[tuple, str] = {}

    def rule(left: frozenset, k: int) -> str:  # after a fact: k facts may follow, `left` still unnamed
        key = (left, k)
        if key in names:
            return names[key]
        name = names[key] = f"g{len(names)}"
        alts = ['"\\n"?'] if not left else []
        if k > 0:
            if plain and (not left or can(left, k - 1)):
                alts.append(f'"\\n" plain {rule(left, k - 1)}')
            for i, c in enumerate(covers):
                if can(left - c, k - 1):
                    alts.append(f'"\\n" cover{i} {rule(left - c, k - 1)}')
        body.append(f"{name}: " + " | ".join(alts))
        return name
    body: list[str] = []
    first = [f"plain {rule(targets, max_facts - 1)}"] if plain and can(targets, max_facts - 1) else []
    first += [f"cover{i} {rule(targets - c, max_facts - 1)}" for i, c in enumerate(covers)
              if can(targets - c, max_facts - 1)]
    return (["start: " + " | ".join(first)] + body
            + [f"cover{i}: " + _alt(by_cover[c]) for i, c in enumerate(covers)]
            + (["plain: " + _alt(plain)] if plain else []))


def goal_examples(env: Environment) -> list[tuple[str, list[str]]]:
    """The home's examples as (task, goal facts): the facts each example plan makes true from the
    home's state, by simulation. An example whose plan changes nothing the goal facts can say is
    left out."""
    out = []
    for ex in env.examples:
        steps, rejected = check_steps("\n".join(ex.plan), env)
        if rejected or not steps:
            continue
        facts = goal_of_plan(env, steps, env.state)
        if facts:
            out.append((ex.task, facts))
    return out


def _words(name: str) -> str:
    return name.replace("_", " ")


def kind_examples(env: Environment) -> list[tuple[str, list[str]]]:
    """A short example per fact kind the home declares, in its own names: a task worded plainly and its
    goal (an object put on a place of another room, a device off and one on, a place closed, and a
    task of two facts). The home's own examples rarely show every kind. No `said` or `done` example:
    on the dev subset the embedded model then wrote them for tasks that asked neither."""
    rooms = list(env.rooms)
    objects = [(o, r.name) for r in rooms for o in r.objects]
    places = [(p, r.name) for r in rooms for p in r.places]
    # only what the home declares: a home that lists no devices lets anything switch, which no
    # example should suggest
    devices = [d for r in rooms for d in r.devices or []]
    openable = [p for r in rooms for p in r.openable or []]
    out: list[tuple[str, list[str]]] = []
    spots = [p for p, _ in places if p not in devices and p not in openable] or [p for p, _ in places]
    if objects and spots:
        o, home_room = objects[0]
        p = next((q for q, r in places if r != home_room and q in spots), spots[0])
        out.append((f"Put the {_words(o)} on the {_words(p)}.", [f"at({o}, {p})"]))
    if devices:
        out.append((f"Turn off the {_words(devices[0])}.", [f"off({devices[0]})"]))
        d = devices[1] if len(devices) > 1 else devices[0]
        out.append((f"Switch on the {_words(d)}.", [f"on({d})"]))
    if openable:
        out.append((f"Close the {_words(openable[0])}.", [f"closed({openable[0]})"]))
    if len(objects) > 1 and devices and spots:
        o, home_room = objects[-1]
        p = next((q for q, r in places if r != home_room and q in spots), spots[0])
        d = devices[-1]
        out.append((f"Turn off the {_words(d)}, then bring the {_words(o)} to the {_words(p)}.",
                    [f"at({o}, {p})", f"off({d})"]))
    return out


def goal_task_message(task: str) -> dict[str, str]:
    return {"role": "user", "content": f"Task: {' '.join(str(task).split())}\nGoal:"}


def goal_prefix_messages(env: Environment) -> list[dict[str, str]]:
    """The system message (what a goal is, the home), then one example per fact kind and the home's
    examples, as task/goal turns."""
    home = system_message(env)["content"].split("\n\n", 1)[1]  # the plan prompt's rendering of the home
    messages = [{"role": "system", "content": f"{GOAL_SYSTEM_PROMPT}\n\n{home}"}]
    for task, facts in kind_examples(env) + goal_examples(env):
        messages.append(goal_task_message(task))
        messages.append({"role": "assistant", "content": "\n".join(facts)})
    return messages


def goal_lines(text: str) -> list[str]:
    """The facts a decoded goal's text holds, one a line, each once, written as parse_goal reads them."""
    out: list[str] = []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        call = parse_call(line)
        fact = "said" if line in ("said", "said()") else (format_call(*call) if call else line)
        if fact not in out:
            out.append(fact)
    return out
