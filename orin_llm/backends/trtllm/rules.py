"""TensorRT-LLM 0.12's rules: which feature combinations it refuses, written once, with their sources.

The build checks a profile against them before anything runs (build/trtllm.py), the memory plan
reports what a profile's engines get under them (build/memory.py, the "deployment"), and the
runtime checks an engine directory against them before it creates an Executor
(backends/trtllm/loading.py). The test fake (tests/backends/trtllm/fake_trtllm.py, tests/build/fake_trtllm_tools.py)
does NOT import this module: it models 0.12 on its own, so a wrong rule here shows up as a disagreement.

Each rule records the message 0.12 raises, where it comes from, and how sure we are that 0.12 has it:
"0.12 source" is read in the 0.12 sources (docs/trtllm-0.12-jetson.md §0: R / J / R≡J); "later open
copy" is read in the first open-sourced copy of the batch manager, which was closed source at 0.12
(docs/trtllm-0.12-jetson.md §8 has the evidence and jetson/GUIDE.md the check to run on the Orin).

`python -m orin_llm.backends.trtllm.rules --check-install` looks for each rule's message in the installed
TensorRT-LLM (`strings` on libtensorrt_llm.so, grep on builder.py): jetson/bench.sh runs it.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Optional

Stage = Literal["build", "load"]
Evidence = Literal["0.12 source", "later open copy"]

# Our builds' KV block size, which the runtime also reads back from an engine's config.json (and
# assumes for one that does not say). A prefix is reused only in whole KV blocks: the last, partly
# filled block of the shared prefix is recomputed for every request. The planning prefix (system
# prompt + home + examples) is ~400-600 tokens, so 32-token blocks lose at most 31 tokens of it (64,
# the 0.12 default, up to 63) and waste less per sequence in the tail block. (doc §3:
# `--tokens_per_block` int, default 64, R≡J tensorrt_llm/plugin/plugin.py L182.)
TOKENS_PER_BLOCK = 32

# The batch manager raises with TLLM_CHECK_WITH_INFO: "[TensorRT-LLM][ERROR] Assertion failed: <text>
# (<file>:<line>)" (seen on a closed 0.7 build: tensorrtllm_backend issue #271). It was closed source
# at 0.12 (and still on 2024-12-18, NVIDIA/TensorRT-LLM issue #2569); "later open copy" means the first
# open-sourced copy of cpp/tensorrt_llm/batch_manager/trtGptModelInflightBatching.cpp, whose
# constructor holds the three load-time checks below (docs/trtllm-0.12-jetson.md §8).
BATCH_MANAGER = "batch manager, trtGptModelInflightBatching.cpp TrtGptModelInflightBatching()"


@dataclass(frozen=True)
class Rule:
    id: str
    stage: Stage  # "build": trtllm-build refuses; "load": Executor(...) refuses
    forbids: str  # the combination, in one line
    error: str  # the text 0.12 raises
    source: str  # where that text is
    evidence: Evidence
    fix: str  # what to change in the profile

    def cite(self) -> str:
        """One line: id, 0.12's own text and where it is."""
        return f"rule {self.id}: \"{self.error}\" ({self.source}; {self.evidence})"


INT8_KV_PAGED_CONTEXT_FMHA = Rule(
    id="int8-kv-paged-context-fmha", stage="build",
    forbids="paged context FMHA with an INT8 KV cache",
    error="Paged Context FMHA doesn't work with int8 kv cache currently.",
    # R≡J tensorrt_llm/builder.py build() L919-933: `if build_config.plugin_config.use_paged_context_fmha:
    # ... if model.config.quant_mode.has_int8_kv_cache(): raise RuntimeError(...)`.
    source="tensorrt_llm/builder.py build(), R≡J L919-933",
    evidence="0.12 source",
    fix="keep paged context FMHA (prefix reuse, chunked context) with kv_cache = \"fp16\", or keep the INT8 KV "
        "cache without them")

