"""Decoding that respects the home's state: at every step boundary only the steps whose preconditions
hold in the state simulated from the plan so far (planning/home/world.py) may begin.

One grammar (the home's, compiled once per version) and a state-dependent narrowing on top of it,
not a grammar per state: compiling even a small grammar costs milliseconds, a decode step's mask
must cost a small fraction of that. `FeasibleConstraint` wraps the request's grammar `Constraint`
and keeps, per accepted token, the simulated world and the text of the line being written. The
tokens it allows are those the grammar allows whose bytes keep the line a prefix of a feasible
step (and a token that ends the line, ")\\n" say, completes a feasible step and begins another in
the world after it). The grammar's mask is computed first and only its allowed tokens are checked
here, tens to hundreds, never the whole vocabulary.

What a world allows (`StepSets`: its feasible lines and their prefixes) is computed once per world
and kept per home version, keyed by `World.key`: plans revisit the same states, so most steps find
their sets made.

Speculation and jump-forward stay lossless for the same reason they are under the grammar alone:
every draft is cut at its first token this constraint forbids (`valid_prefix`), each verify
position is masked with the state after the drafts before it (`masks`), `rollback` restores the
world with the grammar, and a token that is the only one allowed is the only one argmax or
sampling could pick.

Actions whose arguments are not all things of the home (a `text` argument: `say("...")`) are not
narrowed (World.feasible says None): the grammar alone decides them, and their line is checked by
the simulator once complete (a violation is recorded, not hidden).

No loops (docs/HOMES.md, rule 2): a step that brings the world back to a state the plan has already
been in (`World.state_key`, what is said and done included) cannot be written: picking a thing up and
putting it back, wiping two places in turn, going and coming back with nothing done. The states a plan
has been in travel with its constraint (`visited`), and each world's lines are filtered by them
(`StepSets.fresh`); a plan with nothing left that changes the world can only end. With a goal, a plan
that has reached it ends there too: no step begins once the goal's facts hold.
"""

from __future__ import annotations

import copy
import itertools
import time
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Any, Optional

import torch

from ..runtime.constraint import Constraint
from .home import Environment, format_call, parse_call
from .home.grammar import MAX_STEPS, step_lark

# StepSets kept per home version: each holds every prefix of its lines, so their number bounds the
# daemon's memory; a plan meets a few dozen states, and a miss only costs remaking one
MAX_WORLDS = 256
MAX_AFTER = 1024  # (world, step) -> next world, kept per home version
MAX_TUPLES = 10_000  # argument tuples tried for an action with a text argument (its things before the text)
MAX_FRESH = 1024  # (world, visited) -> its lines that go somewhere new, kept per home version


@dataclass(frozen=True)
class StepSet:
    """What one world allows: complete lines (bytes, as the grammar writes them), every prefix of
    them, and the heads ("say(") of actions left to the grammar."""

    lines: frozenset
    prefixes: frozenset
    open_heads: tuple


