"""yaml_process.py: the YAML parser process answers under its time limit, and comes back after a
body that ran over it, a crash, or a kill from outside."""

from __future__ import annotations

import asyncio
import sys
import threading

import pytest

from orin_llm.server.bodies import MAX_NODES, BodyError
from orin_llm.server.yaml_process import YamlProcess

from .test_bodies import alias_bomb


@pytest.fixture
def parser():
    p = YamlProcess()
    yield p
    p.close()


def error(parser: YamlProcess, body: bytes) -> BodyError:
    with pytest.raises(BodyError) as e:
        parser.parse_blocking(body)
    return e.value


def test_bodies_are_parsed_in_one_process_that_stays(parser):
    home = parser.parse_blocking(b"name: h\nrooms: [{name: kitchen}]\n")
    assert home == {"name": "h", "rooms": [{"name": "kitchen"}]}
    first = parser._proc
    assert "aliases" in error(parser, alias_bomb().encode()).message
    assert error(parser, b"name: [broken\n").status == 422
    assert asyncio.run(parser.parse(b"a: 1\n")) == {"a": 1}
    assert parser._proc is first and first.poll() is None  # errors are answers: the process stays


def test_a_body_over_the_time_limit_gets_413_and_a_new_process(parser):
    slow = ("[" + ",".join(["a"] * (4 * MAX_NODES)) + "]").encode()  # composing it takes longer than this limit
    parser.parse_s = 0.001
    first = parser._running()
    e = error(parser, slow)
    assert e.status == 413 and "took more than 0.001 s to parse" in e.message and "as JSON" in e.message
    assert first.poll() is not None  # killed
    parser.parse_s = 30
    assert parser.parse_blocking(b"a: 1\n") == {"a": 1} and parser._proc is not first


def test_a_process_killed_from_outside_is_started_again(parser):
    parser.parse_blocking(b"a: 1\n")
    parser._proc.kill()
    parser._proc.wait()
    assert parser.parse_blocking(b"b: 2\n") == {"b": 2}


def test_a_process_that_dies_on_a_body_gets_422():
    crashing = YamlProcess(command=(sys.executable, "-c", "import sys; sys.stdin.buffer.read(4); sys.exit(3)"))
    try:
        e = error(crashing, b"a: 1\n")
        assert e.status == 422 and "ended on this body" in e.message
    finally:
        crashing.close()


def test_bodies_sent_together_each_get_their_own_answer(parser):
    answers: dict[int, object] = {}

    def send(i: int) -> None:
        answers[i] = parser.parse_blocking(f"n: {i}\nitems: [{', '.join(['x'] * i)}]\n".encode())

    threads = [threading.Thread(target=send, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert answers == {i: {"n": i, "items": ["x"] * i} for i in range(8)}


def test_close_stops_the_process(parser):
    parser.parse_blocking(b"a: 1\n")
    proc = parser._proc
    parser.close()
    assert proc.poll() is not None and parser._proc is None
