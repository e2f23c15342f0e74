"""Generate the calibration homes and home-planning tasks (deterministic).

    python calibration/generate.py [--out calibration] [--seed 0]

Writes ``<out>/homes/<name>.yaml`` (one Environment per home, in the orin_llm
environment schema), ``<out>/calib.jsonl`` and ``<out>/heldout.jsonl`` (one task a
line: id, home, task, reference_plan). The same seed gives byte-identical files.
Held-out rule: HELDOUT_HOMES whole homes, picked by the seed, go to heldout.jsonl;
every other home's tasks go to calib.jsonl, so no (home, task) pair is in both.

Standard library + PyYAML only: this script does not import orin_llm.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

import yaml

HOME_NAMES = [
    "city_flat", "garden_house", "studio", "family_house", "cottage",
    "loft", "townhouse", "bungalow", "penthouse", "farmhouse",
    "duplex", "cabin", "villa", "student_flat", "row_house",
]  # fmt: skip
TASKS_PER_HOME = 20
HELDOUT_HOMES = 3

# Place kinds: S surface (place on/in), C container (open, place in, close),
# D device (switch on/off), W door or window (open/close). "CD" = both C and D.
ROOMS: dict[str, tuple[list[tuple[str, str]], list[str]]] = {
    "hallway": (
        [("front_door", "W"), ("shoe_rack", "S"), ("coat_rack", "S"), ("key_hook", "S"),
         ("shoe_cabinet", "C"), ("hallway_light", "D")],
        ["umbrella", "keys", "shoes", "backpack", "scarf", "wallet"],
    ),
    "kitchen": (
        [("counter", "S"), ("kitchen_table", "S"), ("sink", "S"), ("fridge", "C"),
         ("kitchen_cabinet", "C"), ("pantry", "C"), ("dishwasher", "CD"), ("microwave", "CD"),
         ("oven", "CD"), ("kettle", "D"), ("coffee_machine", "D"), ("toaster", "D")],
        ["mug", "plate", "bowl", "glass", "apple", "banana", "milk", "juice", "bread", "soup",
         "cereal_box", "spoon"],
    ),
    "living_room": (
        [("sofa", "S"), ("coffee_table", "S"), ("bookshelf", "S"), ("tv_stand", "S"),
         ("armchair", "S"), ("tv", "D"), ("floor_lamp", "D"), ("radio", "D"),
         ("living_room_window", "W"), ("cupboard", "C")],
        ["remote", "book", "blanket", "magazine", "cushion", "newspaper", "board_game", "wallet"],
    ),
    "dining_room": (
        [("dining_table", "S"), ("sideboard", "C"), ("dining_lamp", "D"), ("dining_chair", "S")],
        ["napkins", "candle", "vase", "salt_shaker", "placemat"],
    ),
    "bedroom": (
        [("bed", "S"), ("nightstand", "S"), ("wardrobe", "C"), ("dresser", "C"),
         ("bedside_lamp", "D"), ("ceiling_fan", "D"), ("bedroom_window", "W")],
        ["phone", "glasses", "pillow", "jacket", "watch", "slippers", "book"],
    ),
    "bathroom": (
        [("washbasin", "S"), ("bathroom_cabinet", "C"), ("towel_rail", "S"), ("bathtub", "S"),
         ("laundry_basket", "S"), ("bathroom_fan", "D"), ("mirror_light", "D")],
        ["towel", "toothbrush", "soap", "shampoo", "hair_dryer", "socks"],
    ),
    "office": (
        [("desk", "S"), ("filing_cabinet", "C"), ("office_shelf", "S"), ("desk_lamp", "D"),
         ("computer", "D"), ("printer", "D")],
        ["laptop", "notebook", "pen", "stapler", "charger", "phone", "glasses"],
    ),
    "laundry_room": (
        [("washing_machine", "CD"), ("dryer", "CD"), ("ironing_board", "S"), ("laundry_shelf", "S"),
         ("laundry_light", "D")],
        ["detergent", "shirt", "bed_sheet", "socks", "towel"],
    ),
    "kids_room": (
        [("kids_bed", "S"), ("toy_box", "C"), ("play_table", "S"), ("night_light", "D"),
         ("kids_wardrobe", "C")],
        ["teddy_bear", "toy_car", "ball", "crayons", "puzzle", "picture_book"],
    ),
    "garage": (
        [("workbench", "S"), ("tool_cabinet", "C"), ("garage_door", "W"), ("garage_light", "D"),
         ("storage_shelf", "S")],
        ["hammer", "screwdriver", "flashlight", "bicycle_helmet", "tape_measure"],
    ),
    "balcony": (
        [("balcony_door", "W"), ("balcony_table", "S"), ("plant_shelf", "S"), ("balcony_light", "D")],
        ["watering_can", "sunglasses", "plant_pot", "deck_chair_cushion"],
    ),
    "guest_room": (
        [("guest_bed", "S"), ("guest_wardrobe", "C"), ("reading_lamp", "D"), ("guest_window", "W")],
        ["suitcase", "spare_pillow", "alarm_clock"],
    ),
}  # fmt: skip
ROOM_ORDER = list(ROOMS)
EXTRA_ROOMS = ["dining_room", "office", "laundry_room", "kids_room", "garage", "balcony", "guest_room"]

# Where an object belongs when it is put away (first present one is used).
OBJECT_HOMES: dict[str, list[str]] = {
    "umbrella": ["shoe_cabinet", "coat_rack"], "keys": ["key_hook", "shoe_cabinet"],
    "shoes": ["shoe_rack", "shoe_cabinet"], "backpack": ["coat_rack", "shoe_rack"],
    "scarf": ["coat_rack", "wardrobe"], "wallet": ["key_hook", "dresser", "desk"],
    "mug": ["kitchen_cabinet", "dishwasher", "sink"], "plate": ["kitchen_cabinet", "dishwasher", "sink"],
    "bowl": ["kitchen_cabinet", "dishwasher", "sink"], "glass": ["kitchen_cabinet", "dishwasher", "sink"],
    "apple": ["fridge", "pantry", "counter"], "banana": ["pantry", "counter"],
    "milk": ["fridge"], "juice": ["fridge"], "bread": ["pantry", "kitchen_cabinet"],
    "soup": ["fridge", "pantry"], "cereal_box": ["pantry", "kitchen_cabinet"],
    "spoon": ["kitchen_cabinet", "dishwasher", "sink"],
    "remote": ["tv_stand", "coffee_table"], "book": ["bookshelf", "office_shelf", "nightstand"],
    "blanket": ["sofa", "cupboard", "wardrobe"], "magazine": ["coffee_table", "bookshelf"],
    "cushion": ["sofa", "armchair"], "newspaper": ["coffee_table", "cupboard"],
    "board_game": ["cupboard", "bookshelf"],
    "napkins": ["sideboard"], "candle": ["dining_table", "sideboard"], "vase": ["dining_table", "sideboard"],
    "salt_shaker": ["dining_table", "kitchen_cabinet"], "placemat": ["sideboard", "dining_table"],
    "phone": ["nightstand", "desk"], "glasses": ["nightstand", "desk"], "pillow": ["bed"],
    "jacket": ["wardrobe", "coat_rack"], "watch": ["nightstand", "dresser"],
    "slippers": ["bed", "shoe_rack"],
    "towel": ["towel_rail", "laundry_basket", "washing_machine"],
    "toothbrush": ["washbasin", "bathroom_cabinet"], "soap": ["washbasin", "bathroom_cabinet"],
    "shampoo": ["bathtub", "bathroom_cabinet"], "hair_dryer": ["bathroom_cabinet"],
    "socks": ["laundry_basket", "washing_machine", "dresser"],
    "laptop": ["desk"], "notebook": ["desk", "office_shelf"], "pen": ["desk", "filing_cabinet"],
    "stapler": ["desk", "filing_cabinet"], "charger": ["desk", "nightstand"],
    "detergent": ["laundry_shelf"], "shirt": ["washing_machine", "wardrobe", "dresser"],
    "bed_sheet": ["washing_machine", "bed"],
    "teddy_bear": ["kids_bed", "toy_box"], "toy_car": ["toy_box"], "ball": ["toy_box"],
    "crayons": ["play_table", "toy_box"], "puzzle": ["play_table", "toy_box"],
    "picture_book": ["kids_bed", "play_table"],
    "hammer": ["tool_cabinet", "workbench"], "screwdriver": ["tool_cabinet", "workbench"],
    "flashlight": ["storage_shelf", "tool_cabinet"], "bicycle_helmet": ["storage_shelf", "coat_rack"],
    "tape_measure": ["tool_cabinet", "workbench"],
    "watering_can": ["plant_shelf"], "sunglasses": ["balcony_table", "nightstand"],
    "plant_pot": ["plant_shelf", "balcony_table"], "deck_chair_cushion": ["balcony_table"],
    "suitcase": ["guest_wardrobe"], "spare_pillow": ["guest_bed", "guest_wardrobe"],
    "alarm_clock": ["nightstand", "guest_bed"],
}  # fmt: skip
IN_PLACES = ["sink", "washbasin", "bathtub", "laundry_basket"]  # surfaces you put things "in"
# Surfaces that only suit particular things: never the target of a generic "bring X to Y".
SPECIAL_SURFACES = IN_PLACES + [
    "towel_rail", "key_hook", "coat_rack", "shoe_rack", "ironing_board", "plant_shelf", "dining_chair",
]  # fmt: skip
HEATABLE = ["soup", "bread", "milk"]
WASHABLE = ["towel", "socks", "shirt", "bed_sheet"]
DISHES = ["mug", "plate", "bowl", "glass", "spoon"]
MESSAGES = [
    "dinner is ready", "the laundry is done", "it is time to go", "the guests are here",
    "breakfast is ready", "it is time for bed", "the tea is ready", "the parcel has arrived",
]  # fmt: skip
DONE_MESSAGES = ["I am done", "All done", "The task is done"]

ACTION_TEXT = {
    "go_to": (["place"], ["move to a room or a place", "go to a room or a place"]),
    "pick": (["object"], ["pick up an object; the robot holds one object at a time", "pick up an object"]),
    "place": (["object", "place"], ["put the held object on or in a place", "put down the held object"]),
    "open": (["place"], ["open a door, cabinet or appliance", "open something"]),
    "close": (["place"], ["close a door, cabinet or appliance", "close something"]),
    "switch_on": (["device"], ["turn a device on", "switch a device on"]),
    "switch_off": (["device"], ["turn a device off", "switch a device off"]),
    "say": (["text"], ["say something out loud", "speak to the people at home"]),
    "wipe": (["place"], ["clean a surface", "wipe a surface clean"]),
    "give": (
        ["object"],
        ["hand the held object to the person next to the robot", "hand over the held object"],
    ),
}
BASE_ACTIONS = ["go_to", "pick", "place", "open", "close", "switch_on", "switch_off"]
OPTIONAL_ACTIONS = [("say", 0.75), ("give", 0.55), ("wipe", 0.4)]

ADJECTIVES = ["small", "bright", "quiet", "busy", "old", "modern", "cosy", "spacious"]


def words(name: str) -> str:
    return name.replace("_", " ")


def call(action: str, *args: str) -> str:
    return f"{action}({', '.join(args)})"


def say(text: str) -> str:
    return call("say", f'"{text}"')  # a text argument is a quoted string (orin_llm's plan grammar)


class Home:
    def __init__(self, name: str, rng: random.Random):
        self.name = name
        kinds = [t for t in ["hallway", "living_room", "bedroom"] if rng.random() < 0.8]
        room_types = ["kitchen", "bathroom", *kinds]
        extras = rng.sample(EXTRA_ROOMS, rng.randint(0, 3))
        while len(room_types) + len(extras) < 4:
            extras.append(rng.choice([r for r in EXTRA_ROOMS if r not in extras]))
        room_types += extras
        room_types.sort(key=ROOM_ORDER.index)

        self.rooms: list[tuple[str, list[str], list[str]]] = []
        self.kind: dict[str, str] = {}  # place -> kind
        self.place_room: dict[str, str] = {}
        self.obj_room: dict[str, str] = {}
        for rt in room_types:
            places_cat, objects_cat = ROOMS[rt]
            n = min(len(places_cat), rng.randint(3, 5))
            while True:
                chosen = rng.sample(places_cat, n)
                if any("S" in k for _, k in chosen):
                    break
            chosen.sort(key=places_cat.index)
            free = [o for o in objects_cat if o not in self.obj_room]
            objs = rng.sample(free, min(len(free), rng.randint(2, 4)))
            objs.sort(key=objects_cat.index)
            for p, k in chosen:
                self.kind[p] = k
                self.place_room[p] = rt
            for o in objs:
                self.obj_room[o] = rt
            self.rooms.append((rt, [p for p, _ in chosen], objs))

        self.actions = list(BASE_ACTIONS) + [a for a, prob in OPTIONAL_ACTIONS if rng.random() < prob]
        self.actions.sort(key=list(ACTION_TEXT).index)
        self.action_desc = {a: rng.choice(ACTION_TEXT[a][1]) for a in self.actions}
        self.description = (
            f"A {rng.choice(ADJECTIVES)} {words(name)} with {len(self.rooms)} rooms: "
            + ", ".join(words(r) for r, _, _ in self.rooms)
            + "."
        )
        self.examples: list[tuple[str, list[str]]] = []

    # --- queries -----------------------------------------------------------
    @property
    def room_names(self) -> list[str]:
        return [r for r, _, _ in self.rooms]

    @property
    def objects(self) -> list[str]:
        return [o for _, _, objs in self.rooms for o in objs]

    def places(self, kind: str) -> list[str]:
        return [p for _, ps, _ in self.rooms for p in ps if kind in self.kind[p]]

    def has(self, action: str) -> bool:
        return action in self.actions

    def dest_of(self, obj: str) -> str | None:
        for p in OBJECT_HOMES.get(obj, []):
            if p in self.kind:
                return p
        return None

    # --- plan pieces -------------------------------------------------------
    def fetch(self, obj: str, source: str | None = None) -> list[str]:
        if source is None:
            return [call("go_to", self.obj_room[obj]), call("pick", obj)]
        if "C" in self.kind[source]:
            return [call("go_to", source), call("open", source), call("pick", obj), call("close", source)]
        return [call("go_to", source), call("pick", obj)]

    def drop(self, obj: str, place: str, keep_open: bool = False) -> list[str]:
        if "C" in self.kind[place]:
            steps = [call("go_to", place), call("open", place), call("place", obj, place)]
            return steps if keep_open else steps + [call("close", place)]
        return [call("go_to", place), call("place", obj, place)]

    def opens(self, place: str) -> bool:
        """Containers, doors and windows open and close (the home's `openable` places)."""
        return "C" in self.kind[place] or "W" in self.kind[place]

    def tables(self) -> list[str]:
        """Surfaces where any object can be put down."""
        return [p for p in self.places("S") if p not in SPECIAL_SURFACES]

    def prep(self, place: str) -> str:
        return "in" if ("C" in self.kind[place] or place in IN_PLACES) else "on"

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "description": self.description,
            "rooms": [{"name": r, "places": _Flow(ps), "objects": _Flow(os),
                       **({"devices": _Flow([p for p in ps if "D" in self.kind[p]])}
                          if any("D" in self.kind[p] for p in ps) else {}),
                       **({"openable": _Flow([p for p in ps if self.opens(p)])}
                          if any(self.opens(p) for p in ps) else {})}
                      for r, ps, os in self.rooms],
            "actions": [
                {"name": a, "args": _Flow(ACTION_TEXT[a][0]), "description": self.action_desc[a]}
                for a in self.actions
            ],
            "examples": [{"task": t, "plan": list(p)} for t, p in self.examples],
            # The robot starts in the first room with an empty hand; nothing else is known.
            "state": {"robot_at": self.rooms[0][0]},
        }