class StepSets:
    """The feasible steps of each world of one home version, made on first use and kept (LRU)."""

    def __init__(self, env: Environment):
        self.env = env
        self._sets: OrderedDict[Any, StepSet] = OrderedDict()
        self._after: OrderedDict[tuple, Any] = OrderedDict()  # (world key, line) -> the world after it
        self._fresh: OrderedDict[tuple, StepSet] = OrderedDict()  # (world's state, visited) -> its fresh set

    def of(self, world) -> StepSet:
        key = world.key
        s = self._sets.get(key)
        if s is None:
            s = self._make(world)
            self._sets[key] = s
            if len(self._sets) > MAX_WORLDS:
                self._sets.popitem(last=False)
        else:
            self._sets.move_to_end(key)
        return s

    def _make(self, world) -> StepSet:
        lines: set[bytes] = set()
        heads: list[bytes] = []
        for a in self.env.actions:
            tuples = world.feasible(a.name)
            if tuples is not None:
                lines.update(format_call(a.name, list(args), types=a.args).encode() for args in tuples)
            elif "text" not in a.args or a.args.index("text") == 0:
                heads.append(f"{a.name}(".encode())  # every call can run, or only the text follows
            else:  # the things before the first text argument are narrowed; the text is the grammar's
                cut = a.args.index("text")
                pools = [self.env.names(t) if t != "text" else ["…"] for t in a.args]
                heads.extend({f"{a.name}({', '.join(args[:cut])}, ".encode()
                              for args in itertools.islice(itertools.product(*pools), MAX_TUPLES)
                              if world.check(a.name, args) is None})
        prefixes = {line[:i] for line in lines for i in range(len(line) + 1)}
        prefixes |= {h[:i] for h in heads for i in range(len(h) + 1)}
        return StepSet(frozenset(lines), frozenset(prefixes), tuple(heads))

    def after(self, world, line: bytes):
        """The world after the complete step `line`; None when the step is not feasible in `world`."""
        key = (world.key, world.said, world.done, line)  # the full state: key leaves said and done out
        nxt = self._after.get(key)
        if nxt is not None:
            return nxt
        s = self.of(world)
        if line in s.lines:
            call = parse_call(line.decode())
            nxt = world.apply(call[0], call[1])
        elif any(line.startswith(h) for h in s.open_heads):
            call = parse_call(line.decode("utf-8", errors="replace"))
            if call is None or world.check(call[0], call[1]) is not None:
                return None
            nxt = world.apply(call[0], call[1])
        else:
            return None
        self._after[key] = nxt
        if len(self._after) > MAX_AFTER:
            self._after.popitem(last=False)
        return nxt

    def changes(self, line: bytes) -> bool:
        """Whether a line is a step (CallSets: a tag around tool calls is not, and changes nothing)."""
        return True

    def fresh(self, world, visited: frozenset) -> StepSet:
        """`world`'s set without the steps that lead back to a state in `visited` (module doc: no loops);
        the set itself when none does."""
        key = (world.state_key, world.key, visited)
        s = self._fresh.get(key)
        if s is not None:
            self._fresh.move_to_end(key)
            return s
        s = full = self.of(world)
        lines = {ln for ln in full.lines if not self.changes(ln) or self.after(world, ln).state_key not in visited}
        heads = []
        for h in full.open_heads:
            every = self._every_line(h)
            if every is None:  # a text follows: one text stands for all
                if not self._head_loops(world, h, visited):
                    heads.append(h)
                continue
            fresh = {ln for ln in every if self.after(world, ln).state_key not in visited}
            if fresh == every:
                heads.append(h)  # every call of it can run and goes somewhere new
            else:
                lines |= fresh  # written out, so that no call of it ends where the plan was
        lines, heads = frozenset(lines), tuple(heads)
        if lines != full.lines or heads != full.open_heads:
            prefixes = {ln[:i] for ln in lines for i in range(len(ln) + 1)}
            prefixes |= {h[:i] for h in heads for i in range(len(h) + 1)}
            s = StepSet(lines, frozenset(prefixes), heads)
        self._fresh[key] = s
        if len(self._fresh) > MAX_FRESH:
            self._fresh.popitem(last=False)
        return s

    def _every_line(self, head: bytes) -> Optional[set]:
        """Every call an open head of an action without a text argument begins (every one can run: that
        is why it is a head); None for an action with a text."""
        action = self.env.action(head.decode().split("(", 1)[0])
        if action is None or "text" in action.args:
            return None
        pools = [self.env.names(t) for t in action.args]
        return {format_call(action.name, list(args), types=action.args).encode()
                for args in itertools.product(*pools)}

    def _head_loops(self, world, head: bytes, visited: frozenset) -> bool:
        """Whether every step an open head can begin leads back to a visited state: its text changes
        nothing of the world (say: only that something was said), so one text stands for all."""
        call = parse_call(head.decode("utf-8", errors="replace").rstrip(", ") + ")")
        action = self.env.action(call[0]) if call is not None else None
        if action is None:
            return False
        args = list(call[1]) + ["…" if t == "text" else "" for t in action.args[len(call[1]):]]
        if "" in args or world.check(action.name, args) is not None:
            return False  # a thing still to be chosen after the text: checked once the line is complete
        return world.apply(action.name, args).state_key in visited

    def continues(self, world, partial: bytes, piece: bytes, visited: frozenset = frozenset()):
        """(world, partial line, visited) after `piece` is written on `partial` in `world`, the plan
        having been in the states `visited`; None when that leaves the feasible steps or comes back to
        a visited state."""
        text = partial + piece
        while True:
            cut = text.find(b"\n")
            if cut < 0:
                s = self.fresh(world, visited)
                # at a boundary with no step left to begin, the plan may still end (complete())
                if not text or text in s.prefixes or any(text.startswith(h) for h in s.open_heads):
                    return world, text, visited
                return None
            line = text[:cut]
            nxt = self.after(world, line)
            if nxt is None:
                return None
            if self.changes(line):
                if nxt.state_key in visited:
                    return None
                visited = visited | {nxt.state_key}
            world, text = nxt, text[cut + 1:]

    def in_open(self, world, partial: bytes, visited: frozenset = frozenset()) -> bool:
        """Whether the line being written is past the head of an action the grammar alone decides."""
        return any(partial.startswith(h) for h in self.fresh(world, visited).open_heads)

    def complete(self, world, partial: bytes, visited: frozenset = frozenset()) -> bool:
        """Whether the plan may end here: at a boundary, or after a complete feasible step that does not
        come back to a visited state."""
        if not partial:
            return True
        s = self.fresh(world, visited)
        if partial in s.lines:
            return True
        if not any(partial.startswith(h) for h in s.open_heads):
            return False
        nxt = self.after(world, partial)
        return nxt is not None and (not self.changes(partial) or nxt.state_key not in visited)


