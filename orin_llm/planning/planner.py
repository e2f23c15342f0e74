"""Planning calls on a pinned home environment.

The environment's chat prefix (system prompt + home + few-shot turns) is tokenized once and its
K/V pinned in the engine's cache (cache.py): other traffic cannot evict it, and a planning request
computes only its own turn. Token identity (invariant 2, docs/ARCHITECTURE.md): the request's ids
are the prefix's ids followed by the ids of the text that follows the prefix, never the joined
text re-tokenized.

A new environment gets a new version: its prefix is pinned, then the previous one unpinned.
Requests already running keep their own references to the old prefix's blocks, so they finish on
the version they began with, and a request never mixes versions.

The home's state (where the robot is, what it holds, ...: planning/home/state.py) changes more often
than the home: it is rendered after the static prefix, at the head of the task's turn, and a state
change (`set_state`) pins the prefix followed by the state's tokens, so only those are computed.
Plans are checked against the state (feasibility: "enforce" narrows the grammar by the simulated
state as the plan is decoded, planning/feasibility.py; "report" simulates the finished plan; "off"
does neither), and a goal is searched for (planning/goal_search.py).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any, Optional

from ..errors import EnvironmentTooLong, OrinError, PromptTooLong
from ..runtime.backend import Backend
from ..runtime.cache import Pin
from ..runtime.constraint import Grammar
from ..runtime.generate import Result, SpecStats, Timings
from ..runtime.sampling import SamplingParams
from ..runtime.tasks import Primary, Steps, Task, drive
from .feasibility import StepSets, narrowed, whole_steps
from .goal_infer import INFER, NO_GOAL, infer_goal_task
from .goal_search import GOAL_BUDGET_S, PlanRun, check_plan, parse_goal, reach_goal
from .home import Environment, prefix_messages, task_message
from .home.grammar import plan_grammar
from .home.render import state_text
from .home.state import HomeState, apply_update
from .home.steps import check_steps
from .home.world import World
from .plans import FEASIBILITY, MAX_CONVERSATIONS, Conversation, Home, Plan, Prefix, history_key
from .state_pins import StateChange, StatePart, ids_after_part, state_part

__all__ = ["FEASIBILITY", "Conversation", "Home", "Plan", "Planner", "Prefix", "history_key"]

CURRENT = object()  # messages(): the home's current state


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

    def render(self, environment: Environment, name: Optional[str] = None, version: Optional[int] = None) -> Prefix:
        """The environment as the next version's prefix of home `name` (rendered, tokenized and its
        grammar compiled, not yet pinned); PromptTooLong if it leaves no room for a task. `version`:
        the one to give it instead (a home restored at start keeps its number, so its ETag still
        names the same content)."""
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
        steps = StepSets(environment) if grammar is not None else None
        if version is None:
            version = old.prefix.version + 1 if old else 1
        return Prefix(version, environment, text, ids, messages, grammar, steps)

    @property
    def constrains(self) -> bool:
        """Whether this engine can constrain plans to the home's grammar."""
        return self.engine.capabilities.grammars

    def set_environment(self, environment: Environment, name: Optional[str] = None,
                        version: Optional[int] = None) -> int:
        """Render, tokenize and pin a new environment for home `name` (None: the default home);
        returns its version (`version`: see render). A pin that does not fit next to the others is
        refused (OrinError with the numbers) and the home keeps its old version."""
        prefix = self.render(environment, name, version)
        t0 = time.perf_counter()
        pin = self.engine.pin(list(prefix.ids))
        return self.use(prefix, pin, time.perf_counter() - t0, name)

    def use(self, prefix: Prefix, pin: Pin, prefill_s: Optional[float] = None, name: Optional[str] = None) -> int:
        """Make a computed, pinned prefix home `name`'s current one (and unpin its previous)."""
        old = self.homes.get(name)
        self.homes[name] = Home(prefix, pin)  # a new version starts from its own state
        if old is not None:
            self.engine.unpin(old.pin)
            if old.state_pin is not None:
                self.engine.unpin(old.state_pin)
        if prefill_s is not None:
            self.prefill_s = prefill_s
        return prefix.version

    def remove(self, name: str) -> None:
        """Unpin a named home (requests still running on it finish; its blocks then become evictable)."""
        home = self.home(name)
        self.engine.unpin(home.pin)
        if home.state_pin is not None:
            self.engine.unpin(home.state_pin)
        del self.homes[name]
        for key in [k for k in self.conversations if k[0] == name]:
            del self.conversations[key]

    def messages(self, task: str, observations: Optional[list[str]] = None, home: Optional[str] = None,
                 state: Any = CURRENT) -> list[dict[str, str]]:
        """The prefix's messages and the task's turn, headed by `state`'s lines (by default the home's
        current state, when it has one; None: no state)."""
        if state is CURRENT:
            state = self._known_state(home)
        block = state_text(state) if state is not None else None
        return [dict(m) for m in self.home(home).prefix.messages] + [task_message(task, observations, block)]

    # ------------------------------------------------------------------ state over time

    def current_state(self, home: Optional[str] = None) -> HomeState:
        """The state plans of home `home` start in: the robot's last report, else the home's own
        `state:`, else nothing known but an empty hand. OrinError for a plain-text home."""
        state = self._known_state(home)
        if state is None and self.home(home).prefix.environment.is_text:
            raise OrinError(f"environment {self.home(home).prefix.environment.name!r} is plain text: it has no "
                            "state; give rooms and actions")
        return state if state is not None else HomeState()

    def _known_state(self, home: Optional[str]) -> Optional[HomeState]:
        """The state to render before a task: None for a home that declares none and was never reported."""
        h = self.home(home)
        if h.prefix.environment.is_text:
            return None
        return h.state if h.state is not None else h.prefix.environment.state

    def _part(self, prefix: Prefix, state: HomeState) -> Optional[StatePart]:
        return state_part(self.engine, prefix.text, prefix.messages, state)

    def set_state(self, update: Any, home: Optional[str] = None, run: bool = False) -> StateChange:
        """Change home `home`'s state: `update` is a partial state (planning/home/state.py apply_update:
        the keys it names change, null forgets a fact) or a whole HomeState. OrinError naming what to
        fix when it does not fit the home (nothing changes then). The state's part (rendered after
        the static prefix) is pinned by the returned task (its one request, then the pin kept): a caller
        that steps the engine runs it (the daemon's worker), `run=True` drives it here (runtime/tasks.py
        drive: a caller that owns the engine); only the state's tokens are computed."""
        h = self.home(home)
        env = h.prefix.environment
        if env.is_text:
            raise OrinError(f"environment {env.name!r} is plain text: it has no state; give rooms and actions")
        if isinstance(update, HomeState):
            new = update
            new.check(env)
        else:
            new = apply_update(self.current_state(home), update, env)
        part = self._part(h.prefix, new)
        gen = self.engine.pin_request(list(h.prefix.ids) + list(part.ids)) if part is not None else None
        h.state, h.part = new, part
        h.state_version += 1
        change = StateChange(new, h.prefix.version, gen, h.state_version,
                             Task(self._pin_state(h, gen)) if gen is not None else None)
        if run and change.task is not None:
            drive(self.engine, change.task)
        return change

    def _pin_state(self, h: Home, gen) -> Steps[None]:
        """The state's pin request, then the pin kept or released, also when the task is closed early
        (its client went after the pin was made)."""
        try:
            yield Primary(gen)
        finally:
            self._state_pinned(h, gen)

    def _state_pinned(self, h: Home, gen) -> None:
        """A state's pin is over: it replaces the last one, unless it failed or the state or the home moved
        on since."""
        pin = gen.pin
        if pin is None or gen.error is not None:
            return
        ids = pin.ids if isinstance(pin, Pin) else tuple(pin)  # torch's Pin holds its ids; the others' handle is them
        current = any(x is h for x in self.homes.values()) and h.part is not None
        if not current or ids != h.prefix.ids + h.part.ids:
            self.engine.unpin(pin)
            return
        if h.state_pin is not None:
            self.engine.unpin(h.state_pin)
        h.state_pin = pin

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

    def _state_ids(self, messages: list[dict], prefix: Prefix, part: StatePart, home: Optional[str]) -> list[int]:
        """A task's ids after a state part (the prefix's, the part's, the rest's), or rendered afresh."""
        ids = ids_after_part(self.engine, messages, prefix.text, prefix.ids, part)
        return ids if ids is not None else self.prompt_ids(messages, home)

    def start(self, task: str, params: SamplingParams, observations: Optional[list[str]] = None,
              speculation: str = "auto", constrained: bool = True,
              conversation: Optional[Conversation] = None, home: Optional[str] = None,
              feasibility: str = "enforce", goal: Optional[list[str] | str] = None, state: Any = None,
              deadline_s: Optional[float] = None, empty_ok: bool = False) -> PlanRun | Plan:
        """start_task driven here (goal "infer": the goal's reading steps the engine), for a caller
        that owns the engine; the daemon runs plan_task."""
        return drive(self.engine, self.start_task(task, params, observations, speculation, constrained, conversation,
                                                  home, feasibility, goal, state, deadline_s, empty_ok))

    def start_task(self, task: str, params: SamplingParams, observations: Optional[list[str]] = None,
                   speculation: str = "auto", constrained: bool = True,
                   conversation: Optional[Conversation] = None, home: Optional[str] = None,
                   feasibility: str = "enforce", goal: Optional[list[str] | str] = None, state: Any = None,
                   deadline_s: Optional[float] = None, empty_ok: bool = False) -> Steps[PlanRun | Plan]:
        """A task (runtime/tasks.py) that returns a plan request (its PlanRun: `request`, built and not yet
        submitted, and what its plan is checked against) on home `home`'s current version; `constrained`:
        every line it writes is a step of the home (its grammar), where the engine and the home allow it.
        With a `conversation`, the request is its next turn (finish() records it), headed by the state it starts in.

        `feasibility`: "enforce" (only steps whose preconditions hold in the state simulated so far),
        "report" (the grammar only; finish() lists the violations) or "off". `goal`: facts the plan
        must make true (planning/home/goals.py), or "infer": the model reads them in the task text
        first (goal_infer.py: the task's one request; the plan's goal_inferred says which);
        finish() searches for a plan that does, within `deadline_s` of now (GOAL_BUDGET_S when
        None); "none": no goal. None (not given) is "infer" wherever a goal can be checked
        (reads_goals), so that the plain request gets the best path; a goal read that way which the
        model cannot write is no goal, not an error. `state`: this request's state (a partial update
        of the home's current one, or a HomeState), the home's stays as it is. `empty_ok`: a goal that
        holds in the state the plan starts in is answered with an empty Plan instead of a request."""
        started = time.perf_counter()  # the request's TTFT and total include rendering and tokenizing it
        if feasibility not in FEASIBILITY:
            raise OrinError(f"feasibility {feasibility!r}: choose enforce, report or off")
        h = self.home(home)
        prefix = h.prefix
        env = prefix.environment
        asked = goal
        if goal is None:
            goal = INFER if self.reads_goals(home, feasibility, constrained) else None
        elif goal == NO_GOAL:
            goal = None
        if env.is_text:
            if goal or state is not None:
                raise OrinError(f"environment {env.name!r} is plain text: it has no state to "
                                f"{'reach a goal in' if goal else 'set'}; give rooms and actions")
            feasibility = "off"
        if goal and feasibility == "off":
            raise OrinError("a goal is checked by simulating the plan, and feasibility \"off\" simulates nothing; "
                            "send \"enforce\" or \"report\"")
        current = self._known_state(home)
        if state is None:
            run_state = current
        elif isinstance(state, HomeState):
            state.check(env)
            run_state = state
        else:
            run_state = apply_update(current or HomeState(), state, env)
        inferred = None
        if isinstance(goal, str):
            if goal != INFER:
                raise OrinError(f"goal {goal!r}: give a list of facts like [\"at(mug, sink)\"], \"infer\" to have "
                                "the model read them in the task text, or \"none\"")
            try:
                inferred = yield from infer_goal_task(self.engine, h, task)
                goal = inferred.facts
            except OrinError:
                if asked is not None:
                    raise
                goal = None  # the plain request: a goal the model cannot write is planned without one
        goal_ = parse_goal(goal, env) if goal else None
        world = World.start(env, run_state) if feasibility != "off" else None
        if empty_ok and goal_ is not None and world is not None and goal_.reached(world):
            return self._nothing_to_do(h, world, goal_, feasibility, inferred)
        extra: dict = {"history": history_key(env)}  # an engine with one history ignores it
        if constrained and prefix.grammar is not None:
            c = prefix.grammar.constraint()
            if feasibility == "enforce":
                c = narrowed(c, prefix.steps, world, self.engine.vocabulary(), goal_)
            extra["constraint"] = c
        elif constrained and not env.is_text:
            raise OrinError(f"this {self.engine.manifest.backend} engine cannot constrain a plan to the home's "
                            "grammar yet; send \"constrained\": false")
        if conversation is None:
            messages = self.messages(task, observations, home, run_state)
            part = h.part if state is None and h.part is not None and h.part.state == run_state else None
            if part is None and run_state is not None:
                part = self._part(prefix, run_state)
                if state is None and h.state is None:
                    h.part = part  # the home's own state: rendered once per version
            ids = (self._state_ids(messages, prefix, part, home) if part is not None
                   else self.prompt_ids(messages, home))
        else:
            # every turn is headed by the state it starts in (the robot's last report, or this request's):
            # the turns before it stay as they were, cached, and only the new turn is computed
            block = state_text(run_state) if run_state is not None else None
            messages = conversation.messages + [task_message(task, observations, block)]
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
        # queue_s is the wait for the engine: the goal's reading is work for this request (PlanRun.goal_s)
        gen.started = started + (inferred.ms / 1e3 if inferred is not None else 0.0)
        budget = GOAL_BUDGET_S if deadline_s is None else deadline_s
        return PlanRun(task, observations, params, speculation, constrained, home, feasibility, run_state,
                       world, goal_, started + budget, started, inferred, request=gen, conversation=conversation)

    def reads_goals(self, home: Optional[str] = None, feasibility: str = "enforce", constrained: bool = True) -> bool:
        """Whether a request that names no goal has the model read one in its task (goal "infer"): where a
        goal can be checked, a home with rooms and actions simulated (feasibility enforce or report) and
        plans kept to its grammar on an engine that constrains."""
        env = self.home(home).prefix.environment
        return not env.is_text and feasibility != "off" and constrained and self.constrains

    def _nothing_to_do(self, h: Home, world: World, goal, feasibility: str, inferred) -> Plan:
        """The answer to a goal that holds already: an empty plan that says so (no request runs)."""
        result = Result("", [], "stop", Timings(), SpecStats())  # the engine took no request
        plan = Plan("", [], result, h.prefix.version, constrained=True, final_state=world.state,
                    goal_reached=True, feasibility=feasibility, goal_reading_s=inferred.ms / 1e3 if inferred else 0.0,
                    goal=[str(f) for f in goal.facts], goal_source="inferred" if inferred else "given",
                    search={"candidates": 0, "source": "start",
                            "reason": f"the goal ({goal}) holds in the state the plan starts in: nothing to do"})
        if inferred is not None:
            plan.goal_inferred, plan.goal_dropped = list(inferred.facts), list(inferred.dropped)
            plan.goal_doubts = list(inferred.doubts)
        return plan

    def finish(self, run: PlanRun, prefix: Prefix) -> Plan:
        """finish_task driven here (the request, if it has not run, and a goal's later candidates
        step the engine), for a caller that owns the engine."""
        return drive(self.engine, self.finish_task(run, prefix))

    def finish_task(self, run: PlanRun, prefix: Prefix) -> Steps[Plan]:
        """Plan text, typed steps and rejected lines, checked against the environment the request ran
        on; simulated from its state (feasibility), and with a goal, searched on until one is reached
        (goal_search.py: further model candidates are this task's requests)."""
        if run.request.result is None:
            yield run.request
        plan = self.finish_one(run, prefix)
        if run.goal is not None and run.world is not None:
            plan = yield from reach_goal(self, plan, run, prefix)
        return plan

    def finish_one(self, run: PlanRun, prefix: Prefix) -> Plan:
        """finish() without the goal's search: this request's plan (it has run), checked and simulated."""
        generation = run.request
        result = generation.result
        assert result is not None, "finish_one takes a request that has run"
        constrained = generation.constraint is not None
        if constrained and result.finish_reason == "length":
            result = whole_steps(result, self.engine.tokenizer)  # never half a step
        steps, rejected = check_steps(result.text, prefix.environment, truncated=result.finish_reason == "length")
        conv = run.conversation
        if conv is not None:  # the plan becomes the conversation's last turn
            conv.messages = conv.messages + [{"role": "assistant", "content": result.text}]
            exact = self.engine.tokenizer.decode(result.token_ids, skip_special_tokens=True) == result.text
            conv.ids = conv.ids + list(result.token_ids) if exact else []  # a stop string cut it: re-render
            conv.text = conv.text + result.text if exact else ""
            conv.turns += 1
        plan = Plan(result.text.strip(), steps, result, prefix.version, rejected, constrained=constrained)
        if run.world is None:
            return plan
        check_plan(plan, run, prefix)
        return plan

    def plan(self, task: str, params: SamplingParams, observations: Optional[list[str]] = None,
             speculation: str = "auto", constrained: bool = True, home: Optional[str] = None,
             feasibility: str = "enforce", goal: Optional[list[str] | str] = None, state: Any = None,
             deadline_s: Optional[float] = None) -> Plan:
        """plan_task driven here, for a caller that owns the engine (the CLI, benches, tests)."""
        return drive(self.engine, self.plan_task(task, params, observations, speculation, constrained, home=home,
                                                 feasibility=feasibility, goal=goal, state=state,
                                                 deadline_s=deadline_s))

    def plan_task(self, task: str, params: SamplingParams, observations: Optional[list[str]] = None,
                  speculation: str = "auto", constrained: bool = True, conversation: Optional[Conversation] = None,
                  home: Optional[str] = None, feasibility: str = "enforce", goal: Optional[list[str] | str] = None,
                  state: Any = None, deadline_s: Optional[float] = None) -> Steps[Plan]:
        """A plan request as a task (runtime/tasks.py): the goal's reading (goal "infer"), the plan's
        request (its primary: the one streamed and timed), then with a goal the later candidates and
        the search; each request runs next to the others. Returns the Plan."""
        prefix = self.home(home).prefix
        run = yield from self.start_task(task, params, observations, speculation, constrained, conversation, home,
                                         feasibility, goal, state, deadline_s, empty_ok=True)
        if isinstance(run, Plan):  # the goal holds already: nothing to decode
            return run
        yield Primary(run.request, run)
        return (yield from self.finish_task(run, prefix))
