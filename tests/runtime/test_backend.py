"""Both engines implement runtime/backend.py's `Backend`, and their requests its `Request`; so does the
remote race that wraps either (backends/remote/hedged.py `HedgedBackend`, `serve --remote`), which
declares what it offers: no attribute is forwarded to the engine it wraps.

Checked twice: statically, on the classes (every member of the protocol is there, a property as a
property, a classmethod as one, and each method accepts the protocol's parameters by the same names,
with any extra ones optional), and at run time on loaded engines (`isinstance` against the
runtime-checkable protocol, which also sees the attributes set in __init__, and the capabilities
each one reports); the TensorRT-LLM engine's on the fake executor and on the real bindings (`eng`,
tests/backends/trtllm/trtllm_both.py); the Edge-LLM engine's against the fake of its server
(tests/backends/edgellm/test_edgellm_engine.py).
"""

from __future__ import annotations

import inspect

import pytest

from orin_llm.backends.edgellm.engine import EdgellmEngine
from orin_llm.backends.edgellm.request import EdgellmRequest
from orin_llm.backends.remote.hedged import HedgedBackend, HedgedRequest
from orin_llm.backends.remote.settings import RemoteSettings
from orin_llm.backends.trtllm.engine import TrtllmEngine
from orin_llm.backends.trtllm.generation import TrtllmGeneration
from orin_llm.backends.trtllm.prefix_reuse import TrtllmPin
from orin_llm.runtime.backend import Backend, Capabilities, EngineStats, Request
from orin_llm.runtime.engine import Engine
from orin_llm.runtime.generate import Generation
from orin_llm.runtime.sampling import SamplingParams
from tests.conftest import tiny_fixture

tiny_engine = tiny_fixture("engine")  # random weights do here (tests/conftest.py)
tiny_engine_dir = tiny_fixture("engine_dir")


def members(protocol: type) -> dict[str, object]:
    """The protocol's methods and properties, as declared (attributes are checked at run time)."""
    return {name: value for name, value in vars(protocol).items()
            if not name.startswith("_") and (callable(value) or isinstance(value, (property, classmethod)))}


def missing_fields(protocol: type, obj: object) -> list[str]:
    """The protocol's annotated attributes `obj` lacks (the static check sees methods and properties)."""
    return [name for name in protocol.__annotations__ if not hasattr(obj, name)]


def mismatches(protocol: type, cls: type) -> list[str]:
    out = []
    for name, declared in members(protocol).items():
        actual = inspect.getattr_static(cls, name, None)
        if actual is None:
            out.append(f"{cls.__name__}.{name} is missing")
            continue
        if isinstance(declared, property):
            if not isinstance(actual, property):
                out.append(f"{cls.__name__}.{name} should be a property")
            continue
        if isinstance(declared, classmethod):
            if not isinstance(actual, classmethod):
                out.append(f"{cls.__name__}.{name} should be a classmethod")
            continue  # its options are each backend's own (backends/loader.py passes them on)
        want = inspect.signature(declared).parameters
        have = inspect.signature(actual).parameters
        by_position = list(have.values())
        for i, (pname, p) in enumerate(want.items()):
            if pname == "self":
                continue
            # a positional-only parameter (before "/") is matched by position: its name is the engine's own
            q = (by_position[i] if i < len(by_position) else None) if p.kind == p.POSITIONAL_ONLY else have.get(pname)
            if q is None or q.kind in (q.VAR_POSITIONAL, q.VAR_KEYWORD, q.KEYWORD_ONLY):
                out.append(f"{cls.__name__}.{name} takes no {pname!r}")
            elif (p.default is inspect.Parameter.empty) != (q.default is inspect.Parameter.empty):
                should = "required" if p.default is inspect.Parameter.empty else "optional"
                out.append(f"{cls.__name__}.{name}: {pname!r} should be {should}")
        extra = [n for i, (n, q) in enumerate(have.items()) if q.default is inspect.Parameter.empty
                 and q.kind not in (q.VAR_POSITIONAL, q.VAR_KEYWORD) and i >= len(want)
                 and n not in want]
        if extra:
            out.append(f"{cls.__name__}.{name} requires {extra}, which the protocol does not pass")
    return out


