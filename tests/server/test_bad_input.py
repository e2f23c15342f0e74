"""Bad input gets a 4xx whose message says what to fix, and the daemon keeps answering."""

from __future__ import annotations

import socket
import time

import httpx
import pytest

pytestmark = pytest.mark.full

PLAN, CHAT, ENV, STATE = "/v1/plan", "/v1/chat/completions", "/v1/environment", "/v1/environment/state"
HI = [{"role": "user", "content": "hi"}]

CASES = [  # (id, method, path, body: dict (JSON) or bytes (raw), status, words the message must contain)
    ("malformed-json", "POST", PLAN, b'{"task": "open the fridge",', 422, "not valid JSON"),
    ("not-an-object", "POST", PLAN, b'["open the fridge"]', 422, "the body must be a JSON object, got a list"),
    ("unknown-field", "POST", PLAN, {"task": "x", "bogus": 1}, 422, "bogus: unknown field"),
    ("wrong-type", "POST", PLAN, {"task": "x", "max_tokens": "lots"}, 422, "max_tokens"),
    # strict types: no string or boolean for a number, no number for a boolean
    ("max-tokens-string", "POST", PLAN, {"task": "x", "max_tokens": "8"}, 422,
     'max_tokens: Input should be a valid integer, got "8" (a string)'),
    ("max-tokens-bool", "POST", PLAN, {"task": "x", "max_tokens": True}, 422, "got true (a boolean)"),
    ("max-tokens-float", "POST", PLAN, {"task": "x", "max_tokens": 8.5}, 422, "got 8.5 (a number)"),
    ("seed-string", "POST", PLAN, {"task": "x", "seed": "1"}, 422, "seed"),
    ("temperature-string", "POST", PLAN, {"task": "x", "temperature": "0.5"}, 422, 'got "0.5" (a string)'),
    ("stream-number", "POST", PLAN, {"task": "x", "stream": 1}, 422, "stream: Input should be a valid boolean"),
    ("task-number", "POST", PLAN, {"task": 5}, 422, "task"),
    ("chat-max-tokens-bool", "POST", CHAT, {"messages": HI, "max_tokens": False}, 422, "got false (a boolean)"),
    ("chat-include-usage-string", "POST", CHAT, {"messages": HI, "stream_options": {"include_usage": "yes"}}, 422,
     "stream_options.include_usage"),
    # Python's JSON parser reads NaN and ±Infinity although JSON has no such numbers: named, refused
    ("temperature-nan", "POST", PLAN, b'{"task": "x", "temperature": NaN}', 422,
     "temperature: must be a finite number, got NaN"),
    ("top-p-infinity", "POST", PLAN, b'{"task": "x", "top_p": Infinity}', 422, "top_p: must be a finite number, "
     "got Infinity"),
    ("chat-temperature-minus-infinity", "POST", CHAT, b'{"messages": [{"role": "user", "content": "hi"}], '
     b'"temperature": -Infinity}', 422, "got -Infinity"),
    ("missing-task", "POST", PLAN, {"max_tokens": 4}, 422, "task: required"),
    ("empty-task", "POST", PLAN, {"task": ""}, 422, "task"),
    ("blank-task", "POST", PLAN, {"task": "   "}, 422, "blank"),
    ("task-too-long", "POST", PLAN, {"task": "x" * 2001}, 422, "2000"),
    ("too-many-observations", "POST", PLAN, {"task": "x", "observations": ["o"] * 65}, 422, "observations"),
    ("max-tokens-zero", "POST", PLAN, {"task": "x", "max_tokens": 0}, 422, "max_tokens"),
    ("max-tokens-over-limit", "POST", PLAN, {"task": "x", "max_tokens": 100_000}, 422, "at most 2048"),
    ("negative-temperature", "POST", PLAN, {"task": "x", "temperature": -1}, 422, "temperature"),
    ("tiny-temperature", "POST", PLAN, {"task": "x", "temperature": 1e-300}, 422, "temperature"),
    ("top-p-zero", "POST", PLAN, {"task": "x", "top_p": 0}, 422, "top_p"),
    ("huge-seed", "POST", PLAN, {"task": "x", "seed": 2**64}, 422, "seed"),
    ("zero-deadline", "POST", PLAN, {"task": "x", "deadline_ms": 0}, 422, "deadline_ms"),
    ("unknown-speculation", "POST", PLAN, {"task": "x", "speculation": "medusa"}, 422, "medusa"),
    ("lone-surrogate", "POST", PLAN, b'{"task": "open \\ud800 the fridge"}', 422, "nicode"),
    ("env-lone-surrogate", "PUT", ENV, b'{"name": "h", "text": "a \\ud800 flat"}', 422, "nicode"),
    ("chat-n-2", "POST", CHAT, {"messages": HI, "n": 2}, 422, "n must be 1"),
    ("chat-no-messages", "POST", CHAT, {"messages": []}, 422, "messages"),
    ("chat-tool-role", "POST", CHAT, {"messages": [{"role": "tool", "content": "x"}]}, 422,
     "tool_call_id: required in a tool message"),
    ("chat-penalty", "POST", CHAT, {"messages": HI, "presence_penalty": 0.5}, 422, "penalties"),
    ("chat-logprobs", "POST", CHAT, {"messages": HI, "logprobs": True}, 422, "logprobs"),
    ("chat-tools", "POST", CHAT, {"messages": HI, "tools": []}, 422, "tools: List should have at least 1 item"),
    ("chat-unknown-speculation", "POST", CHAT, {"messages": HI, "speculation": "eagle"}, 422, "eagle"),
    ("chat-max-tokens-over-limit", "POST", CHAT, {"messages": HI, "max_completion_tokens": 10**6}, 422,
     "at most 2048"),
    ("env-not-an-object", "PUT", ENV, b"[1, 2]", 422, "must be a mapping"),
    ("env-not-json", "PUT", ENV, b"name: h\ntext: a flat\n", 422, "a YAML home needs Content-Type: application/yaml"),
    ("env-empty", "PUT", ENV, b"", 422, "the body is empty"),
    ("env-bad-key", "PUT", ENV, {"name": "h", "rooms": [{"name": "living room"}], "actions": [{"name": "go"}]},
     422, "rooms.0.name"),
    ("env-unknown-key", "PUT", ENV, {"name": "h", "text": "a flat", "garden": 1}, 422, "unknown key 'garden'"),
    ("env-bad-if-match", "PUT", ENV, {"name": "h", "text": "a flat"}, 412, "If-Match"),
    ("goal-unknown-place", "POST", PLAN, {"task": "x", "goal": ["at(mug, garage)"]}, 422,
     "goal fact 'at(mug, garage)': 'garage' is not a room or place of this home"),
    ("goal-unknown-predicate", "POST", PLAN, {"task": "x", "goal": ["fly(mug)"]}, 422, "'fly' is not a goal predicate"),
    ("goal-without-simulation", "POST", PLAN, {"task": "x", "goal": ["said"], "feasibility": "off"}, 422,
     'feasibility "off" simulates nothing'),
    ("goal-infer-misspelt", "POST", PLAN, {"task": "x", "goal": "infer it"}, 422,
     'goal: a list of facts like ["at(mug, sink)"], "infer" to have the model read them in the task text'),
    ("goal-infer-without-simulation", "POST", PLAN, {"task": "x", "goal": "infer", "feasibility": "off"}, 422,
     'feasibility "off" simulates nothing'),
    ("plan-state-unknown-object", "POST", PLAN, {"task": "x", "state": {"holding": "unicorn"}}, 422,
     "holding: 'unicorn' is not an object of this home"),
    ("state-unknown-object", "PATCH", STATE, {"object_at": {"unicorn": "sofa"}}, 422,
     "object_at: 'unicorn' is not an object of this home"),
    ("state-two-places", "PATCH", STATE, {"object_at": {"mug": ["sofa", "sink"]}}, 422,
     "an object lies in one place at a time"),
    ("state-unknown-key", "PATCH", STATE, {"colour": "red"}, 422, "unknown key 'colour'"),
    ("state-not-an-object", "PATCH", STATE, b"[1]", 422, "Input should be a valid dictionary"),
    ("state-unknown-home", "GET", "/v1/environments/attic/state", None, 404, "no environment named 'attic'"),
    ("home-name-with-a-slash", "PUT", "/v1/environments/flat%2F2", {"name": "h", "text": "a flat"}, 422,
     "environment name 'flat/2': use 1 to 128 letters"),
    ("unknown-path", "GET", "/v1/nothing", None, 404, "Not Found"),
    ("wrong-method", "GET", PLAN, None, 405, "Method Not Allowed"),
]