# --- task families: each returns (task, plan) or None when it does not apply ---


def t_bring_to_place(h: Home, rng: random.Random):
    if not h.objects:
        return None
    obj = rng.choice(h.objects)
    dests = [p for p in h.tables() if h.place_room[p] != h.obj_room[obj]] or h.tables()
    if not dests:
        return None
    dest = rng.choice(dests)
    task = rng.choice([
        f"Bring the {words(obj)} to the {words(dest)}.",
        f"Take the {words(obj)} from the {words(h.obj_room[obj])} to the {words(dest)}.",
        f"Put the {words(obj)} {h.prep(dest)} the {words(dest)}.",
        f"Carry the {words(obj)} over to the {words(dest)}.",
    ])  # fmt: skip
    return task, h.fetch(obj) + h.drop(obj, dest)


def t_from_container(h: Home, rng: random.Random):
    cands = [
        (o, c)
        for o in h.objects
        for c in OBJECT_HOMES.get(o, [])
        if c in h.kind and "C" in h.kind[c] and h.place_room[c] == h.obj_room[o]
    ]
    dests = h.tables()
    if not cands or not dests:
        return None
    obj, src = rng.choice(cands)
    dest = rng.choice(dests)
    task = rng.choice([
        f"Get the {words(obj)} out of the {words(src)} and put it {h.prep(dest)} the {words(dest)}.",
        f"Take the {words(obj)} from the {words(src)} to the {words(dest)}.",
    ])  # fmt: skip
    return task, h.fetch(obj, src) + h.drop(obj, dest)


