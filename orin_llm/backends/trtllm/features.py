"""The TensorRT-LLM features a daemon turns on, one at a time, and the ladder first contact walks with them.

The Orin profile stacks five features that no NVIDIA Jetson document runs together (paged context FMHA
with KV block reuse, chunked context, `draft_tokens_external` with our draft/target loop, the Python logits
post-processor on every step). When the first serve fails, `orin-llm serve --trtllm-features LIST` takes
them apart: it turns on only the listed ones among those the engine was built for, and 0.12's own load
rules (rules.py) still refuse what 0.12 refuses. The ladder (`LADDER`) adds one feature per rung from the
same checkpoint; three engines hold them, as some features are compiled in (`ENGINES`): a plain one, one
with paged context FMHA (block reuse needs it, rules.py), and the profile's own (a draft_tokens_external
target and the 1B draft). doctor/ladder.py walks it on the Orin and stops at the first rung that fails.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ...errors import OrinError

BLOCK_REUSE, CHUNKED_CONTEXT, GRAMMAR, LOOKUP, DRAFT_MODEL = (
    "block_reuse", "chunked_context", "grammar", "lookup", "draft_model")
FEATURES = (BLOCK_REUSE, CHUNKED_CONTEXT, GRAMMAR, LOOKUP, DRAFT_MODEL)


def parse_features(text: Optional[str]) -> Optional[frozenset[str]]:
    """`--trtllm-features`: None (all the engine has), `none`/empty (none), or a comma list of FEATURES."""
    if text is None:
        return None
    names = [n.strip() for n in text.split(",") if n.strip() and n.strip() != "none"]
    unknown = [n for n in names if n not in FEATURES]
    if unknown:
        raise OrinError(f"--trtllm-features: unknown {', '.join(unknown)} (known: {', '.join(FEATURES)}, or none)")
    return frozenset(names)


def wanted(features: Optional[frozenset[str]], name: str) -> bool:
    return features is None or name in features


@dataclass(frozen=True)
class Rung:
    name: str
    engine: str  # ENGINES key
    features: tuple[str, ...]
    constrained: bool  # whether its smoke test asks for constrained plans (the grammar post-processor)
    speculation: str  # the smoke test's plans' speculation


# Profile name suffix per engine: the plain and the reuse engines are built from sibling profiles of the
# profile (jetson/profiles/<name>-plain.toml, <name>-reuse.toml; tests/jetson check they differ from it in
# those features only).
ENGINES = {"plain": "-plain", "reuse": "-reuse", "full": ""}

LADDER = (
    Rung("plain", "plain", (), False, "none"),
    Rung("block reuse", "reuse", (BLOCK_REUSE,), False, "none"),
    Rung("chunked context", "reuse", (BLOCK_REUSE, CHUNKED_CONTEXT), False, "none"),
    Rung("grammar post-processor", "reuse", (BLOCK_REUSE, CHUNKED_CONTEXT, GRAMMAR), True, "none"),
    Rung("lookup", "full", (BLOCK_REUSE, CHUNKED_CONTEXT, GRAMMAR, LOOKUP), True, "lookup"),
    Rung("1B draft", "full", FEATURES, True, "draft_model"),
)
