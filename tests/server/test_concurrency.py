"""Many clients at once: each gets the answer to its own task, as if it had been alone."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

pytestmark = pytest.mark.full

CLIENTS, REQUESTS, MAX_TOKENS = 8, 25, 4
# distinct lengths, so that a mixed-up answer shows in prompt_tokens even where the texts agree
TASKS = ["Open the fridge.", "Turn on the floor lamp.", "Turn off the bedside lamp, please.",
         "Bring the mug to the sofa, please.", "Take the book from the bookshelf and put it on the coffee table.",
         "Put the towel on the washbasin, then go back to the hallway.",
         "Bring my glasses from the nightstand in the bedroom to the sofa in the living room.",
         "Go to the kitchen, pick up the apple from the counter, and bring it to me on the sofa now."]


def answers_of(client, task: str) -> tuple:
    """What must not depend on other clients (how much of a prompt was cached may: a repeated task
    finds its own earlier blocks). Every request finds at least the pinned home's whole blocks."""
    r = client.plan(task, max_tokens=MAX_TOKENS, goal="none")  # the model's own plan: one decode each
    t = r["timings"]
    assert t["cached_prompt_tokens"] >= client.health()["prefix_tokens"] // 16 * 16
    assert t["cached_prompt_tokens"] + t["computed_prompt_tokens"] == t["prompt_tokens"]
    return r["plan"], t["prompt_tokens"], r["environment_version"]


def test_concurrent_clients_each_get_their_own_answer(daemon, client):
    expected = {t: answers_of(client, t) for t in TASKS}  # greedy, one at a time
    assert len({e[1] for e in expected.values()}) == len(TASKS)

    def run(i: int) -> list[tuple[str, tuple]]:
        out = []
        with daemon.client() as c:
            for j in range(REQUESTS):
                task = TASKS[(3 * i + j) % len(TASKS)]
                if j % 5 == 0:  # some stream: the deltas spell the final text (a plan cut by max_tokens
                    # ends at its last whole step: the deltas may go on into the step it leaves out)
                    events = list(c.plan_stream(task, max_tokens=MAX_TOKENS, goal="none"))
                    final = events[-1]
                    assert "".join(e.get("delta", "") for e in events[:-1]).strip().startswith(final["plan"])
                    r = final
                else:
                    r = c.plan(task, max_tokens=MAX_TOKENS, goal="none")
                t = r["timings"]
                assert t["cached_prompt_tokens"] + t["computed_prompt_tokens"] == t["prompt_tokens"]
                out.append((task, (r["plan"], t["prompt_tokens"], r["environment_version"])))
        return out

    with ThreadPoolExecutor(CLIENTS) as pool:
        results = [r for f in [pool.submit(run, i) for i in range(CLIENTS)] for r in f.result()]
    assert len(results) == CLIENTS * REQUESTS
    wrong = [(task, got, expected[task]) for task, got in results if got != expected[task]]
    assert not wrong, wrong[:5]
    health = client.health()
    # nothing but the pinned home is held once every request is done
    assert health["queue"]["depth"] == 0 and health["kv_cache"]["tokens"] == health["prefix_tokens"]


def test_chat_and_plans_interleaved_keep_their_answers(daemon, client):
    """A chat that does not start with the environment prefix evicts it from the cache; the next
    plan pins it again and still gets the same tokens."""
    task = TASKS[1]
    plan = answers_of(client, task)
    messages = [{"role": "user", "content": "Name one fruit."}]
    chat = client.chat(messages, max_tokens=MAX_TOKENS)["choices"][0]["message"]["content"]

    def run(i: int) -> list[tuple]:
        with daemon.client() as c:
            return [("plan", answers_of(c, task)) if (i + j) % 2 else
                    ("chat", c.chat(messages, max_tokens=MAX_TOKENS)["choices"][0]["message"]["content"])
                    for j in range(3)]

    with ThreadPoolExecutor(2) as pool:
        results = [r for f in [pool.submit(run, i) for i in range(2)] for r in f.result()]
    assert [r for kind, r in results if kind == "plan"] == [plan] * 3
    assert [r for kind, r in results if kind == "chat"] == [chat] * 3
