"""A grammar constraint on one request's tokens: which tokens may come next, and what is forced.

llguidance does the grammar work (chosen by measurement over xgrammar, see docs/ARCHITECTURE.md:
~3 ms to compile a home's grammar against xgrammar's ~350 ms, ~12 µs per mask, draft checking and
rollback built in, and no dependencies). A `Grammar` is compiled once (per environment version,
or per JSON schema) into a template matcher; each request gets a deep copy of it, a `Constraint`.

How it meets the decode loop (generate.py):
- sampling: the logits of tokens the grammar forbids are set to -inf before argmax or sampling;
- speculation: a draft is cut at its first forbidden token before verification, and each verify
  position is masked with the grammar state after the drafts before it (then rolled back);
- jump-forward: when the mask allows exactly one token, that token is emitted without a model
  step (its K/V is computed with the next step's rows). Since argmax or sampling over a single
  allowed token can only pick it, the output is the same as without jump-forward.
"""

from __future__ import annotations

import time
from typing import Optional, Protocol

import torch

from ..errors import OrinError

_SHIFTS = torch.arange(32, dtype=torch.int32)


class GrammarError(OrinError):
    """A grammar (or JSON schema) that the library cannot compile; the message says why."""


def _llg():
    try:
        import llguidance
        # not llguidance.torch: its module-level @torch.compile imports torch._dynamo, inductor and
        # triton (seconds, and memory the daemon keeps) for a kernel we do not use; the two calls we
        # need from it are below (allocate_token_bitmask, fill_next_token_bitmask). Not llguidance.hf
        # either: it imports transformers (and keeps its tokenizer resident) to hand LLTokenizer the
        # tokenizer.json text, which our Tokenizer reads itself.
    except ImportError:
        raise OrinError("constrained decoding needs the llguidance package (pip install llguidance)") from None
    return llguidance


class Vocabulary:
    """The tokenizer as llguidance sees it, built once per engine (~0.3 s for a 49k vocabulary)."""

    def __init__(self, tokenizer, vocab_size: int, eos_ids: set[int]):
        llg = _llg()
        eos = tokenizer.eos_token_id if tokenizer.eos_token_id in eos_ids else min(eos_ids)
        self.lltok = llg.LLTokenizer(tokenizer.json, n_vocab=vocab_size, eos_token=eos)
        self.vocab_size = vocab_size
        self._bytes: Optional[list[bytes]] = None
        self._special: Optional[frozenset[int]] = None
        self._enders: Optional[list[int]] = None

    def token_bytes(self) -> list[bytes]:
        """Each token's bytes (a special token's: its text), made on first use."""
        if self._bytes is None:
            self._bytes = [self.lltok.decode_bytes([i]) for i in range(self.vocab_size)]
        return self._bytes

    def special_ids(self) -> frozenset[int]:
        """The special tokens (the end of the turn among them): they write no text of a plan."""
        if self._special is None:
            self._special = frozenset(i for i in range(self.vocab_size) if self.lltok.is_special_token(i))
        return self._special

    def line_enders(self) -> list[int]:
        """The tokens that can end a line of a plan: a newline in their bytes, or a special token."""
        if self._enders is None:
            self._enders = sorted({i for i, b in enumerate(self.token_bytes()) if b"\n" in b} | self.special_ids())
        return self._enders


class Grammar:
    """A compiled grammar: Lark text (llguidance's dialect) or a JSON schema."""

    def __init__(self, vocab: Vocabulary, grammar: str, what: str = "grammar"):
        llg = _llg()
        error = llg.LLMatcher.validate_grammar(grammar, vocab.lltok)
        if error:
            raise GrammarError(f"{what} does not compile: {' '.join(error.split())}")
        self.vocab, self.what = vocab, what
        self.lark: Optional[str] = None  # the Lark text it came from, for a remote engine (runtime/remote)
        self._template = llg.LLMatcher(vocab.lltok, grammar)
        if self._template.is_error():
            raise GrammarError(f"{what} does not compile: {self._template.get_error()}")

    @classmethod
    def lark(cls, vocab: Vocabulary, text: str, what: str = "grammar") -> Grammar:
        grammar = cls(vocab, _llg().LLMatcher.grammar_from_lark(text), what)
        grammar.lark = text
        return grammar

    @classmethod
    def json_schema(cls, vocab: Vocabulary, schema: dict, what: str = "json_schema") -> Grammar:
        try:
            grammar = _llg().LLMatcher.grammar_from_json_schema(schema)
        except (ValueError, TypeError) as e:
            raise GrammarError(f"{what} does not compile: {e}") from None
        return cls(vocab, grammar, what)

    def constraint(self) -> Constraint:
        c = Constraint(self._template.deep_copy(), self.vocab.vocab_size, self.what)
        c.lark = self.lark
        return c


