"""The lm_head of a q4_1 target: exact greedy choices from an int8 pass, float32 logits on demand.

The embedded model's head is tied to its GGUF's Q8_0 token embedding (quant.Q8Embedding). As a
float32 matrix it is 113 MB, the largest tensor the daemon holds, and a decode step reads all of it
(2.9 ms of a 12 ms step on the 2-core VM, docs/notes/benchmarks-lab-notes.md). Yet a greedy request uses one
number per row: the argmax, over the tokens its grammar allows. So:

- `approx`: the same values requantized to int8 per row (28 MB), on torch's packed int8 kernel
  (bf16 activations, bf16 output). Every approximate logit L~ comes with a rigorous bound on its
  error, |L - L~| <= ||h||_1 * coef_v + 2^-8 |L~| + SLACK, where coef_v = delta_v + 2^-8 a_v:
  delta_v the largest |w - w~| of row v (the requantization, measured at load), a_v its largest
  |w| (times the bf16 rounding of h, 2^-9, and the kernel's float32 sums), and 2^-8 |L~| the
  output's rounding to bf16. Measured on the embedded model's hidden states, the true error stays
  under a fifth of the bound.
- Every token whose interval [L~ - e, L~ + e] reaches the best lower bound among the allowed
  tokens is a candidate (a median of 7 per row, at most ~150 measured); their logits are computed
  exactly from the Q8_0 codes (float64 sums), written over the approximate ones. Every other
  allowed token keeps a value below the best exact one, so the argmax of the returned row (over the
  allowed tokens) is the argmax of the exact logits: greedy answers, speculation's lossless
  verify and batch invariance stand on exact numbers, not on the kernel's.
- `full(h)`: float32 logits for every token, for sampled requests (temperature > 0 needs the whole
  distribution). The float32 matrix is made from the codes on the first such request and kept, as
  the draft model is loaded on first use: a daemon serving greedy plans never holds it.
"""

from __future__ import annotations

import logging
from typing import Optional

import torch
from torch import nn

from ..kernels import q8_dot
from ..kernels.packed import PackedLinear, packing_available
from ..kernels.quant import Q8Embedding, QuantLinear

log = logging.getLogger(__name__)

SLACK = 1e-3  # absolute, on top of the bound: the exact sums' own rounding (float64, then float32)
REFINE_ROWS = 1024  # candidates recomputed per chunk (bounds the temporary when a row has many)
LOAD_ROWS = 4096  # head rows requantized and checked at a time while loading (_requantize)


def vocab_mask(allowed: Optional[torch.Tensor], rows: int, vocab: int, device=None) -> torch.Tensor:
    """[rows, vocab] bool: `allowed` ([rows, n]; a grammar's vocabulary may be shorter than the
    model's) with every token past n forbidden; every token allowed where `allowed` is None."""
    if allowed is None:
        return torch.ones(rows, vocab, dtype=torch.bool, device=device)
    if allowed.shape == (rows, vocab):
        return allowed
    mask = torch.zeros(rows, vocab, dtype=torch.bool, device=allowed.device)
    n = min(allowed.shape[-1], vocab)
    mask[:, :n] = allowed[:, :n]
    return mask


