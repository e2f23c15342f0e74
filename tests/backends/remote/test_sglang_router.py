"""orin-llm behind SGLang's router (sglang-router 0.3.2 from PyPI, `make sglang`: .venv-sglang) in front of
the same two REAL vLLM CPU replicas as vLLM's router (conftest.py's two_replicas). The router takes any
OpenAI-compatible worker; what it refuses is the planner's token ids (its CompletionRequest's
`prompt: StringOrArray`, backends/remote/flavors.py), so the daemon sends the prompt as text
(`--remote-prompt text`) with the grammar in the worker's own field (`--remote-flavor vllm` here: the
router forwards fields it does not declare). It cannot learn a vLLM worker's model (it asks SGLang's own
endpoints), so its /v1/models says `unknown` and the daemon is told the model (`--remote-model`).

Skipped, with the reason, only where the router's venv is missing: `make sglang` makes it (`make test-all`
does, so CI runs these), or ORIN_LLM_SGLANG_VENV names one with sglang-router 0.3.2."""

from __future__ import annotations

import json
import os
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from orin_llm.backends.remote.client import RemoteCall
from orin_llm.backends.remote.flavors import completion_body
from orin_llm.backends.remote.settings import RemoteSettings
from orin_llm.runtime.tokenizer import Tokenizer
from tests.server.conftest import free_port

from .test_router import TASKS, Router, homes_stay_on_one_replica, plan, with_other_home

ROOT = Path(__file__).resolve().parents[3]
VENV = Path(os.environ.get("ORIN_LLM_SGLANG_VENV", ROOT / ".venv-sglang"))
ROUTER = [str(VENV / "bin" / "python"), "-m", "sglang_router.launch_router"]
GRAMMAR = 'start: "go_to(" PLACE ")"\nPLACE: "fridge" | "sink"\n'

pytestmark = [pytest.mark.full, pytest.mark.skipif(
    not (VENV / "lib").is_dir() or not list(VENV.glob("lib/python3*/site-packages/sglang_router/launch_router.py")),
    reason=f"no sglang-router in {VENV}: `make sglang` installs sglang-router==0.3.2 there "
           "(or point ORIN_LLM_SGLANG_VENV at a venv that has it)")]


@pytest.fixture(scope="module")
def sglang_site(two_replicas, tmp_path_factory):
    log = tmp_path_factory.mktemp("sglang-router") / "router.log"
    router = Router([r.url for r in two_replicas], free_port(), log, command=ROUTER).wait_ready()
    yield two_replicas, router
    router.stop()


@pytest.fixture(scope="module")
def sglang_daemon(start_daemon, sglang_site):
    _, router = sglang_site
    return with_other_home(start_daemon("--remote", router.url, "--remote-flavor", "vllm", "--remote-prompt", "text",
                                        "--remote-model", "embedded", "--remote-first-token-share", "0.3"))


def post(url: str, body: dict) -> tuple[int, str]:
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def call(url: str, flavor: str, prompt, lark: str) -> RemoteCall:
    """One streamed completion by the daemon's own client, through the router, waited for."""
    c = RemoteCall(RemoteSettings(url, flavor=flavor, timeout_s=300), lambda: "embedded", prompt, 8, 0.0, 1.0, 1,
                   [], lark, threading.Event(), 300)
    c.start()
    c._thread.join(300)
    assert c.done, "the call never ended"
    return c


def test_the_router_takes_the_prompt_as_text_and_refuses_its_ids(sglang_site, engine_dir):
    _, router = sglang_site
    with urllib.request.urlopen(router.url + "/v1/models", timeout=10) as r:
        models = r.read().decode()
    assert '"unknown"' in models, models  # it cannot name a vLLM worker's model: the daemon needs --remote-model
    tok = Tokenizer(Path(engine_dir) / "tokenizer")
    home = "The kitchen has a fridge, a sink and a kettle; the milk is in the fridge. " * 20  # > a KV block (128)
    text = tok.apply_chat_template([{"role": "user", "content": home + "Where is the milk? Go there."}],
                                   add_generation_prompt=True)
    ids = tok.encode(text)
    status, answer = post(router.url, {"model": "embedded", **completion_body("vllm", ids, 8, 0.0, 1.0, 1, [], None)})
    assert status == 422 and "StringOrArray" in answer, (status, answer[:300])  # why --remote-prompt text exists
    c = call(router.url, "vllm", text, GRAMMAR)
    assert c.error is None and c.finish_reason == "stop", c.error
    assert c.text in ("go_to(fridge)", "go_to(sink)"), c.text  # vLLM's grammar field went through the router
    assert c.usage["prompt_tokens"] == len(ids)  # the worker read the text as the robot's tokenizer does
    again = call(router.url, "vllm", text, GRAMMAR)  # usage passes through: the prefix is cached where it went
    assert again.error is None and again.usage["cached_tokens"] > 0, again.usage
    # the sglang flavor's body (its grammar in `ebnf`) passes the router too; a vLLM worker ignores `ebnf`
    # (the flavor names the worker: SGLang's engine reads it), so only that the request is served is checked
    sg = call(router.url, "sglang", text, GRAMMAR)
    assert sg.error is None and sg.finish_reason in ("stop", "length"), sg.error


def test_each_home_stays_on_one_replica(sglang_daemon, sglang_site):
    replicas, _ = sglang_site
    homes_stay_on_one_replica(sglang_daemon, replicas)


def test_a_stopped_router_ends_in_a_local_answer(sglang_daemon, sglang_site):
    _, router = sglang_site
    router.stop()
    out = plan(sglang_daemon, TASKS[0], None, deadline_ms=60_000)
    assert out["served_by"] == "local" and "remote failed" in out["fallback"], out
