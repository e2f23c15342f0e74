"""vLLM's router with `--policy kv_aware` on two REAL vLLM CPU replicas publishing their KV cache events
(orin_llm/bench/site.py, as the fleet benchmark starts them): what jetson/GUIDE.md ("Site server")
says of it. A repeated prompt is looked up in the events and goes where its blocks are; a prompt with a
grammar (`structured_outputs`, as every orin-llm plan carries) gets no KV lookup in vllm-router 0.1.17.
When a router release looks those up, the second test fails: update the guide and the fleet bench's
reading of kv_aware (orin_llm/bench/results_page.py)."""

from __future__ import annotations

import json
import re
import urllib.request

import pytest

from orin_llm.bench import site

pytestmark = pytest.mark.full
GRAMMAR = 'start: "go_to(" NAME ")"\nNAME: /[a-z_]+/\n'


@pytest.fixture(scope="module")
def kv_site(engine_dir, tmp_path_factory):
    from tests.backends.remote.vllm_replica import VENV, vllm_python

    vllm_python()  # installs .venv-vllm (vLLM and its router) or fails with pip's reason
    out = tmp_path_factory.mktemp("kv_site")
    mp = pytest.MonkeyPatch()
    mp.setenv("ORIN_LLM_VLLM_VENV", str(VENV))
    model = site.model_dir(engine_dir, out / "model")
    replicas: list[site.Replica] = []
    router = None
    try:
        for i in range(2):
            replicas.append(site.Replica(model, out / f"vllm{i}.log", kv_events_port=site.free_port()).ready())
        router = site.Router(replicas, "kv_aware", out / "router.log").ready()
        yield replicas, router
    finally:
        if router is not None:
            router.stop()
        for r in replicas:
            r.stop()
        mp.undo()


def lookups(router: site.Router) -> float:
    """The router's KV placement lookups so far (any result)."""
    return sum(float(m[1]) for ln in router.routing_metrics()
               if (m := re.match(r"vllm_router_kv_placement_lookups_total\{.*\} ([\d.]+)", ln)))


def complete(router: site.Router, prompt: list[int], **extra) -> dict:
    body = {"model": "embedded", "prompt": prompt, "max_tokens": 2, "temperature": 0.0, **extra}
    req = urllib.request.Request(router.url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.loads(r.read())


def test_a_repeated_prompt_is_looked_up_in_the_replicas_kv_events(kv_site):
    replicas, router = kv_site
    prefix = list(range(1000, 1000 + 3 * site.BLOCK_SIZE))  # three whole blocks
    before = lookups(router)
    outs = [complete(router, prefix + [7 + k]) for k in range(3)]
    assert lookups(router) - before == 3
    assert all(o["usage"]["prompt_tokens_details"]["cached_tokens"] == len(prefix) for o in outs[1:]), outs
    served = [r.metrics(("vllm:request_success_total",))["vllm:request_success_total"] for r in replicas]
    assert sorted(served)[0] == 0, served  # all on the replica that holds the blocks


def test_a_prompt_with_a_grammar_gets_no_kv_lookup_in_router_0_1_17(kv_site):
    _, router = kv_site
    prefix = list(range(3000, 3000 + 3 * site.BLOCK_SIZE))
    before = lookups(router)
    outs = [complete(router, prefix + [7 + k], structured_outputs={"grammar": GRAMMAR}) for k in range(3)]
    # the engine cached the prefix (its own usage says so); the router did not look it up
    assert outs[-1]["usage"]["prompt_tokens_details"]["cached_tokens"] == len(prefix), outs[-1]
    assert lookups(router) == before, "vllm-router now looks up grammar requests: update jetson/GUIDE.md"