BLOCK_REUSE_NEEDS_PAGED_CONTEXT_FMHA = Rule(
    id="block-reuse-needs-paged-context-fmha", stage="load",
    forbids="KvCacheConfig(enable_block_reuse=True) on an engine built without paged context FMHA",
    error="When KV cache block reuse is set, model has to be built with paged context FMHA support",
    # Also raised by a closed 0.7 build at trtGptModelInflightBatching.cpp:140 (tensorrtllm_backend issue
    # #271) and required in R≡J docs/source/speculative_decoding.md L52-59: before and after 0.12.
    source=BATCH_MANAGER,
    evidence="later open copy",
    fix="build with --use_paged_context_fmha enable (kv_cache = \"fp16\"), or load without block reuse "
        "(prefix_reuse = false)")

DRAFT_TARGET_NEEDS_BLOCK_REUSE = Rule(
    id="draft-target-needs-block-reuse", stage="load",
    forbids="a --speculative_decoding_mode draft_tokens_external target loaded without KV block reuse",
    error="KV cache block reuse must be enabled for speculative decoding target model",
    source=BATCH_MANAGER,
    evidence="later open copy",
    fix="give the target block reuse (prefix_reuse = true, kv_cache = \"fp16\"), or build no draft-target "
        "pair (remove [draft])")

CHUNKED_CONTEXT_NEEDS_PAGED_CONTEXT_FMHA = Rule(
    id="chunked-context-needs-paged-context-fmha", stage="load",
    forbids="ExecutorConfig(enable_chunked_context=True) on an engine built without paged context FMHA",
    error="Chunked context requires the engine to be built with paged FMHA enabled.",
    # The requirement is 0.12's: tensorrtllm_backend v0.12.0 inflight_batcher_llm/src/model_instance_state.cc
    # L370-375 ("enable_chunked_context ... requires building the model with use_paged_context_fmha") and
    # docs/source/advanced/gpt-attention.md "Chunked Context"; the message text is the open copy's.
    source=BATCH_MANAGER,
    evidence="later open copy",
    fix="build with --use_paged_context_fmha enable (kv_cache = \"fp16\"), or set chunked_context = false")

RULES: tuple[Rule, ...] = (INT8_KV_PAGED_CONTEXT_FMHA, BLOCK_REUSE_NEEDS_PAGED_CONTEXT_FMHA,
                           DRAFT_TARGET_NEEDS_BLOCK_REUSE, CHUNKED_CONTEXT_NEEDS_PAGED_CONTEXT_FMHA)

# Not a refusal but an absence: 0.12 has the LookaheadDecodingConfig binding and the build choice
# `--speculative_decoding_mode lookahead_decoding`, but does not support lookahead yet: "Supported lookahead
# decoding (experimental)" is new in the 0.13.0 release notes (docs/source/release-notes.md), and 0.12's
# ModelRunnerCpp.from_dir takes no lookahead config, nor does run.py pass one (J model_runner_cpp.py, run.py).
LOOKAHEAD_NOT_IN_012 = ("TensorRT-LLM 0.12 has the binding and the build flag but supports lookahead only from "
                        "0.13 (experimental, release notes); docs/trtllm-0.12-jetson.md §9")


@dataclass(frozen=True)
class EngineSetup:
    """What one engine is built and loaded with: the facts the rules are about."""

    role: str  # "target" | "draft"
    kv_cache: str  # "fp16" | "int8"
    paged_context_fmha: bool  # --use_paged_context_fmha enable
    draft_tokens_external: bool  # --speculative_decoding_mode draft_tokens_external
    block_reuse: bool  # KvCacheConfig(enable_block_reuse=...)
    chunked_context: bool  # ExecutorConfig(enable_chunked_context=...)

    def as_dict(self) -> dict:
        return {"kv_cache": self.kv_cache, "paged_context_fmha": self.paged_context_fmha,
                "draft_tokens_external": self.draft_tokens_external, "block_reuse": self.block_reuse,
                "chunked_context": self.chunked_context}