def t_bring_me(h: Home, rng: random.Random):
    if not h.has("give") or not h.objects:
        return None
    obj = rng.choice(h.objects)
    rooms = [r for r in h.room_names if r != h.obj_room[obj]]
    me = rng.choice(rooms)
    task = rng.choice([
        f"Bring me the {words(obj)}. I am in the {words(me)}.",
        f"I am in the {words(me)}, please bring me the {words(obj)}.",
        f"Can you bring the {words(obj)} to me? I'm in the {words(me)}.",
    ])  # fmt: skip
    return task, h.fetch(obj) + [call("go_to", me), call("give", obj)]


def t_put_away(h: Home, rng: random.Random):
    cands = [o for o in h.objects if h.dest_of(o)]
    if not cands:
        return None
    obj = rng.choice(cands)
    dest = h.dest_of(obj)
    assert dest is not None
    task = rng.choice([
        f"Put the {words(obj)} away {h.prep(dest)} the {words(dest)}.",
        f"The {words(obj)} belongs {h.prep(dest)} the {words(dest)}. Put it there.",
        f"Please put the {words(obj)} back {h.prep(dest)} the {words(dest)}.",
    ])  # fmt: skip
    return task, h.fetch(obj) + h.drop(obj, dest)


def t_tidy(h: Home, rng: random.Random):
    rooms = [r for r, _, objs in h.rooms if len([o for o in objs if h.dest_of(o)]) >= 2]
    if not rooms:
        return None
    room = rng.choice(rooms)
    objs = [o for o in h.objects if h.obj_room[o] == room and h.dest_of(o)]
    o1, o2 = rng.sample(objs, 2)
    d1, d2 = h.dest_of(o1), h.dest_of(o2)
    assert d1 is not None and d2 is not None
    if d1 == d2:
        return None
    task = (
        f"Tidy up the {words(room)}: put the {words(o1)} {h.prep(d1)} the {words(d1)} "
        f"and the {words(o2)} {h.prep(d2)} the {words(d2)}."
    )
    return task, h.fetch(o1) + h.drop(o1, d1) + h.fetch(o2) + h.drop(o2, d2)