@pytest.mark.parametrize("cls", [Engine, TrtllmEngine, HedgedBackend, EdgellmEngine])
def test_both_engines_implement_the_backend_protocol(cls):
    assert mismatches(Backend, cls) == []


@pytest.mark.parametrize("cls", [Generation, TrtllmGeneration, TrtllmPin, HedgedRequest, EdgellmRequest])
def test_their_requests_implement_the_request_protocol(cls):
    assert mismatches(Request, cls) == []


def test_the_static_check_sees_a_missing_member_and_a_wrong_signature():
    class Half:
        def submit(self) -> None: ...  # no request

        def step(self, n): ...  # a required parameter the protocol does not pass

        busy = False  # not a property

    found = mismatches(Backend, Half)
    assert "Half.submit takes no 'request'" in found
    assert "Half.step requires ['n'], which the protocol does not pass" in found
    assert "Half.busy should be a property" in found and "Half.abort is missing" in found


def test_a_loaded_torch_engine_is_a_backend_and_says_what_it_can_do(engine):
    assert isinstance(engine, Backend)
    assert isinstance(engine.capabilities, Capabilities) and isinstance(engine.stats(), EngineStats)
    caps = engine.capabilities
    assert caps.speculation == tuple(engine.speculation_modes)
    assert caps.max_batch == engine.manifest.limits["max_batch_size"] == engine.stats().max_running
    assert caps.tunable_batch and caps.paced_prefill and caps.persistent_histories
    assert caps.kernels and caps.pins_hold and caps.grammars
    request = engine.generate(engine.encode("Go to the kitchen."), SamplingParams(max_tokens=2))
    assert missing_fields(Request, request) == [] and request.report == {} and request.deadline is None
    assert missing_fields(Request, Generation) == ["prompt_ids", "started", "deadline", "error", "result",
                                                   "timings", "pin"]  # (the check sees what a class lacks)


def test_the_remote_race_is_a_backend_of_its_own_and_forwards_nothing(engine):
    hedged = HedgedBackend(engine, RemoteSettings("http://127.0.0.1:1"))
    assert isinstance(hedged, Backend) and hedged.capabilities == engine.capabilities
    assert "__getattr__" not in vars(HedgedBackend)  # issue #42: `run` reached the local engine with our request
    assert not hasattr(hedged, "deltas") and not hasattr(hedged, "cache")
    request = hedged.generate(engine.encode("Go to the kitchen."), SamplingParams(max_tokens=2))
    assert isinstance(request, HedgedRequest) and mismatches(Request, type(request)) == []
    assert missing_fields(Request, request) == [] and request.report["served_by"] == "remote"


def test_a_loaded_trtllm_engine_is_a_backend_and_says_what_it_can_do(eng):
    assert isinstance(eng, Backend)
    caps = eng.capabilities
    assert isinstance(caps, Capabilities) and isinstance(eng.stats(), EngineStats)
    assert caps.speculation == tuple(eng.speculation_modes)
    # the executor batches in flight: as many requests as the target engine was built for
    assert caps.max_batch == eng.max_running == eng.stats().max_running == eng.manifest.limits["max_batch_size"] > 1
    assert caps.grammars
    assert not (caps.tunable_batch or caps.paced_prefill or caps.persistent_histories or caps.kernels
                or caps.pins_hold)
    assert eng.stats() == EngineStats(waiting=0, running=0, max_running=eng.max_running)
    gen = eng.generate(eng.encode("Go to the kitchen."), SamplingParams(max_tokens=2))
    assert missing_fields(Request, gen) == [] and gen.report == {}
    eng.submit(gen)
    assert eng.stats().waiting == 1 and eng.busy
    eng.abort(gen)
    assert not eng.busy and gen.done and gen.result is None


def test_settings_an_engine_cannot_honour_are_refused(eng, tmp_path):
    from orin_llm.errors import OrinError

    with pytest.raises(OrinError, match="batches and paces prompts inside its executor"):
        eng.tune(max_running=1)
    with pytest.raises(OrinError, match="keeps one lookup history in memory"):
        eng.persist_histories(tmp_path / "lookup")
