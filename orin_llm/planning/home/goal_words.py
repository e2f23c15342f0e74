"""What a task's words say of its goal, before the model reads it: the home's things it mentions
(`mentioned`: a name's words in the text, longest names first, so "desk lamp" is the lamp and not the
desk; a thing named as a source, "from the bathroom", left out) and the cues of its verbs and
prepositions (`cues`: which switch and open/close facts, whether to say something, whether
something is to stay in hand, where each object goes). goal_text.py narrows the goal grammar by them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from . import Environment

# a thing the task names as where something comes from ("from the bathroom", "out of the cupboard"):
# not what the goal is about (what is taken out of a cupboard ends somewhere else, the cupboard shut)
SOURCE = re.compile(r" (?:from|out of)(?: the| my| your)? $")


def mentioned(env: Environment, text: str, sources_out: bool = True) -> set[str]:
    """The names of `env`'s things (rooms, places, objects, devices) that `text` mentions: a name's
    words, in order, as whole words (a plural s allowed), longest names first; a span of the text
    names one thing. `sources_out`: leave out a thing named as a source ("from the bathroom")."""
    return set(mention_positions(env, text, sources_out))


def _low(text: str) -> str:
    return " " + re.sub(r"[^a-z0-9]+", " ", text.lower()) + " "


def _name_pattern(name: str) -> Optional[re.Pattern]:
    """`name`'s words, in order, as whole words of lower-case text between spaces (a plural s
    allowed), the space after them included; None for a name with no words."""
    words = [w for w in re.split(r"[^a-z0-9]+", name.lower()) if w]
    return re.compile(r" " + r" ".join(map(re.escape, words)) + r"(?:s|es)? ") if words else None


def mention_positions(env: Environment, text: str, sources_out: bool = True) -> dict[str, int]:
    """mentioned()'s things, each with where it is first named in `_low(text)`."""
    low = _low(text)
    names = set(env.names("place")) | set(env.names("object")) | set(env.names("device"))
    found: dict[str, int] = {}
    for name in sorted(names, key=lambda n: (-len(n.split("_")), -len(n), n)):
        pattern = _name_pattern(name)
        m = pattern.search(low) if pattern else None
        if m is None:
            continue
        if not (sources_out and SOURCE.search(low[:m.start() + 1])):
            found[name] = m.start()
        low = low[:m.start()] + " " + "#" * (m.end() - m.start() - 2) + " " + low[m.end():]
    return found


@dataclass(frozen=True)
class Cues:
    """What the task's words say of the facts a goal may hold, beyond the things it mentions
    (hashable: a goal grammar is compiled per set of things and cues). A switch verb ("turn off",
    "switch on", "start") before a device in the same clause: on/off of it only as the verb says; an
    open/close verb before a place: open/closed of it likewise; no such verb: neither. `said`: the
    task asks the robot to tell or say something. `destination`: the task names a place (not a room,
    a source, or a thing it switches, opens or closes) where something is to end up, so nothing is
    to stay in the hand (holding, or an `other` action on an object: give). `actions`: the `other`
    actions on places whose name or description has a word of the task (wipe: "clean"). `at`: for an
    object the task names before some place, the one place it may lie at: the first one named after
    it ("the wallet on the key hook and the backpack on the coat rack"). `handover`: the objects the
    task asks to be brought to the speaker ("bring me the scarf", "bring the scarf to me", "hand me
    the umbrella"): held and handed over (holding and done of a give action), never left at a place,
    not even the room the speaker says they are in. `speaker`: the room or place the task says the
    speaker is in or at ("I'm in the bathroom"), where a handed-over object is taken to."""

    switch: frozenset = frozenset()  # (device, "on" | "off")
    opening: frozenset = frozenset()  # (place, "open" | "closed")
    said: bool = False
    destination: bool = False
    actions: frozenset = frozenset()
    at: frozenset = frozenset()  # (object, place)
    handover: frozenset = frozenset()  # objects
    speaker: Optional[str] = None


_INTO = re.compile(r"(?<!turn)(?<!switch)(?<!power) (?:to|in|into|on|onto)(?: the| my| your)? $")
_SWITCH = re.compile(r" (turn|switch|power|start|stop)(?:s|ed|ing)? ")
_OPENING = re.compile(r" (open|close|shut)(?:s|ed|ing)? ")
_SAY = re.compile(r" (?:tell|say|announce|inform|let (?:me|us|them|everyone) know)")
_HAND_ME = re.compile(r" (?:bring|hand|give|fetch|get|pass)(?:s)? (?:me|us) ")  # the object follows
_NEAR = re.compile(r"(?:[a-z0-9]+ ){0,2}")  # between "bring me" and its object: "the", "the red"
_BRING = re.compile(r" (?:bring|hand|give|fetch|pass|take|carry)(?:s)? ")
_TO_ME = re.compile(r" (?:over |back )?to (?:me|us) ")  # right after the object: "bring the scarf to me"
_SPEAKER = re.compile(r" (?:i am|i m|we are|we re) (?:in|at)(?: the| my| our)? $")
_GIVE_WORDS = {"give", "hand", "handover", "pass", "deliver"}
_STOP = {"the", "and", "for", "from", "with", "that", "this", "into", "onto", "next", "held", "object", "robot",
         "person", "people", "place", "something", "someone", "out", "a", "an", "to", "of", "on", "in", "at"}