def t_open_close(h: Home, rng: random.Random):
    cands = h.places("C") + h.places("W")
    if not cands:
        return None
    target = rng.choice(cands)
    verb = rng.choice(["open", "close"])
    task = rng.choice([f"{verb.capitalize()} the {words(target)}.", f"Please {verb} the {words(target)}."])
    return task, [call("go_to", target), call(verb, target)]


def t_switch(h: Home, rng: random.Random):
    devices = h.places("D")
    if not devices:
        return None
    dev = rng.choice(devices)
    on = rng.random() < 0.5
    word = rng.choice(["Turn", "Switch"])
    task = f"{word} {'on' if on else 'off'} the {words(dev)}."
    return task, [call("go_to", dev), call("switch_on" if on else "switch_off", dev)]


def t_switch_two(h: Home, rng: random.Random):
    devices = h.places("D")
    if len(devices) < 2:
        return None
    d1, d2 = rng.sample(devices, 2)
    on = rng.random() < 0.5
    act = "switch_on" if on else "switch_off"
    task = f"Turn {'on' if on else 'off'} the {words(d1)} and the {words(d2)}."
    return task, [call("go_to", d1), call(act, d1), call("go_to", d2), call(act, d2)]


def t_say(h: Home, rng: random.Random):
    if not h.has("say"):
        return None
    room = rng.choice(h.room_names)
    msg = rng.choice(MESSAGES)
    task = rng.choice([
        f"Go to the {words(room)} and tell everyone that {msg}.",
        f"Tell the people in the {words(room)} that {msg}.",
    ])  # fmt: skip
    return task, [call("go_to", room), say(msg[0].upper() + msg[1:])]


