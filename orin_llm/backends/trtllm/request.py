"""The executor's requests as TensorRT-LLM 0.12.0-jetson takes them: `Request` with its `SamplingConfig`
(greedy or sampled), output, end/pad/stop ids, external draft tokens and the grammar's post-processor.
The engine (backends/trtllm/engine.py) makes them with its module and ids; citations as there."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Optional

from ...runtime.sampling import SamplingParams
from .grammar import PROCESSOR


def greedy_config(module: Any) -> Any:
    # SamplingConfig(beam_width=1, top_k=None, top_p=None, ..., random_seed=None, temperature=None, ...)
    # (R≡J bindings.cpp L161-196). top_k=1 is greedy (argmax); run.py's default too (R examples/utils.py
    # L171). Unset top_k and top_p would also end up greedy (both default to 0, R
    # cpp/include/tensorrt_llm/layers/defaultDecodingParams.h L63-71, and k=0, p=0 becomes k=1 in R
    # cpp/tensorrt_llm/layers/topKSamplingLayer.cu L46-52), but we say it.
    return module.SamplingConfig(beam_width=1, top_k=1)


def sampled_config(module: Any, params: SamplingParams, seed: int) -> Any:
    # top_p in (0, 1], temperature >= 0 (checked by the C++ SamplingConfig); `random_seed`, not `seed`.
    return module.SamplingConfig(beam_width=1, top_p=params.top_p, temperature=params.temperature,
                                 random_seed=seed)


def make_request(module: Any, ids: list[int], max_new_tokens: int, streaming: bool, sampling: Any, *,
                 end_id: int, pad_id: int, draft: Optional[list[int]] = None, stop_ids: Iterable[int] = (),
                 grammar_client: Optional[int] = None) -> Any:
    """Request(input_token_ids, max_new_tokens, streaming=False, sampling_config, output_config, end_id,
    pad_id, bad_words, stop_words, embedding_bias, external_draft_tokens_config, ...) (R≡J bindings.cpp
    L226-264)."""
    # stop_words is list[list[int]], one token sequence per stop word (R≡J bindings.cpp L226-264; J
    # examples/run.py passes GLM-4's end ids as [[151329], [151336], [151338]]). Stop strings stay
    # TextStream's (they need text, not ids); a hit cancels the request.
    stops = [[t] for t in sorted(set(stop_ids) - {end_id})]
    kwargs: dict[str, Any] = dict(
        input_token_ids=list(ids), max_new_tokens=max_new_tokens, streaming=streaming,
        sampling_config=sampling,
        # Only the new tokens, streamed or not (OutputConfig, R≡J bindings.cpp L198-206).
        output_config=module.OutputConfig(exclude_input_from_output=True),
        end_id=end_id, pad_id=pad_id, stop_words=stops or None)
    if draft:
        # ExternalDraftTokensConfig(tokens, logits=None, acceptance_threshold=None) (R≡J L208-213):
        # no logits, so the target accepts by token id.
        kwargs["external_draft_tokens_config"] = module.ExternalDraftTokensConfig(tokens=list(draft))
    if grammar_client is not None:
        # logits_post_processor_name and client_id are Request keywords (R≡J bindings.cpp L226-264): the
        # named post-processor masks every step; the client_id finds the request's grammar state.
        kwargs["logits_post_processor_name"] = PROCESSOR
        kwargs["client_id"] = grammar_client
    return module.Request(**kwargs)
