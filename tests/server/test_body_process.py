"""body_process.py: a home's body is read and checked in a process of its own, which answers within
its time limit and comes back after a body that ran over it, a crash, or a kill from outside; its
replies may hold only what a body can."""

from __future__ import annotations

import asyncio
import datetime
import io
import json
import pickle
import sys
import threading

import pytest

from orin_llm.planning.home import EXAMPLE_HOME_PATH
from orin_llm.server import body_process
from orin_llm.server.bodies import MAX_NODES, BodyError
from orin_llm.server.body_process import BodyProcess, read_reply

from .test_bodies import alias_bomb

HOME = b"name: h\nrooms: [{name: kitchen, places: [sink]}]\nactions: [{name: go_to, args: [place]}]\n"


@pytest.fixture
def process():
    p = BodyProcess()
    yield p
    p.close()


def error(process: BodyProcess, body: bytes, yaml: bool = True) -> BodyError:
    with pytest.raises(BodyError) as e:
        process.environment_blocking(body, yaml)
    return e.value


def test_homes_are_read_and_checked_in_one_process_that_stays(process):
    home = process.environment_blocking(HOME, yaml=True)
    assert home["rooms"] == [{"name": "kitchen", "places": ["sink"]}]
    first = process._proc
    assert process.environment_blocking(json.dumps(home).encode(), yaml=False) == home
    assert asyncio.run(process.environment(EXAMPLE_HOME_PATH.read_bytes(), yaml=True))["name"] == "example_home"
    assert "aliases" in error(process, alias_bomb().encode()).message
    assert "not valid YAML at line 2, column 1" in error(process, b"name: [broken\n").message
    assert "a YAML home needs Content-Type: application/yaml" in error(process, b"name: h\n", yaml=False).message
    e = error(process, json.dumps({"name": "h", "rooms": 3}).encode(), yaml=False)  # the home's own check
    assert e.status == 422 and e.message.startswith("environment: rooms: ")
    assert process._proc is first and first.poll() is None  # errors are answers: the process stays


def test_a_body_over_the_time_limit_gets_413_and_a_new_process(process):
    slow = ("[" + ",".join(["a"] * (4 * MAX_NODES)) + "]").encode()  # composing it takes longer than this limit
    process.parse_s = 0.001
    first = process._running()  # started (its imports are not counted in the limit)
    e = error(process, slow)
    assert e.status == 413 and "took more than 0.001 s to read (the limit)" in e.message and "as JSON" in e.message
    assert first.poll() is not None  # killed
    process.parse_s = 30
    assert process.environment_blocking(HOME, yaml=True)["name"] == "h" and process._proc is not first


def test_a_process_killed_from_outside_is_started_again(process):
    process.environment_blocking(HOME, yaml=True)
    process._proc.kill()
    process._proc.wait()
    assert process.environment_blocking(HOME, yaml=True)["name"] == "h"


@pytest.mark.parametrize("code, words", [
    ("import sys; from orin_llm.server.body_process import write_frame as w; w(sys.stdout.buffer, b'ready'); "
     "sys.stdin.buffer.read(4); sys.exit(3)", "ended on this body"),
    ("import sys; sys.exit(3)", "did not start within 60 s (the daemon's log says why)"),  # before it was ready
    ("import sys; from orin_llm.server.body_process import write_frame as w; w(sys.stdout.buffer, b'hello')",
     "did not start: it said b'hello'"),
])
def test_a_process_that_dies_or_says_something_else_is_an_error_not_a_hang(code, words):
    broken = BodyProcess(command=(sys.executable, "-c", code))
    try:
        assert words in error(broken, HOME).message
        assert broken._proc is None  # the next body gets a new one
    finally:
        broken.close()


def test_bodies_sent_together_each_get_their_own_answer(process):
    answers: dict[int, object] = {}

    def send(i: int) -> None:
        answers[i] = process.environment_blocking(f"name: h{i}\ntext: a flat of {i} rooms\n".encode(), yaml=True)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert answers == {i: {"name": f"h{i}", "text": f"a flat of {i} rooms"} for i in range(8)}


def test_close_stops_the_process(process):
    process.environment_blocking(HOME, yaml=True)
    proc = process._proc
    process.close()
    assert proc.poll() is not None and process._proc is None


def reply(kind: str, *rest) -> bytes:
    return pickle.dumps((kind, *rest))


def test_replies_carry_documents_and_errors():
    doc = {"d": datetime.datetime(2024, 1, 2, 3, 4, tzinfo=datetime.timezone.utc), "b": b"\x00", "s": {1, 2},
           "t": datetime.timedelta(1), "x": [1.5, None, True]}
    assert read_reply(reply("ok", doc)) == doc
    with pytest.raises(BodyError) as e:
        read_reply(reply("error", 413, "too big"))
    assert (e.value.status, e.value.message) == (413, "too big")


class Evil:
    def __reduce__(self):
        return (print, ("never",))


def test_a_reply_that_would_call_anything_is_refused():
    with pytest.raises(pickle.UnpicklingError, match="builtins.print, which a body cannot hold"):
        read_reply(reply("ok", Evil()))


def test_the_process_loop_says_ready_then_answers_frame_by_frame_until_its_input_closes():
    frames = b"".join(body_process.FRAME.pack(len(b)) + b for b in (b"y" + HOME, b"ya: &x 1\nb: *x\n"))
    out = io.BytesIO()
    body_process.serve(io.BytesIO(frames), out)
    out.seek(0)
    assert body_process.read_frame(out) == body_process.READY
    assert read_reply(body_process.read_frame(out))["name"] == "h"
    with pytest.raises(BodyError, match="aliases"):
        read_reply(body_process.read_frame(out))
    with pytest.raises(EOFError):
        body_process.read_frame(out)