def t_wipe(h: Home, rng: random.Random):
    if not h.has("wipe"):
        return None
    surface = rng.choice(h.places("S"))
    task = rng.choice([f"Clean the {words(surface)}.", f"Wipe the {words(surface)}."])
    return task, [call("go_to", surface), call("wipe", surface)]


def t_appliance(h: Home, rng: random.Random):
    options = []
    if "dishwasher" in h.kind:
        options += [(o, "dishwasher", "start the dishwasher") for o in h.objects if o in DISHES]
    if "washing_machine" in h.kind:
        options += [(o, "washing_machine", "start the washing machine") for o in h.objects if o in WASHABLE]
    for heater in ("microwave", "oven"):
        if heater in h.kind:
            options += [(o, heater, f"turn on the {heater}") for o in h.objects if o in HEATABLE]
    if not options:
        return None
    obj, app, then = rng.choice(options)
    task = f"Put the {words(obj)} in the {words(app)} and {then}."
    return task, h.fetch(obj) + h.drop(obj, app) + [call("switch_on", app)]


def t_multi(h: Home, rng: random.Random):
    first = rng.choice([t_switch, t_open_close])(h, rng)
    second = rng.choice([t_bring_to_place, t_put_away, t_from_container])(h, rng)
    if first is None or second is None or ". " in second[0]:
        return None
    task = f"{first[0][:-1]}, then {second[0][0].lower()}{second[0][1:]}"
    plan = first[1] + second[1]
    if h.has("say") and rng.random() < 0.5:
        done = rng.choice(DONE_MESSAGES)
        task = f"{task[:-1]}, and tell me when you are done."
        plan = plan + [say(done)]
    return task, plan