def _name_at(name: str, clause: str) -> int:
    """Where `name`'s words start in `clause` (lower-case words between spaces), or -1."""
    pattern = _name_pattern(name)
    m = pattern.search(clause) if pattern else None
    return m.start() if m else -1


def cues(env: Environment, text: str, only: Optional[set[str]] = None) -> Cues:
    """The Cues of `text` in `env`; `only`: the things it mentions (mentioned())."""
    where = mention_positions(env, text)
    only = set(where) if only is None else only
    low = " " + re.sub(r"[^a-z0-9.,;:!?]+", " ", text.lower()) + " "
    clauses = [" " + " ".join(c.split()) + " " for c in re.split(r"[.,;:!?]| then ", low)]
    devices, openable = set(env.names("device")), env.openable_places()
    switch, opening, handover = set(), set(), set()
    for c in clauses:
        for m in _SWITCH.finditer(c):
            verb = m.group(1)
            way = {"start": "on", "stop": "off"}.get(verb)
            if way is None:
                after = re.search(r" (on|off) ", c[m.start():])
                if after is None:
                    continue
                way = after.group(1)
            switch |= {(d, way) for d in devices & only if _name_at(d, c[m.start():]) >= 0}
        for m in _OPENING.finditer(c):
            way = "open" if m.group(1) == "open" else "closed"
            opening |= {(p, way) for p in openable & only if _name_at(p, c[m.start():]) >= 0}
        handover |= _handed(env, c, only)
    rooms = {r.name for r in env.rooms}
    places = set(env.names("place"))
    flat = _low(text)
    # a place named after "to", "in", "on" (not "turn on"): something ends there
    destination = any(t in places and t not in rooms and t in where and _INTO.search(flat[:where[t] + 1])
                      for t in only)
    at = set()
    for o in set(env.names("object")) & set(where):
        after = sorted((where[p], p) for p in places & set(where) if where[p] > where[o])
        if after:
            at.add((o, after[0][1]))
    words = set(low.replace(".", " ").split())
    actions = set()
    for a in env.actions:
        if a.effective_kind == "other" and a.args and a.args[0] not in ("text", "object"):
            said_words = set(re.split(r"[^a-z]+", f"{a.name} {a.description or ''}".lower())) - _STOP
            if said_words & words:
                actions.add(a.name)
    said = bool(_SAY.search(low)) and any(a.effective_kind == "say" for a in env.actions)
    at = {(o, p) for o, p in at if o not in handover}
    speaker = next((p for p in sorted(places & set(where), key=where.get) if _SPEAKER.search(flat[:where[p] + 1])),
                   None)
    return Cues(frozenset(switch), frozenset(opening), said, destination, frozenset(actions), frozenset(at),
                frozenset(handover), speaker)


def _handed(env: Environment, clause: str, only: set[str]) -> set[str]:
    """The objects of `only` that `clause` asks to be brought to the speaker: named at most two words
    after "bring me", "hand me" (...: "bring me the red mug", not the book of "... and put the book
    away"), or right before "to me" after "bring", "take" (...)."""
    found = set()
    for o in set(env.names("object")) & only:
        pattern = _name_pattern(o)
        for m in pattern.finditer(clause) if pattern else ():
            before, after = clause[:m.start() + 1], clause[m.end() - 1:]
            asked = [h for h in _HAND_ME.finditer(before) if _NEAR.fullmatch(before[h.end():])]
            if asked or (_BRING.search(before) and _TO_ME.match(after)):
                found.add(o)
    return found


_PRONOUN = re.compile(r" (it|them|these|those) ")


def unresolved_pronouns(env: Environment, text: str) -> list[str]:
    """The pronouns of `text` ("it", "them", ...) before which it names no thing of `env` that they could
    stand for: a goal read from such a task may be about another thing than the speaker's ("Turn it
    off."), so the answer says so instead of reading it as if it were sure."""
    low = _low(text)
    where = mention_positions(env, text, sources_out=False)
    rooms = {r.name for r in env.rooms}
    firsts = [at for name, at in where.items() if name not in rooms]
    return [m.group(1) for m in _PRONOUN.finditer(low) if not any(at < m.start() for at in firsts)]


def give_actions(env: Environment) -> list[str]:
    """The `other` actions on an object that hand it over: those whose name or description says
    give, hand or pass; without such words, every `other` action on an object."""
    on_objects = [a for a in env.actions if a.effective_kind == "other" and a.args and a.args[0] == "object"]
    named = [a.name for a in on_objects
             if _GIVE_WORDS & set(re.split(r"[^a-z]+", f"{a.name} {a.description or ''}".lower()))]
    return named or [a.name for a in on_objects]


def allowed_by(c: Optional[Cues], env: Environment):
    """Whether a fact (predicate, args) is allowed by the cues `c` (None: every fact)."""
    if c is None:
        return lambda pred, args: True
    kinds = {a.name: a for a in env.actions}

    def allow(pred: str, args: tuple) -> bool:
        if pred in ("on", "off"):
            return (args[0], pred) in c.switch
        if pred in ("open", "closed"):
            return (args[0], pred) in c.opening
        if pred == "said":
            return c.said
        if pred == "at" and args[0] in c.handover:
            return False
        if pred == "at" and any(o == args[0] for o, _ in c.at):
            return (args[0], args[1]) in c.at
        if pred == "holding":
            return args[0] in c.handover or not c.destination
        if pred == "done" and len(args) == 2:
            a = kinds[args[0]]
            if a.args[0] == "object":
                return args[1] in c.handover or not c.destination
            return args[0] in c.actions
        return True
    return allow
