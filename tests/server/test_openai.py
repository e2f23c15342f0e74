"""The official `openai` client talks to the daemon over its Unix socket, as is."""

from __future__ import annotations

import importlib

import pytest

openai = pytest.importorskip("openai")


def http_module():
    """openai's http_client must be its own HTTP library's Client: httpx2 from openai 3 on, httpx before."""
    base = next(c for c in openai.DefaultHttpxClient.__mro__[1:] if c.__name__ == "Client")
    return importlib.import_module(base.__module__.split(".")[0])


@pytest.fixture(scope="module")
def oai(daemon):
    http = http_module()
    client = openai.OpenAI(base_url="http://localhost/v1", api_key="x", max_retries=0,
                           http_client=http.Client(transport=http.HTTPTransport(uds=str(daemon.socket))))
    yield client
    client.close()


MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name a fruit."}]


def test_chat_completion(oai, client):
    r = oai.chat.completions.create(model="gpt-4o", messages=MESSAGES, max_tokens=8, seed=1, user="robot")
    assert r.model == client.health()["engine"]  # whatever the request named
    assert r.object == "chat.completion" and len(r.choices) == 1
    assert r.choices[0].message.role == "assistant" and r.choices[0].message.content
    assert r.choices[0].finish_reason in ("stop", "length")
    assert 0 < r.usage.completion_tokens <= 8
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_streaming_chat_completion_matches(oai):
    whole = oai.chat.completions.create(model="x", messages=MESSAGES, max_tokens=8)
    chunks = list(oai.chat.completions.create(model="x", messages=MESSAGES, max_tokens=8, stream=True,
                                              stream_options={"include_usage": True}))
    assert all(c.object == "chat.completion.chunk" and c.id == chunks[0].id for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content  # greedy: the same answer
    assert chunks[-2].choices[0].finish_reason == whole.choices[0].finish_reason
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_errors_reach_the_openai_client(oai):
    with pytest.raises(openai.UnprocessableEntityError, match="n must be 1"):
        oai.chat.completions.create(model="x", messages=MESSAGES, n=2)
    with pytest.raises(openai.APIStatusError, match="deadline of 1 ms exceeded"):
        oai.chat.completions.create(model="x", messages=MESSAGES, max_tokens=500,
                                    extra_body={"deadline_ms": 1})