class Q8Head(nn.Module):
    """The tied head over a Q8Embedding's codes (shared, not copied): see the module doc."""

    def __init__(self, embedding: Q8Embedding, use_q8_dot: bool = True, pack: bool = True):
        """use_q8_dot, pack: whether the kernel plan runs the int8 pass on q8_dot's kernels where they build,
        and packs the float32 head for oneDNN (kernel_plan.py)."""
        super().__init__()
        self.pack_full = pack
        self.embedding = [embedding]  # not a submodule: the codes are the embedding's
        self.out_features, self.in_features = embedding.codes.shape
        q, scales, delta, w_max, kept_max = self._requantize(embedding.codes.device)
        self.approx = QuantLinear(q, scales.float(), torch.float32)
        if not self.approx.pack(use_q8_dot):
            raise RuntimeError("no packed int8 kernel here")  # the loader checks kernel_available first
        # q8_dot's pass quantizes h to int16 (its error is measured per call: Σ|h - h~| times the row's
        # largest kept weight); torch's takes bf16 (h's rounding, 2^-9, and the sums', with room)
        self.on_q8_dot = self.approx.q8 is not None
        coef = delta if self.on_q8_dot else delta + 2.0 ** -8 * w_max
        self.register_buffer("coef", coef.float() * (1 + 2.0 ** -20), persistent=False)  # rounded up
        self.register_buffer("coef_acts", kept_max.float() * (1 + 2.0 ** -20), persistent=False)
        blocks = self.in_features // q8_dot.BLOCK
        self.sum_eps = (blocks + 8) * 2.0 ** -24  # float32 sums of the blocks' products, relative to Σ|terms|
        self.full_head: Optional[nn.Module] = None  # float32 logits, made on first use (full)

    def _requantize(self, device) -> tuple[torch.Tensor, ...]:
        """The int8 codes (round to nearest under per-row bf16 scales, as the kernel holds them), the
        scales, and per row: the largest |w - kept| (the requantization's error), the largest |w| and
        the largest |kept|. Computed LOAD_ROWS rows at a time: the whole head in float64 would be
        vocab × hidden × 8 B (3.1 GB for Llama 3.2 3B) three times over while the engine loads, on a
        device the policy shares; every figure is per row, so the chunks give the same numbers."""
        rows, cols = self.out_features, self.in_features
        q = torch.empty(rows, cols, dtype=torch.int8, device=device)
        scales, delta, w_max, kept_max = (torch.empty(rows, dtype=torch.float64, device=device) for _ in range(4))
        for a in range(0, rows, LOAD_ROWS):
            b = min(rows, a + LOAD_ROWS)
            w = self._rows(torch.arange(a, b, device=device), torch.float64)
            amax = w.abs().amax(dim=1)
            s = (amax / 127).clamp(min=1e-8).to(torch.bfloat16).double()
            qc = torch.clamp(torch.round(w / s[:, None]), -127, 127).to(torch.int8)
            kept = qc.double().mul_(s[:, None])  # the values the int8 pass multiplies
            q[a:b], scales[a:b], w_max[a:b] = qc, s, amax
            kept_max[a:b] = kept.abs().amax(dim=1)
            delta[a:b] = w.sub_(kept).abs_().amax(dim=1)
        return q, scales, delta, w_max, kept_max

    def _rows(self, idx: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """The exact weights of rows `idx`: code times its block's scale, as the GGUF defines them."""
        emb = self.embedding[0]
        return emb.codes[idx].to(dtype) * emb.scales[idx].to(dtype).repeat_interleave(emb.group, dim=-1)

    @torch.inference_mode()
    def forward(self, h: torch.Tensor, allowed: Optional[torch.Tensor] = None) -> torch.Tensor:
        """h: [R, in] → [R, vocab] float32 logits, exact where a row's argmax over `allowed` ([R, n]
        bool, n <= vocab, past n forbidden; None: every token) can be; elsewhere lower than that."""
        out = self.approx(h).float()
        bound = self.bound(h, out)  # (in place from here: [R, vocab] temporaries are 200 KB a row)
        low = torch.sub(out, bound)
        mask = None if allowed is None else vocab_mask(allowed, out.shape[0], out.shape[1])
        if mask is not None:
            low.masked_fill_(~mask, float("-inf"))
        cand = bound.add_(out) >= low.amax(dim=1, keepdim=True)  # the best allowed token is always one
        if mask is not None:
            cand &= mask  # a forbidden token's logit is never looked at
        rows, cols = cand.nonzero(as_tuple=True)
        for a in range(0, rows.shape[0], REFINE_ROWS):
            r, c = rows[a:a + REFINE_ROWS], cols[a:a + REFINE_ROWS]
            out[r, c] = (self._rows(c, torch.float64) * h[r].double()).sum(dim=-1).float()
        return out

    def bound(self, h: torch.Tensor, approx: torch.Tensor) -> torch.Tensor:
        """[R, vocab]: how far each approximate logit (approx = self.approx(h)) can be from the exact one."""
        n1 = h.abs().sum(dim=1, keepdim=True).float()
        if not self.on_q8_dot:  # torch's kernel: bf16 h and bf16 output
            bound = approx.abs().mul_(2.0 ** -8).add_(SLACK)
            return bound.addcmul_(n1, self.coef)
        # |L - L~| <= Σ|w - w~||h| + Σ|w~||h - h~| + the float32 sums' rounding
        #          <= n1·delta + a~·(E + eps·(n1 + E)) + 2^-23·|L~|     (a~ = the row's largest |w~|)
        e = q8_dot.activation_error(h)[:, None] * (1 + 2.0 ** -20)
        bound = approx.abs().mul_(2.0 ** -23).add_(SLACK).addcmul_(n1, self.coef)
        return bound.addcmul_(e + self.sum_eps * (n1 + e), self.coef_acts)

    def exact(self, h: torch.Tensor) -> torch.Tensor:
        """[R, vocab] float64: the exact logits (float64 sums over the GGUF's values; for tests)."""
        w = self._rows(torch.arange(self.out_features, device=h.device), torch.float64)
        return h.double() @ w.T

    @torch.inference_mode()
    def full(self, h: torch.Tensor) -> torch.Tensor:
        """Float32 logits of every token (the matrix made on the first call)."""
        if self.full_head is None:
            w = self._rows(torch.arange(self.out_features, device=h.device), torch.float32)
            if self.pack_full and packing_available(h.device, torch.float32):
                self.full_head = PackedLinear(w)
            else:
                self.full_head = nn.Linear(self.in_features, self.out_features, bias=False, device=h.device)
                self.full_head.weight.data = w
            log.info("a sampled request: the float32 lm_head is made (%d MB, kept from now on)",
                     w.numel() * w.element_size() >> 20)
        return self.full_head(h).float()

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, int8 + exact top, "
                f"float32 {'made' if self.full_head is not None else 'not made'}")