def broken_rules(setup: EngineSetup) -> list[Rule]:
    """The rules an engine set up this way breaks, build rules first (0.12 stops at the first)."""
    broken = []
    if setup.kv_cache == "int8" and setup.paged_context_fmha:
        broken.append(INT8_KV_PAGED_CONTEXT_FMHA)
    if setup.block_reuse and not setup.paged_context_fmha:
        broken.append(BLOCK_REUSE_NEEDS_PAGED_CONTEXT_FMHA)
    if setup.draft_tokens_external and not setup.block_reuse:
        broken.append(DRAFT_TARGET_NEEDS_BLOCK_REUSE)
    if setup.chunked_context and not setup.paged_context_fmha:
        broken.append(CHUNKED_CONTEXT_NEEDS_PAGED_CONTEXT_FMHA)
    return broken


# ----------------------------------------------------------------------------- a profile's engines


def engine_setups(profile) -> list[EngineSetup]:
    """What the build and the runtime make of a trtllm profile (draft first, as built): paged context
    FMHA exactly where prefix reuse or chunked context asks for it, block reuse and chunked context on
    both engines (the draft re-reads the context every step too), draft tokens on the target of a
    draft-target pair."""
    paged = profile.prefix_reuse or profile.chunked_context
    models = [(r, s) for r, s in (("draft", profile.draft), ("target", profile.target)) if s is not None]
    return [EngineSetup(role=role, kv_cache=spec.kv_cache, paged_context_fmha=paged,
                        draft_tokens_external=role == "target" and profile.draft is not None,
                        block_reuse=profile.prefix_reuse, chunked_context=profile.chunked_context)
            for role, spec in models]


def _section(profile, roles: list[str]) -> str:
    return " and ".join(f"[{r}]" for r in roles)


def profile_refusal(profile) -> Optional[str]:
    """Why TensorRT-LLM 0.12 would refuse this profile's engines (one line: the setting, the rule with
    0.12's own text, the fix), or None. Checked before anything is built."""
    setups = engine_setups(profile)
    int8 = [s.role for s in setups if s.kv_cache == "int8"]
    wants = [k for k, on in (("prefix_reuse", profile.prefix_reuse), ("chunked_context", profile.chunked_context))
             if on]
    if int8 and wants:
        why = {"prefix_reuse": BLOCK_REUSE_NEEDS_PAGED_CONTEXT_FMHA.id,
               "chunked_context": CHUNKED_CONTEXT_NEEDS_PAGED_CONTEXT_FMHA.id}
        asks = " and ".join(f"{k} = true (rule {why[k]})" for k in wants)
        off = " and ".join(f"{k} = false" for k in wants)
        extra = " and remove [draft] (rule draft-target-needs-block-reuse)" if (
            "prefix_reuse" in wants and profile.draft is not None) else ""
        return (f"profile {profile.name!r}: {asks} needs paged context FMHA, which TensorRT-LLM 0.12 refuses "
                f"with the int8 KV cache of {_section(profile, int8)} ({INT8_KV_PAGED_CONTEXT_FMHA.cite()}); "
                f"either set kv_cache = \"fp16\" under {_section(profile, int8)}, or set {off}{extra} to keep "
                "the INT8 KV cache")
    for s in setups:
        if DRAFT_TARGET_NEEDS_BLOCK_REUSE in broken_rules(s):
            return (f"profile {profile.name!r}: the [draft] section makes the target a draft_tokens_external "
                    f"engine, which TensorRT-LLM 0.12 refuses to load without KV block reuse, and prefix_reuse "
                    f"= false turns block reuse off ({DRAFT_TARGET_NEEDS_BLOCK_REUSE.cite()}); either set "
                    "prefix_reuse = true (with kv_cache = \"fp16\"), or remove [draft] (no draft-target "
                    "speculation)")
    for s in setups:  # anything the checks above did not phrase in profile terms
        for rule in broken_rules(s):
            return f"profile {profile.name!r}: the {s.role} engine breaks {rule.cite()}; {rule.fix}"
    return None


