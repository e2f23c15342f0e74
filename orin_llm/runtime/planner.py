"""Planning calls on a pinned home environment.

The environment's chat prefix (system prompt + home + few-shot turns) is tokenized once and its
K/V pinned in the engine's cache (cache.py): other traffic cannot evict it, and a planning request
computes only its own turn. Token identity (invariant 2, docs/ARCHITECTURE.md): the request's ids
are the prefix's ids followed by the ids of the text that follows the prefix, never the joined
text re-tokenized.

A new environment gets a new version: its prefix is pinned, then the previous one unpinned.
Requests already running keep their own references to the old prefix's blocks, so they finish on
the version they began with, and a request never mixes versions.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Optional

from ..environment import Environment, Step, prefix_messages, task_message
from ..errors import EnvironmentTooLong, OrinError, PromptTooLong
from ..home.grammar import plan_grammar
from ..home.steps import Rejected, check_steps
from .backend import Backend
from .cache import Pin
from .constraint import Grammar
from .generate import Generation, Result
from .sampling import SamplingParams


@dataclass
class Plan:
    text: str
    steps: list[Step]  # lines that call a declared action with things of the home of the right types
    result: Result
    environment_version: int
    rejected: list[Rejected] = field(default_factory=list)  # the other lines, and why
    constrained: bool = False


@dataclass(frozen=True)
class Prefix:
    version: int
    environment: Environment
    text: str
    ids: tuple[int, ...]
    messages: tuple[dict[str, str], ...]  # rendered once: every request starts with them
    grammar: Optional[Grammar] = None  # the home's plan grammar, compiled once per version


@dataclass
class Conversation:
    """An agent loop's turns (task, plan, observations, plan, ...) on one environment version. The
    next turn's ids are this turn's ids (prompt + the plan's own tokens) followed by the ids of
    what the template adds after them: the cache then holds every earlier turn, and only the new
    text is computed (never the joined text re-tokenized, which could split the plan differently)."""

    id: str
    version: int
    messages: list[dict[str, str]]
    ids: list[int] = field(default_factory=list)  # prompt + output of the last turn
    text: str = ""  # what those ids spell (prompt text + the plan's text)
    turns: int = 0


MAX_CONVERSATIONS = 64  # kept in memory, least recently used dropped first


def history_key(environment: Environment) -> str:
    """The lookup history plans in this environment draft from: per home, across its versions."""
    return f"env:{environment.name}"


@dataclass
class Home:
    """A home the planner serves: its current prefix and the pin that keeps it cached."""

    prefix: Prefix
    pin: Pin


class Planner:
    """Plans on pinned homes: the default one, and any number of named ones (a fleet of robots in
    different homes sharing one planner), each pinned within the engine's KV budget."""

    def __init__(self, engine: Backend, environment: Environment):
        self.engine = engine
        self.homes: dict[Optional[str], Home] = {}  # None: the default home
        self.prefill_s = 0.0  # how long the last environment's prefix took to compute
        self.conversations: OrderedDict[tuple[Optional[str], str], Conversation] = OrderedDict()
        self.set_environment(environment)

    @property
    def prefix(self) -> Optional[Prefix]:
        """The default home's current prefix."""
        home = self.homes.get(None)
        return home.prefix if home else None

    @property
    def pin(self) -> Optional[Pin]:
        home = self.homes.get(None)
        return home.pin if home else None

    @pin.setter
    def pin(self, pin: Pin) -> None:
        self.homes[None].pin = pin

    @property
    def version(self) -> int:
        assert self.prefix is not None
        return self.prefix.version

    def home(self, name: Optional[str] = None) -> Home:
        if name not in self.homes:
            named = ", ".join(sorted(n for n in self.homes if n is not None)) or "none"
            raise OrinError(f"no home named {name!r} on this planner (named homes: {named}); put it first")
        return self.homes[name]

    def render(self, environment: Environment, name: Optional[str] = None) -> Prefix:
        """The environment as the next version's prefix of home `name` (rendered, tokenized and its
        grammar compiled, not yet pinned); PromptTooLong if it leaves no room for a task."""
        messages = tuple(prefix_messages(environment))
        text = self.engine.chat_text(list(messages), add_generation_prompt=False)
        ids = tuple(self.engine.encode(text))
        try:
            self.engine.check_prompt(len(ids) + 1)  # room for a task: at least one token
        except PromptTooLong as e:
            raise EnvironmentTooLong(environment.name, len(ids), e.limit) from None
        grammar = None
        if self.constrains and not environment.is_text:  # GrammarError: the old version stays
            grammar = Grammar.lark(self.engine.vocabulary(), plan_grammar(environment),
                                   f"the plan grammar of {environment.name!r}")
        old = self.homes.get(name)
        return Prefix(old.prefix.version + 1 if old else 1, environment, text, ids, messages, grammar)

    @property
    def constrains(self) -> bool:
        """Whether this engine can constrain plans to the home's grammar."""
        return self.engine.capabilities.grammars

    def set_environment(self, environment: Environment, name: Optional[str] = None) -> int:
        """Render, tokenize and pin a new environment for home `name` (None: the default home);
        returns its version. A pin that does not fit next to the others is refused (OrinError with
        the numbers) and the home keeps its old version."""
        prefix = self.render(environment, name)
        t0 = time.perf_counter()
        pin = self.engine.pin(list(prefix.ids))
        return self.use(prefix, pin, time.perf_counter() - t0, name)

    def use(self, prefix: Prefix, pin: Pin, prefill_s: Optional[float] = None, name: Optional[str] = None) -> int:
        """Make a computed, pinned prefix home `name`'s current one (and unpin its previous)."""
        old = self.homes.get(name)
        self.homes[name] = Home(prefix, pin)
        if old is not None:
            self.engine.unpin(old.pin)
        if prefill_s is not None:
            self.prefill_s = prefill_s
        return prefix.version

    def remove(self, name: str) -> None:
        """Unpin a named home (requests still running on it finish; its blocks then become evictable)."""
        self.engine.unpin(self.home(name).pin)
        del self.homes[name]
        for key in [k for k in self.conversations if k[0] == name]:
            del self.conversations[key]

    def messages(self, task: str, observations: Optional[list[str]] = None,
                 home: Optional[str] = None) -> list[dict[str, str]]:
        return [dict(m) for m in self.home(home).prefix.messages] + [task_message(task, observations)]

    def prompt_ids(self, messages: list[dict], home: Optional[str] = None,
                   tools: Optional[list[dict]] = None) -> list[int]:
        """Ids for a conversation: the pinned prefix's ids + the rest, when it starts with the prefix.
        `tools`: for a chat template that renders function tools itself."""
        prefix = self.home(home).prefix if home in self.homes else self.prefix
        assert prefix is not None
        full = self.engine.chat_text(messages, tools=tools)
        if not full.startswith(prefix.text):
            return self.engine.encode(full)
        rest = full[len(prefix.text):]
        if not rest:
            raise OrinError("the conversation adds nothing after the environment prefix")
        return list(prefix.ids) + self.engine.encode(rest)

    def conversation(self, conversation_id: str, home: Optional[str] = None) -> Conversation:
        """The conversation of that id in home `home` (a new one if there is none, or if the home
        changed since: its turns were planned in another version of it)."""
        prefix = self.home(home).prefix
        key = (home, conversation_id)
        conv = self.conversations.get(key)
        if conv is None or conv.version != prefix.version:
            conv = Conversation(conversation_id, prefix.version, [dict(m) for m in prefix.messages])
        self.conversations[key] = conv
        self.conversations.move_to_end(key)
        while len(self.conversations) > MAX_CONVERSATIONS:
            self.conversations.popitem(last=False)
        return conv

    def _turn_ids(self, conv: Conversation, messages: list[dict[str, str]],
                  home: Optional[str]) -> tuple[list[int], str]:
        full = self.engine.chat_text(messages)
        if conv.ids and full.startswith(conv.text):  # token identity with the last turn
            return conv.ids + self.engine.encode(full[len(conv.text):]), full
        return self.prompt_ids(messages, home), full

    def start(self, task: str, params: SamplingParams, observations: Optional[list[str]] = None,
              speculation: str = "auto", constrained: bool = True,
              conversation: Optional[Conversation] = None, home: Optional[str] = None) -> Generation:
        """A plan request on home `home`'s current version; `constrained`: every line it writes is a
        step of the home (its grammar), where the engine and the home allow it. With a
        `conversation`, the request is its next turn (finish() records it)."""
        started = time.perf_counter()  # the request's TTFT and total include rendering and tokenizing it
        prefix = self.home(home).prefix
        extra: dict = {"history": history_key(prefix.environment)}  # an engine with one history ignores it
        if constrained and prefix.grammar is not None:
            extra["constraint"] = prefix.grammar.constraint()
        elif constrained and not prefix.environment.is_text:
            raise OrinError(f"this {self.engine.manifest.backend} engine cannot constrain a plan to the home's "
                            "grammar yet; send \"constrained\": false")
        if conversation is None:
            ids = self.prompt_ids(self.messages(task, observations, home), home)
        else:
            messages = conversation.messages + [task_message(task, observations)]
            ids, text = self._turn_ids(conversation, messages, home)
        try:
            gen = self.engine.generate(ids, params, speculation, **extra)
        except PromptTooLong as e:
            n = len(prefix.ids)
            raise PromptTooLong(e.tokens, e.limit, f"the prompt has {e.tokens} tokens, over this engine's "
                                f"max_input_len of {e.limit}: the environment takes {n} of them, which leaves "
                                f"{e.limit - n} for the task and observations; shorten those") from None
        if conversation is not None:  # recorded only once the turn is accepted
            conversation.messages, conversation.ids, conversation.text = messages, ids, text
        gen.started = started
        gen.conversation = conversation
        return gen

    def finish(self, generation: Generation, prefix: Prefix) -> Plan:
        """Plan text, typed steps and rejected lines, checked against the environment the request ran on."""
        result = generation.result if generation.result is not None else self.engine.run(generation)
        steps, rejected = check_steps(result.text, prefix.environment, truncated=result.finish_reason == "length")
        conv = generation.conversation
        if conv is not None:  # the plan becomes the conversation's last turn
            conv.messages = conv.messages + [{"role": "assistant", "content": result.text}]
            exact = self.engine.tokenizer.decode(result.token_ids, skip_special_tokens=True) == result.text
            conv.ids = conv.ids + list(result.token_ids) if exact else []  # a stop string cut it: re-render
            conv.text = conv.text + result.text if exact else ""
            conv.turns += 1
        return Plan(result.text.strip(), steps, result, prefix.version, rejected,
                    constrained=generation.constraint is not None)

    def plan(self, task: str, params: SamplingParams, observations: Optional[list[str]] = None,
             speculation: str = "auto", constrained: bool = True, home: Optional[str] = None) -> Plan:
        prefix = self.home(home).prefix
        return self.finish(self.start(task, params, observations, speculation, constrained, home=home), prefix)
