"""The robot's daemon planning on a REAL vLLM replica (CPU build, the embedded model) on loopback: the
home's grammar travels with each request, the engine's prefix cache serves the home's prefix, and a
replica that stalls or dies, or a link to it (a loopback proxy the test controls, proxy.py) that stalls,
drops or refuses, ends in a local answer within the deadline."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from orin_llm.backends.remote.flavors import gbnf
from orin_llm.planning.home import EXAMPLE_HOME_PATH, load_environment
from orin_llm.planning.home.grammar import plan_grammar
from orin_llm.planning.home.steps import check_steps
from tests.server.conftest import free_port

from .link_checks import check_a_broken_link, until_remote
from .proxy import Proxy
from .vllm_replica import Replica, completion, model_dir

pytestmark = pytest.mark.full
TASK = "Bring the milk from the fridge to the coffee table."
# a plan's budget on these CPU replicas: the first token of a cold 600-token prompt takes seconds there (the
# daemon's default 10 s budget, hedged at a fifth of it, would hand plans a healthy replica is serving to the
# robot's engine); the local engine starts at a fifth of it
DEADLINE_MS = 60_000


@pytest.fixture(scope="module")
def replica(engine_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("vllm")
    r = Replica(model_dir(Path(engine_dir), out / "model"), free_port(), out / "vllm.log")
    try:
        yield r.wait_ready()
    finally:
        r.stop()


@pytest.fixture(scope="module")
def remote_daemon(start_daemon, replica):
    return start_daemon("--remote", replica.url, "--remote-first-token-share", "0.2")


@pytest.fixture(scope="module")
def link(replica):
    with Proxy(replica.port) as proxy:
        yield proxy


@pytest.fixture(scope="module")
def linked_daemon(start_daemon, link):
    return start_daemon("--remote", link.url, "--remote-first-token-share", "0.2", "--remote-backoff-s", "5")


def test_vllm_itself_keeps_a_plan_on_the_home_grammar(replica):
    """The field the backend sends (structured_outputs.grammar, Lark) is honoured by this vLLM: the
    unconstrained model, asked the same, is free to write anything."""
    grammar = plan_grammar(load_environment(EXAMPLE_HOME_PATH))
    out = completion(replica.url, {"model": "embedded", "prompt": "Plan: put the moon in the fridge.\n",
                                   "max_tokens": 40, "temperature": 0, "structured_outputs": {"grammar": grammar}})
    text = out["choices"][0]["text"]
    first = text.split("\n")[0]
    assert first.split("(")[0] in {"go_to", "pick", "place", "open", "close", "switch_on", "switch_off", "say"}, text


def test_the_gbnf_sent_to_sglang_and_trtllm_holds_a_plan_on_xgrammar(replica):
    """SGLang's `ebnf` and trtllm-serve's `response_format` ebnf reach xgrammar as GBNF (flavors.py); this
    vLLM hands a GBNF grammar to the same xgrammar: a plan under it is steps of the home, line by line."""
    env = load_environment(EXAMPLE_HOME_PATH)
    out = completion(replica.url, {"model": "embedded", "prompt": "Plan: put the moon in the fridge.\n",
                                   "max_tokens": 40, "temperature": 0,
                                   "structured_outputs": {"grammar": gbnf(plan_grammar(env))}})
    text = out["choices"][0]["text"]
    steps, rejected = check_steps(text, env, truncated=out["choices"][0]["finish_reason"] == "length")
    assert steps and all(r.reason.startswith("unfinished") for r in rejected), (text, rejected)


def test_plans_run_remote_with_the_home_prefix_cached_there(remote_daemon, replica):
    hits_before = replica.metric("vllm:prefix_cache_hits_total")
    with remote_daemon.client() as c:
        first = c.plan(TASK, max_tokens=48, goal="none", deadline_ms=DEADLINE_MS)
        second = c.plan("Switch on the kettle.", max_tokens=48, goal="none", deadline_ms=DEADLINE_MS)
    for out in (first, second):
        assert out["served_by"] == "remote", out
        assert out["steps"] and not [r for r in out["rejected_lines"] if not r["reason"].startswith("unfinished")]
        assert out["remote"]["network_ms"] >= 0 and out["remote"]["engine_ms"] > 0
        # under enforce (the default), asked a step at a time with the steps the home's state allows
        assert out["feasibility"] == "enforce" and not out["violations"]
        assert out["remote"]["requests"] >= len(out["steps"])
    # the second plan's prompt shares the home's prefix: the engine served it from its cache
    assert second["remote"]["cached_tokens"] > 0 and second["timings"]["cached_prompt_tokens"] > 0
    assert replica.metric("vllm:prefix_cache_hits_total") > hits_before


def test_a_stalled_replica_ends_in_a_local_answer_within_the_deadline(remote_daemon, replica):
    with remote_daemon.client(timeout_s=300) as c:  # no rest left from the tests before (a success ends it)
        until_remote(c, 180, max_tokens=24, deadline_ms=DEADLINE_MS)
    replica.signal(signal.SIGSTOP)  # the link stalls: connected, nothing comes back
    try:
        t0 = time.monotonic()
        with remote_daemon.client(timeout_s=300) as c:
            out = c.plan(TASK, max_tokens=24, goal="none", deadline_ms=120_000)
        took = time.monotonic() - t0
    finally:
        replica.signal(signal.SIGCONT)
    assert out["served_by"] == "local" and "no first token" in out["fallback"], out
    assert out["steps"] and took < 120


@pytest.mark.parametrize("mode", ["stall", "drop", "refuse"])
def test_a_broken_link_to_vllm_ends_in_a_local_plan_and_heals(linked_daemon, link, mode):
    print(check_a_broken_link(linked_daemon, link, mode, deadline_ms=60_000, heal_within_s=180, max_tokens=24))


def test_a_dead_replica_ends_in_a_local_answer(remote_daemon, replica):
    with remote_daemon.client(timeout_s=300) as c:
        # the daemon is shared with the tests before: a remote answer first, so that no rest from their
        # failures is left (a success ends it) and the next failure is this test's own
        until_remote(c, 180, max_tokens=24, deadline_ms=DEADLINE_MS)
    replica.stop()
    with remote_daemon.client(timeout_s=300) as c:
        out = c.plan(TASK, max_tokens=24, goal="none", deadline_ms=120_000)
        again = c.plan(TASK, max_tokens=24, goal="none", deadline_ms=120_000)
    assert out["served_by"] == "local" and "remote failed" in out["fallback"], out
    assert again["served_by"] == "local" and "resting" in again["fallback"]  # backed off: not asked again