FAMILIES = [
    (t_bring_to_place, 3), (t_from_container, 2), (t_bring_me, 2), (t_put_away, 3), (t_tidy, 2),
    (t_open_close, 2), (t_switch, 2), (t_switch_two, 1), (t_say, 1), (t_wipe, 1), (t_appliance, 1),
    (t_multi, 2),
]  # fmt: skip
EXAMPLE_FAMILIES = [t_from_container, t_put_away, t_switch, t_bring_me, t_open_close]


def make_tasks(h: Home, rng: random.Random, n: int, taken: list[str]) -> list[tuple[str, list[str]]]:
    funcs = [f for f, _ in FAMILIES]
    weights = [w for _, w in FAMILIES]
    out: list[tuple[str, list[str]]] = []
    seen = set(taken)
    for _ in range(5000):
        if len(out) == n:
            return out
        got = rng.choices(funcs, weights)[0](h, rng)
        if got is None or got[0] in seen:
            continue
        seen.add(got[0])
        out.append(got)
    raise RuntimeError(f"could not make {n} distinct tasks for home {h.name}")


def make_examples(h: Home, rng: random.Random) -> list[tuple[str, list[str]]]:
    n = rng.choice([2, 3])
    out: list[tuple[str, list[str]]] = []
    for family in rng.sample(EXAMPLE_FAMILIES, len(EXAMPLE_FAMILIES)):
        if len(out) == n:
            break
        got = family(h, rng)
        if got is not None:
            out.append(got)
    return out


class _Flow(list):
    """A list written in YAML flow style: [a, b, c]."""


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(_Flow, lambda d, v: d.represent_sequence("tag:yaml.org,2002:seq", v, flow_style=True))


def generate(out: Path, seed: int = 0) -> dict[str, int]:
    """Write homes/*.yaml, calib.jsonl and heldout.jsonl under ``out``; return counts."""
    rng = random.Random(seed)
    homes = [Home(name, rng) for name in HOME_NAMES]
    heldout = rng.sample(HOME_NAMES, HELDOUT_HOMES)
    calib_rows: list[dict] = []
    heldout_rows: list[dict] = []
    for h in homes:
        h.examples = make_examples(h, rng)
        tasks = make_tasks(h, rng, TASKS_PER_HOME, taken=[t for t, _ in h.examples])
        rows = heldout_rows if h.name in heldout else calib_rows
        for i, (task, plan) in enumerate(tasks):
            rows.append({"id": f"{h.name}-{i:03d}", "home": h.name, "task": task, "reference_plan": plan})

    homes_dir = out / "homes"
    homes_dir.mkdir(parents=True, exist_ok=True)
    for h in homes:
        text = f"# Generated by calibration/generate.py --seed {seed}; do not edit by hand.\n" + yaml.dump(
            h.to_dict(), Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100
        )
        _write(homes_dir / f"{h.name}.yaml", text)
    for fname, rows in (("calib.jsonl", calib_rows), ("heldout.jsonl", heldout_rows)):
        _write(out / fname, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    return {"homes": len(homes), "calib": len(calib_rows), "heldout": len(heldout_rows)}


def _write(path: Path, text: str) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent, help="output directory")
    ap.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    args = ap.parse_args(argv)
    counts = generate(args.out, args.seed)
    print(
        f"wrote {counts['homes']} homes, {counts['calib']} calibration and {counts['heldout']} "
        f"held-out tasks to {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