class FeasibleConstraint(Constraint):
    """The home's grammar narrowed by the simulated state (module doc). Used wherever a Constraint is:
    the decider, the model runner's verify masks, the draft model, TensorRT-LLM's post-processor
    (which calls only accept and allowed)."""

    def __init__(self, base: Constraint, sets: StepSets, world, vocab, goal=None):
        super().__init__(base.m, base.vocab_size, base.what)
        self.goal = goal  # planning/home/goals.py Goal: once it holds, the plan may only end
        self._reached: dict[tuple, bool] = {}
        self.sets, self.token_bytes, self.special = sets, vocab.token_bytes(), vocab.special_ids()
        self.line_enders = vocab.line_enders()
        # per accepted token, what to go back to: (world, partial line, visited states) before it
        self._trail: list[tuple[Any, bytes, frozenset]] = []
        self.world, self.partial = world, b""
        self.visited = frozenset({world.state_key})  # the states the plan has been in (no loops)
        self.narrow_s = 0.0  # time spent narrowing (the grammar's own mask: mask_s)
        self.unnarrowed = 0  # masks where no feasible token was left and the grammar's stood (see allowed)
        self.lark = base.lark  # a remote engine gets the home's grammar; its answer is checked here (fork)

    def fork(self) -> FeasibleConstraint:
        """A copy at this state (the grammar's matcher copied, the same world and partial line)."""
        c = copy.copy(self)
        c.m, c._bits, c._trail = self.m.deep_copy(), self._bits.clone(), []
        return c

    def _next(self, tok: int, world=None, partial: Optional[bytes] = None, visited: Optional[frozenset] = None):
        """(world, partial line, visited) after `tok` from the current state (or the one given); None:
        forbidden."""
        if world is None:
            world, partial, visited = self.world, self.partial, self.visited
        if tok in self.special:  # the end of the turn: only where the plan may end
            return (world, partial, visited) if self.sets.complete(world, partial, visited) else None
        nxt = self.sets.continues(world, partial, self.token_bytes[tok], visited)
        if nxt is not None and nxt[1] and self._goal_holds(nxt[0]):
            return None  # a step begun after the goal was reached
        return nxt

    def _goal_holds(self, world) -> bool:
        if self.goal is None:
            return False
        key = world.state_key
        held = self._reached.get(key)
        if held is None:
            held = self._reached[key] = self.goal.reached(world)
        return held

    def allowed(self) -> torch.Tensor:
        grammar = super().allowed()
        t0 = time.perf_counter()
        if self.sets.in_open(self.world, self.partial, self.visited):
            # inside an argument the grammar alone decides (a text): only a token that ends the line
            # (a newline in it, or the end of the turn) completes a step the simulator must check
            ids = [t for t in self.line_enders if grammar[t]]
        else:
            ids = grammar.nonzero().flatten().tolist()
        drop = [t for t in ids if self._next(t) is None]
        out = grammar
        if drop and (len(drop) < len(ids) or len(ids) < int(grammar.sum())):
            out = grammar.clone()
            out[drop] = False
        elif drop:
            # no feasible step can begin (a home whose every step is blocked): the grammar stands,
            # and the simulator reports the plan's violations
            self.unnarrowed += 1
        self.narrow_s += time.perf_counter() - t0
        return out

    def accept(self, token: int) -> None:
        nxt = self._next(token)
        if nxt is None and not self.unnarrowed:
            raise RuntimeError(f"{self.what}: token {token} would write a step the state does not allow")
        super().accept(token)
        self._trail.append((self.world, self.partial, self.visited))
        if nxt is not None:
            self.world, self.partial, self.visited = nxt
        else:  # past an unnarrowed mask: follow the text, the world stays
            self.partial = (self.partial + self.token_bytes[token]).rsplit(b"\n", 1)[-1]

    def rollback(self, n: int) -> None:
        if n <= 0:
            return
        super().rollback(n)
        self.world, self.partial, self.visited = self._trail[-n]
        del self._trail[-n:]

    def valid_prefix(self, tokens: list[int]) -> int:
        n = super().valid_prefix(tokens)
        t0 = time.perf_counter()
        state, ok = (self.world, self.partial, self.visited), 0
        for tok in tokens[:n]:
            state = self._next(tok, *state)
            if state is None:
                break
            ok += 1
        self.narrow_s += time.perf_counter() - t0
        return ok

    @property
    def at_boundary(self) -> bool:
        return not self.partial

    def steps(self) -> Optional[StateSteps]:
        """At a step boundary, the same narrowing one step per request (StateSteps); None inside a
        line, or for sets that narrow other things than a plan's steps (a chat's tool calls:
        server/call_narrowing.py)."""
        if type(self.sets) is StepSets and self.at_boundary and self.lark is not None:
            return StateSteps(self.sets, self.world, self.visited, self.goal)
        return None