class StepGrammars(Protocol):
    """A constraint written one step at a time, for an engine that takes a grammar text per request
    (a remote one, backends/remote/stepwise.py): the Lark of the steps allowed now, and the step
    written. The plan's grammar narrowed by a home's state offers one (planning/feasibility.py)."""

    max_steps: int

    def grammar(self, first: bool, last: bool) -> Optional[str]:
        """Lark for the next step (None: no step is allowed); `last`: no newline after it."""
        ...

    def advance(self, line: str) -> bool:
        """`line` was written: False when it is not allowed (then nothing more may be asked)."""
        ...


class Constraint:
    def __init__(self, matcher, vocab_size: int, what: str = "grammar"):
        self.m, self.vocab_size, self.what = matcher, vocab_size, what
        # one bit per token, 32 to an int32, as llguidance.torch.allocate_token_bitmask lays it out
        self._bits = torch.full(((vocab_size + 31) // 32,), -1, dtype=torch.int32)
        self.forced_tokens = 0  # tokens emitted without a model step (jump-forward)
        self.mask_s = 0.0  # time spent computing masks (the request's timings report it)
        self.masks_computed = 0
        self.lark: Optional[str] = None  # the grammar's Lark text, where it has one (Grammar.lark)

    def fork(self) -> Constraint:
        """A copy at this state, consumed on its own: a remote engine's answer is checked on one while
        the local request consumes this one."""
        c = Constraint(self.m.deep_copy(), self.vocab_size, self.what)
        c.lark = self.lark
        return c

    def allowed(self) -> torch.Tensor:
        """[vocab] bool: the tokens the grammar allows next."""
        t0 = time.perf_counter()
        # what llguidance.torch.fill_next_token_bitmask does: the matcher writes the mask in place
        self.m.unsafe_compute_mask_ptr(self._bits.data_ptr(), self._bits.numel() * self._bits.element_size())
        bits = (self._bits.unsqueeze(-1) >> _SHIFTS) & 1
        out = bits.flatten()[: self.vocab_size].bool()
        self.mask_s += time.perf_counter() - t0
        self.masks_computed += 1
        return out

    def accept(self, token: int) -> None:
        if not self.m.consume_token(token):
            raise RuntimeError(f"{self.what}: token {token} is not allowed here ({self.m.get_error()})")

    def valid_prefix(self, tokens: list[int]) -> int:
        """How many leading tokens of a draft the grammar accepts from the current state."""
        return self.m.validate_tokens(tokens) if tokens else 0

    def masks(self, draft: list[int]) -> torch.Tensor:
        """[len(draft)+1, vocab] bool: the allowed tokens at each verify position (the state after
        draft[:i]); the state is rolled back afterwards. `draft` must be valid (see valid_prefix)."""
        rows = [self.allowed()]
        for _i, tok in enumerate(draft):
            self.accept(tok)
            rows.append(self.allowed())
        self.rollback(len(draft))
        return torch.stack(rows)

    def rollback(self, n: int) -> None:
        """Undo the last `n` accepted tokens."""
        if n > 0:
            self.m.rollback(n)

    def forced(self) -> Optional[int]:
        """The one token the grammar allows now, if only one is allowed."""
        allowed = self.allowed()
        if int(allowed.sum()) != 1:
            return None
        return int(allowed.nonzero()[0])

    @property
    def finished(self) -> bool:
        return self.m.is_stopped()

    def steps(self) -> Optional[StepGrammars]:
        """This constraint one step at a time (StepGrammars), where it can be: a plain grammar cannot."""
        return None


def apply_mask(logits: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """logits with the forbidden tokens at -inf (the model's vocabulary may be padded past the
    tokenizer's: those are forbidden too)."""
    out = torch.full_like(logits, float("-inf"))
    if allowed.device != logits.device:  # the grammar's masks are made on the host: applied where the logits are
        allowed = allowed.to(logits.device, non_blocking=True)
    n = min(logits.shape[-1], allowed.shape[-1])
    out[..., :n] = logits[..., :n].masked_fill(~allowed[..., :n], float("-inf"))
    return out