@pytest.fixture(scope="module")
def http(daemon):
    with httpx.Client(transport=httpx.HTTPTransport(uds=str(daemon.socket)), base_url="http://orin-llm",
                      timeout=60) as h:
        yield h


def send(http, method, path, body, headers=None):
    if isinstance(body, bytes):
        return http.request(method, path, content=body, headers={"content-type": "application/json",
                                                                 **(headers or {})})
    return http.request(method, path, json=body, headers=headers)


@pytest.mark.parametrize("method, path, body, status, words", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_refused_with_a_message(http, client, method, path, body, status, words):
    headers = {"If-Match": "yesterday"} if "If-Match" in words else None
    r = send(http, method, path, body, headers)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert words in error["message"] and error["code"] == status
    assert client.health()["ready"]


def test_oversized_bodies_get_413(http, client):
    big = b'{"task": "' + b"x" * 300_000 + b'"}'
    r = send(http, "POST", PLAN, big)
    assert r.status_code == 413 and "262144 bytes" in r.json()["error"]["message"]

    def chunks():  # no Content-Length: counted as it arrives
        for _ in range(40):
            yield b"x" * 10_000

    r = http.post(CHAT, content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413, r.text
    assert client.health()["ready"]


def test_too_many_prompt_tokens_get_413_naming_the_limit(http, client):
    observations = [" ".join(f"item{i}_{j}" for j in range(300))[:2000] for i in range(64)]
    r = http.post(PLAN, json={"task": "tidy up", "observations": observations})
    assert r.status_code == 413, r.text
    assert "max_input_len of 6144" in r.json()["error"]["message"]
    r = http.post(CHAT, json={"messages": [{"role": "user", "content": "word " * 20_000}]})
    assert r.status_code == 413 and "max_input_len" in r.json()["error"]["message"]
    assert client.plan("Open the fridge.", max_tokens=2, goal="none")["finish_reason"] == "length"  # it answers


def test_garbage_on_the_socket_does_not_hurt(daemon, client):
    junk = [b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(range(256)),  # a TLS hello
            b"GARBAGE / HTTP/9.9\r\n\r\n",
            b"POST /v1/plan HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"task\"",  # then hang up
            b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 100_000 + b"\r\n\r\n",
            b"\r\n" * 1000,
            b""]  # connect and hang up at once
    for data in junk:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(5)
            s.connect(str(daemon.socket))
            try:
                s.sendall(data)
                s.shutdown(socket.SHUT_WR)
                reply = s.recv(200)
            except OSError:  # the daemon may hang up first: fine
                reply = b""
        assert reply == b"" or reply.startswith(b"HTTP/1.1 "), reply  # an answer (often 400) or a hang-up
    time.sleep(0.2)
    assert client.health()["ready"]
    assert client.plan("Open the fridge.", max_tokens=2, goal="none")["finish_reason"] == "length"  # it answers
