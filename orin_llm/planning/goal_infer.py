"""A goal from the task text: one short model request, decoded under the home's goal grammar
(planning/home/goal_text.py), whose facts the planner then plans to (goal_search.py).

The goal prompt (what a goal is, the home, the home's examples with their goals) is rendered once
per home version and kept on the Home; its blocks stay in the engine's prefix cache, so a request
computes only its task's turn. The grammar is narrowed to the things the task mentions (when it
mentions any) and compiled per set of things, at most GRAMMARS_KEPT kept per home version.
A fact the model writes that contradicts an earlier one (planning/home/goals.py `consistent`) is left
out, and the answer says so (`dropped`): a goal no world has would have the search run to the deadline.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Optional

from ..errors import OrinError
from ..runtime.constraint import Grammar
from ..runtime.sampling import SamplingParams
from ..runtime.tasks import Steps, drive
from .home.goal_text import (
    GOAL_MAX_TOKENS,
    MAX_FACTS,
    goal_grammar,
    goal_lines,
    goal_prefix_messages,
    goal_task_message,
)
from .home.goal_words import Cues, cues, mentioned, unresolved_pronouns
from .home.goals import consistent
from .plans import Home

GRAMMARS_KEPT = 64
INFER = "infer"  # the goal value that asks for the goal to be inferred
NO_GOAL = "none"  # the goal value that asks for none: the model's plan as it decodes it


@dataclass
class GoalPrompt:
    """A home version's goal prompt: its text, ids, and the goal grammars compiled for it."""

    text: str
    ids: tuple[int, ...]
    messages: tuple[dict[str, str], ...]
    grammars: OrderedDict = field(default_factory=OrderedDict)  # frozenset of things -> Grammar


@dataclass(frozen=True)
class InferredGoal:
    facts: list[str]
    text: str  # what the model wrote
    mentioned: list[str]  # the things the grammar was narrowed to (empty: the whole home)
    ms: float  # how long inferring took
    tokens: int  # tokens decoded
    dropped: list[str] = field(default_factory=list)  # facts that contradicted an earlier one, left out, and why
    doubts: list[str] = field(default_factory=list)  # why the goal read may not be the speaker's

    def as_dict(self) -> dict:
        return {"facts": list(self.facts), "mentioned": list(self.mentioned), "ms": round(self.ms, 1),
                "tokens": self.tokens, "dropped": list(self.dropped), "doubts": list(self.doubts)}


def goal_prompt(engine, home: Home) -> GoalPrompt:
    """`home`'s goal prompt, rendered and tokenized on first use."""
    cached = home.goal_prompt
    if cached is not None:
        return cached
    messages = tuple(goal_prefix_messages(home.prefix.environment))
    text = engine.chat_text(list(messages), add_generation_prompt=False)
    prompt = GoalPrompt(text, tuple(engine.encode(text)), messages)
    home.goal_prompt = prompt
    return prompt


def _grammar(engine, prompt: GoalPrompt, env, only: frozenset[str], max_facts: int, cue: Optional[Cues]) -> Grammar:
    key = (only, max_facts, cue)
    g = prompt.grammars.get(key)
    if g is None:
        g = Grammar.lark(engine.vocabulary(), goal_grammar(env, set(only), max_facts, cue),
                         f"the goal grammar of {env.name!r}")
        prompt.grammars[key] = g
        while len(prompt.grammars) > GRAMMARS_KEPT:
            prompt.grammars.popitem(last=False)
    prompt.grammars.move_to_end(key)
    return g


def infer_goal(engine, home: Home, task: str, narrow: bool = True, max_facts: int = MAX_FACTS) -> InferredGoal:
    """infer_goal_task driven to its end here, stepping the engine (for a caller that owns it)."""
    return drive(engine, infer_goal_task(engine, home, task, narrow, max_facts))


def infer_goal_task(engine, home: Home, task: str, narrow: bool = True,
                    max_facts: int = MAX_FACTS) -> Steps[InferredGoal]:
    """The goal `task` asks for in `home`, written by the model under the goal grammar (`narrow`:
    only the things the task mentions, when it mentions any): a task (runtime/tasks.py) of one
    request, which whoever steps the engine runs next to the others. OrinError when this engine
    cannot constrain."""
    t0 = time.perf_counter()
    env = home.prefix.environment
    if env.is_text:
        raise OrinError(f"environment {env.name!r} is plain text: a goal needs rooms, objects and actions to name")
    if not engine.capabilities.grammars:
        raise OrinError(f"this {engine.manifest.backend} engine cannot constrain decoding, so it cannot infer a goal; "
                        "give the goal's facts, e.g. [\"at(mug, sink)\"]")
    prompt = goal_prompt(engine, home)
    only = frozenset(mentioned(env, task)) if narrow else frozenset()
    cue = cues(env, task, set(only)) if only else None
    grammar = _grammar(engine, prompt, env, only, max_facts, cue)
    full = engine.chat_text([*map(dict, prompt.messages), goal_task_message(task)])
    ids = list(prompt.ids) + engine.encode(full[len(prompt.text):]) if full.startswith(prompt.text) \
        else engine.encode(full)
    gen = engine.generate(ids, SamplingParams(max_tokens=GOAL_MAX_TOKENS), "none", constraint=grammar.constraint())
    yield gen
    result = gen.result
    text = result.text
    if result.finish_reason == "length" and not text.endswith("\n"):
        text = text.rsplit("\n", 1)[0] if "\n" in text else ""  # a fact cut in half is no fact
    # the grammar does not see that holding(mug) contradicts at(mug, sink): a goal that can never be
    # reached would have the search run to the deadline, so a fact that contradicts an earlier one goes
    facts, dropped = consistent(goal_lines(text), env)
    if not facts:  # the grammar needs one fact; a cut at max_tokens can leave none whole
        raise OrinError(f"no goal could be inferred from the task {task!r} (the model wrote {result.text!r}); "
                        "give the goal's facts")
    doubts = [f"the task says {word!r} and names no thing of the home before it: the goal read may be about "
              "another thing than the one meant; name it" for word in dict.fromkeys(unresolved_pronouns(env, task))]
    return InferredGoal(facts, result.text, sorted(only), (time.perf_counter() - t0) * 1e3,
                        result.timings.completion_tokens, dropped, doubts)