# ----------------------------------------------------------------------------- the deployment


@dataclass(frozen=True)
class Deployment:
    """What a profile's engines get: the answer `orin-llm memory` and `build --dry-run` print."""

    backend: str
    engines: tuple[EngineSetup, ...]
    kv_cache: str  # the target's
    prefix_reuse: bool
    chunked_context: bool
    speculation: tuple[str, ...]  # the modes a request may ask for ("auto" resolves to one of them)
    why_not: tuple[tuple[str, str], ...]  # (feature, why it is off: a rule or the profile's choice)
    refused: Optional[str] = None  # profile_refusal(): the build refuses this profile
    # the modes a request with a grammar (a constrained plan: the default) may ask for; None: as speculation
    constrained_speculation: Optional[tuple[str, ...]] = None

    def as_dict(self) -> dict:
        constrained = self.speculation if self.constrained_speculation is None else self.constrained_speculation
        return {"backend": self.backend, "kv_cache": self.kv_cache, "prefix_reuse": self.prefix_reuse,
                "chunked_context": self.chunked_context, "speculation": list(self.speculation),
                "constrained_speculation": list(constrained),
                "engines": {s.role: s.as_dict() for s in self.engines},
                "why_not": [{"feature": f, "why": w} for f, w in self.why_not], "refused": self.refused}


def trtllm_deployment(profile) -> Deployment:
    """The deployment of a trtllm profile under 0.12's rules. A profile the build would refuse gets
    the features its engines can really have (and `refused` says why the build stops)."""
    setups = engine_setups(profile)
    int8 = any(s.kv_cache == "int8" for s in setups)
    reuse = profile.prefix_reuse and not int8
    chunked = profile.chunked_context and not int8
    pair = profile.draft is not None
    why: list[tuple[str, str]] = []
    fmha = f"rule {INT8_KV_PAGED_CONTEXT_FMHA.id} (trtllm-build refuses paged context FMHA with an INT8 KV cache)"
    if not reuse:
        why.append(("prefix_reuse", f"{fmha} + rule {BLOCK_REUSE_NEEDS_PAGED_CONTEXT_FMHA.id} (block reuse needs "
                                    "it)" if int8 else "prefix_reuse = false in the profile"))
    if not chunked:
        why.append(("chunked_context", f"{fmha} + rule {CHUNKED_CONTEXT_NEEDS_PAGED_CONTEXT_FMHA.id} (chunked "
                                       "context needs it)" if int8 else "chunked_context = false in the profile"))
    # Constrained requests speculate as the others do: drafts are cut on the host at the first token the
    # grammar forbids and the target verifies them under its logits post-processor, which 0.12 calls with
    # the logits of every position it decides (backends/trtllm/generation.py; docs/trtllm-0.12-jetson.md
    # §13), so constrained_speculation is the same list.
    speculation = ["none"]
    if pair and reuse:
        speculation += ["lookup", "draft_model", "combined"]
    elif pair:
        why.append(("lookup, draft_model, combined", f"rule {DRAFT_TARGET_NEEDS_BLOCK_REUSE.id} (a "
                    "draft_tokens_external target needs block reuse)"))
    elif not reuse:
        why.append(("lookup, draft_model, combined", f"rule {DRAFT_TARGET_NEEDS_BLOCK_REUSE.id} (a "
                    "draft_tokens_external target needs block reuse, which this profile has not), and no [draft]"))
    else:
        why.append(("lookup, draft_model, combined", "no [draft] in the profile: the target is built without "
                    "--speculative_decoding_mode draft_tokens_external"))
    why.append(("lookahead", LOOKAHEAD_NOT_IN_012))
    effective = tuple(EngineSetup(s.role, s.kv_cache, s.paged_context_fmha and not int8,
                                  s.draft_tokens_external and reuse, reuse, chunked) for s in setups)
    return Deployment(backend="trtllm", engines=effective, kv_cache=profile.target.kv_cache, prefix_reuse=reuse,
                      chunked_context=chunked, speculation=tuple(speculation), why_not=tuple(why),
                      refused=profile_refusal(profile))


