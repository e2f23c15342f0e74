"""Both engines implement runtime/backend.py's `Backend`, and their requests its `Request`.

Checked twice: statically, on the classes (every member of the protocol is there, a property as a
property, a classmethod as one, and each method accepts the protocol's parameters by the same names,
with any extra ones optional), and at run time on loaded engines (`isinstance` against the
runtime-checkable protocol, which also sees the attributes set in __init__, and the capabilities
each one reports).
"""

from __future__ import annotations

import inspect

import pytest

from orin_llm.runtime.backend import Backend, Capabilities, EngineStats, Request
from orin_llm.runtime.engine import Engine
from orin_llm.runtime.generate import Generation
from orin_llm.runtime.sampling import SamplingParams
from orin_llm.runtime.trtllm.engine import TrtllmEngine
from orin_llm.runtime.trtllm.generation import TrtllmGeneration, TrtllmPin
from tests.conftest import tiny_fixture

from .test_trtllm_engine import make_engine_dir

tiny_engine = tiny_fixture("engine")  # random weights do here (tests/conftest.py)
tiny_engine_dir = tiny_fixture("engine_dir")


def members(protocol: type) -> dict[str, object]:
    """The protocol's methods and properties, as declared (attributes are checked at run time)."""
    return {name: value for name, value in vars(protocol).items()
            if not name.startswith("_") and (callable(value) or isinstance(value, (property, classmethod)))}


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
            continue  # its options are each backend's own (runtime/loader.py passes them on)
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


@pytest.mark.parametrize("cls", [Engine, TrtllmEngine])
def test_both_engines_implement_the_backend_protocol(cls):
    assert mismatches(Backend, cls) == []


@pytest.mark.parametrize("cls", [Generation, TrtllmGeneration, TrtllmPin])
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


def test_loaded_engines_are_backends_and_say_what_they_can_do(engine, tmp_path, engine_dir, fake):
    trt = TrtllmEngine.load(make_engine_dir(engine_dir, tmp_path / "trt"))
    try:
        for eng in (engine, trt):
            assert isinstance(eng, Backend)
            assert isinstance(eng.capabilities, Capabilities) and isinstance(eng.stats(), EngineStats)
            assert eng.capabilities.speculation == tuple(eng.speculation_modes)
        torch_caps, trt_caps = engine.capabilities, trt.capabilities
        assert torch_caps.max_batch == engine.manifest.limits["max_batch_size"] == engine.stats().max_running
        assert torch_caps.tunable_batch and torch_caps.paced_prefill and torch_caps.persistent_histories
        assert torch_caps.kernels and torch_caps.pins_hold and torch_caps.grammars
        # the executor batches in flight: as many requests as the target engine was built for
        assert trt_caps.max_batch == trt.max_running == trt.stats().max_running > 1 and trt_caps.grammars
        assert not (trt_caps.tunable_batch or trt_caps.paced_prefill or trt_caps.persistent_histories
                    or trt_caps.kernels or trt_caps.pins_hold)
        assert trt.stats() == EngineStats(waiting=0, running=0, max_running=trt.max_running)
        gen = trt.generate(trt.encode("Go to the kitchen."), SamplingParams(max_tokens=2))
        trt.submit(gen)
        assert trt.stats().waiting == 1 and trt.busy
        trt.abort(gen)
        assert not trt.busy and gen.done and gen.result is None
    finally:
        trt.close()


def test_settings_an_engine_cannot_honour_are_refused(tmp_path, engine_dir, fake):
    from orin_llm.errors import OrinError

    trt = TrtllmEngine.load(make_engine_dir(engine_dir, tmp_path / "trt"))
    try:
        with pytest.raises(OrinError, match="batches and paces prompts inside its executor"):
            trt.tune(max_running=1)
        with pytest.raises(OrinError, match="keeps one lookup history in memory"):
            trt.persist_histories(tmp_path / "lookup")
    finally:
        trt.close()
