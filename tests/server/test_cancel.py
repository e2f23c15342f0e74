"""Clients that go away and deadlines that pass: the generation stops, the KV cache goes back to
the pinned prefix, and the other clients are served as if nothing happened."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time

import httpx
import pytest

from orin_llm.client import PlannerError

pytestmark = pytest.mark.full

LONG = "Describe, step by step and in great detail, how to tidy up every room of the home."


def counter(client, endpoint: str, outcome: str) -> float:
    m = re.search(rf'^orin_llm_requests_total{{endpoint="{endpoint}",outcome="{outcome}"}} (\S+)$',
                  client.metrics(), re.M)
    return float(m.group(1)) if m else 0.0


def wait_for(predicate, timeout_s: float = 20) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def idle(client) -> bool:
    h = client.health()
    return not h["queue"]["running"] and h["queue"]["depth"] == 0 and h["kv_cache"]["tokens"] == h["prefix_tokens"]


def test_a_client_killed_mid_stream_is_cancelled_and_others_are_served(daemon, client):
    expected = client.plan("Open the fridge.", max_tokens=16)["plan"]
    assert expected  # a whole step at least: a plan cut by max_tokens ends at its last whole step
    cancelled = counter(client, "plan", "cancelled")
    code = ("import sys\nfrom orin_llm.client import PlannerClient\n"
            f"for event in PlannerClient({str(daemon.socket)!r}).plan_stream({LONG!r}, max_tokens=1000,\n"
            "                                                                constrained=False):\n"
            "    print('delta', flush=True)\n")
    streamer = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert streamer.stdout.readline() == b"delta\n"  # it is streaming now
        other: dict = {}  # a request that runs next to the stream (the engine batches them)
        t = threading.Thread(target=lambda: other.update(daemon.client().plan("Open the fridge.", max_tokens=16)))
        t.start()
        assert wait_for(lambda: client.health()["queue"]["running"] == 2 or bool(other))
        streamer.kill()
    finally:
        streamer.kill()
        streamer.wait()
    t.join(60)
    assert other.get("plan") == expected  # served, and the same as alone: the batch changed nothing
    assert wait_for(lambda: counter(client, "plan", "cancelled") == cancelled + 1)
    assert wait_for(lambda: idle(client))  # the KV cache is back to the pinned prefix


def test_a_client_that_hangs_up_while_waiting_is_cancelled(daemon, client):
    cancelled = counter(client, "plan", "cancelled")
    with daemon.client(timeout_s=1.0) as impatient, pytest.raises(PlannerError, match="timed out"):
        impatient.plan(LONG, max_tokens=1000, constrained=False)
    assert wait_for(lambda: counter(client, "plan", "cancelled") == cancelled + 1)
    assert wait_for(lambda: idle(client))


def test_deadline_exceeded(daemon, client):
    r = httpx.Client(transport=httpx.HTTPTransport(uds=str(daemon.socket))).post(
        "http://x/v1/chat/completions", timeout=60,
        json={"messages": [{"role": "user", "content": LONG}], "max_tokens": 1000, "deadline_ms": 500})
    assert r.status_code == 504 and "deadline of 500 ms exceeded" in r.json()["error"]["message"]
    deadlines = counter(client, "plan", "deadline")
    with pytest.raises(PlannerError, match="deadline of 300 ms exceeded") as err:
        client.plan(LONG, max_tokens=1000, deadline_ms=300, constrained=False)
    assert err.value.status == 504
    with pytest.raises(PlannerError, match="deadline of 700 ms exceeded"):  # after some deltas
        list(client.plan_stream(LONG, max_tokens=1000, deadline_ms=700, constrained=False))
    assert wait_for(lambda: counter(client, "plan", "deadline") == deadlines + 2)
    assert wait_for(lambda: idle(client))
    assert client.plan("Open the fridge.", max_tokens=2, goal="none", deadline_ms=60_000)["finish_reason"] == "length"


def test_metrics_and_health(client):
    client.plan("Open the fridge.", max_tokens=2, goal="none")
    text, health = client.metrics(), client.health()
    capacity = health["kv_cache"]["capacity_tokens"]
    for name in ("orin_llm_ttft_seconds_bucket", "orin_llm_request_seconds_count", "orin_llm_queue_wait_seconds_sum",
                 "orin_llm_decode_tokens_per_second_bucket", "orin_llm_completion_tokens_total",
                 "orin_llm_queue_depth 0.0", f"orin_llm_kv_cache_capacity_tokens {capacity:.1f}"):
        assert name in text
    # the paged pool: its blocks add up, the home is pinned, prompts were served from it
    pool = health["kv_cache"]["pool"]
    assert pool["blocks"] * pool["block_size"] == capacity
    assert pool["used"] + pool["cached"] + pool["free"] == pool["blocks"] and pool["pinned"] >= 1
    for gauge, key in (("orin_llm_kv_pool_blocks_pinned", "pinned"), ("orin_llm_kv_pool_blocks", "blocks")):
        assert f"{gauge} {float(pool[key])}" in text
    assert float(re.search(r"^orin_llm_prefix_hit_tokens (\S+)$", text, re.M).group(1)) > 0
    assert health["scheduler"]["max_running"] >= 1 and "orin_llm_batch_size " in text
    # which CPU fast paths run: each true, or a reason in words (never silently off)
    kernels = health["kernels"]
    assert kernels["threads"] >= 1 and kernels["device"] == "cpu"
    for name in ("q8_dot", "int8_decode_attention", "fused_decode_layer", "int8_prompt_attention"):
        assert kernels[name] is True or (isinstance(kernels[name], str) and kernels[name]), name
    assert counter(client, "plan", "ok") >= 1
    cached = re.search(r'^orin_llm_cached_prompt_tokens_total{endpoint="plan"} (\S+)$', text, re.M)
    # the pinned prefix was reused: at least its whole blocks (cached tokens count whole blocks, so a
    # lone request's count is the prefix rounded down to the block size; earlier tests add to it)
    whole = health["prefix_tokens"] // pool["block_size"] * pool["block_size"]
    assert float(cached.group(1)) >= whole > 0
    assert f"orin_llm_prefix_tokens {float(health['prefix_tokens'])}" in text
    assert f"orin_llm_environment_version {float(health['environment']['version'])}" in text