class StateSteps:
    """runtime/constraint.py's StepGrammars for a plan under the home's state: each step's grammar is
    exactly the lines feasible in the world after the steps before it (the same StepSets the local
    narrowing reads), and a written line moves the world on."""

    max_steps = MAX_STEPS

    def __init__(self, sets: StepSets, world, visited: Optional[frozenset] = None, goal=None):
        self.sets, self.world, self.goal = sets, world, goal
        self.visited = frozenset({world.state_key}) if visited is None else visited

    def grammar(self, first: bool, last: bool) -> Optional[str]:
        if self.goal is not None and self.goal.reached(self.world):
            return None  # the goal holds: the plan ends here
        s = self.sets.fresh(self.world, self.visited)
        return step_lark(self.sets.env, s.lines, s.open_heads, first, last)

    def advance(self, line: str) -> bool:
        nxt = self.sets.after(self.world, line.encode())
        if nxt is None or nxt.state_key in self.visited:
            return False
        self.world, self.visited = nxt, self.visited | {nxt.state_key}
        return True


def narrowed(base: Constraint, sets: StepSets, world, vocab, goal=None) -> FeasibleConstraint:
    """The request's grammar constraint narrowed by `world` (a World of planning/home/world.py), ending
    once `goal` (planning/home/goals.py) holds."""
    return FeasibleConstraint(base, sets, world, vocab, goal)


def plan_lines(steps: list[tuple[str, tuple[str, ...]]], env: Environment) -> str:
    """Steps as the plan text the grammar writes (one call per line)."""
    out = []
    for name, args in steps:
        action = env.action(name)
        out.append(format_call(name, list(args), types=action.args if action else None))
    return "\n".join(out)


def whole_steps(result, tokenizer):
    """A plan cut by max_tokens, ending at its last step boundary: a last line that is not a whole
    call is dropped (text, and the tokens that spell it; a token across the boundary goes too)."""
    text = result.text
    last = text.rsplit("\n", 1)[-1]
    if not last.strip() or parse_call(last.strip()) is not None:
        return result
    cut = text[:len(text) - len(last)].rstrip("\n")
    ids = list(result.token_ids)
    while ids and not cut.startswith(tokenizer.decode(ids, skip_special_tokens=True)):
        ids.pop()
    return replace(result, text=cut, token_ids=ids)