def format_deployment(d: dict) -> list[str]:
    """A deployment (`Deployment.as_dict()`, as a memory plan stores it) as lines for the memory table and
    the dry run: per engine, target first, then every "no" and why."""
    yes = {True: "yes", False: "no"}
    title = ("deployment (TensorRT-LLM 0.12; its rules: orin_llm/backends/trtllm/rules.py)" if d["backend"] == "trtllm"
             else f"deployment (backend {d['backend']})")
    lines = [f"  {title}"]
    for role in sorted(d["engines"], key=lambda r: r != "target"):
        e = d["engines"][role]
        head = f"    {role:<7}KV {e['kv_cache']} · prefix reuse {yes[e['block_reuse']]} · chunked context " \
               f"{yes[e['chunked_context']]}"
        if role == "target":
            head += " · speculation " + ", ".join(d["speculation"])
            constrained = d.get("constrained_speculation", d["speculation"])
            head += " · with a grammar " + (", ".join(constrained) if constrained != d["speculation"] else "the same")
        else:
            head += " · drafts for " + (", ".join(m for m in d["speculation"] if m in ("draft_model", "combined"))
                                        or "nothing")
        lines.append(head)
    lines += [f"    no {w['feature']}: {w['why']}" for w in d["why_not"]]
    if d.get("refused"):
        lines.append(f"    REFUSED: {d['refused']}")
    return lines


# ----------------------------------------------------------------------------- the installed library


def installed_files(package_dir: Path) -> dict[Stage, Path]:
    """Where each stage's messages live in an installed tensorrt_llm: the builder is Python, the
    batch manager is linked into libs/libtensorrt_llm.so (setup.py package_data)."""
    return {"build": package_dir / "builder.py", "load": package_dir / "libs" / "libtensorrt_llm.so"}


def check_install(package_dir: Path) -> list[tuple[Rule, Optional[bool]]]:
    """(rule, found) for every rule: is its message in the installed file (None: file missing)?
    The bytes are searched as they are, like `strings FILE | grep -F TEXT`."""
    out = []
    files = installed_files(package_dir)
    for rule in RULES:
        path = files[rule.stage]
        out.append((rule, rule.error.encode() in path.read_bytes() if path.is_file() else None))
    return out


def _package_dir() -> Optional[Path]:
    import importlib.util

    spec = importlib.util.find_spec("tensorrt_llm")  # finds the package without importing it (no CUDA init)
    return Path(spec.origin).parent if spec is not None and spec.origin else None


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m orin_llm.backends.trtllm.rules",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--check-install", action="store_true",
                        help="look for each rule's message in the installed TensorRT-LLM")
    parser.add_argument("--package-dir", type=Path, help="the tensorrt_llm package directory (default: found)")
    args = parser.parse_args(argv)
    if not args.check_install:
        for rule in RULES:
            print(f"{rule.id} [{rule.stage}, {rule.evidence}]: forbids {rule.forbids}\n  {rule.cite()}\n"
                  f"  fix: {rule.fix}")
        return 0
    package = args.package_dir or _package_dir()
    if package is None:
        print("tensorrt_llm is not installed here: nothing to check (run this on the Orin)")
        return 1
    for rule, found in check_install(package):
        where = installed_files(package)[rule.stage]
        state = {True: "present", False: "ABSENT", None: "file missing"}[found]
        print(f"{state:>12}  {rule.id} ({rule.evidence}) in {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
