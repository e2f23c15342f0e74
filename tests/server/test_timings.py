"""Timings a person can trust, through the daemon: where each figure starts, and what "cached" means."""

from __future__ import annotations

import threading
import time

import pytest

from orin_llm.server.cli import summary

pytestmark = pytest.mark.full

CHAT_ELSEWHERE = [{"role": "system", "content": "You are a poet."}, {"role": "user", "content": "A line on rain."}]


def metric(text: str, name: str, endpoint: str = "plan") -> float:
    prefix = f'{name}{{endpoint="{endpoint}"}} '
    return float(next(line for line in text.splitlines() if line.startswith(prefix)).split()[-1])


@pytest.fixture(scope="module")
def serial_daemon(start_daemon):
    """One request at a time (--max-batch 1): a second request waits in the queue for the first to
    finish. With batching it joins the running one at the next step and waits one step at most,
    which made this test depend on how long a step takes."""
    return start_daemon("--max-batch", "1")


def test_a_queued_request_says_how_long_it_waited(serial_daemon):
    """The engine's TTFT and total start when the engine takes the request; queue_ms is the wait before,
    and the *_since_arrival_ms figures are what the client waited."""
    daemon = serial_daemon
    first_done = threading.Event()

    def long_one() -> None:
        with daemon.client() as c:
            c.plan("Describe every room of the home in great detail.", max_tokens=120, speculation="none")
        first_done.set()

    worker = threading.Thread(target=long_one)
    worker.start()
    end = time.monotonic() + 60
    with daemon.client() as client:
        while not client.health()["queue"]["running"] and time.monotonic() < end:
            time.sleep(0.01)
    sent = time.monotonic()
    with daemon.client() as c:
        second = c.plan("Open the fridge.", max_tokens=4, goal="none")  # (no goal reading between)
    waited_ms = (time.monotonic() - sent) * 1e3
    worker.join(60)
    assert first_done.is_set()
    t = second["timings"]
    assert t["queue_ms"] > 0.25 * waited_ms  # it waited behind the long one, and says so
    assert abs(t["ttft_since_arrival_ms"] - t["queue_ms"] - t["ttft_ms"]) < 0.01  # each rounded to µs
    assert abs(t["total_since_arrival_ms"] - t["queue_ms"] - t["total_ms"]) < 0.01
    assert t["total_ms"] < t["total_since_arrival_ms"] <= waited_ms  # arrival is after the client sent it
    line = summary(second)
    assert f"queued {t['queue_ms']:.0f} ms, then TTFT {t['ttft_ms']:.0f} ms" in line
    assert f"since arrival: TTFT {t['ttft_since_arrival_ms']:.0f} ms, total {t['total_since_arrival_ms']:.0f} ms" \
        in line


def test_streamed_and_chat_answers_carry_the_same_timings(client):
    final = list(client.plan_stream("Open the fridge.", max_tokens=4))[-1]
    assert {"queue_ms", "ttft_since_arrival_ms", "total_since_arrival_ms", "ttft_ms"} <= set(final["timings"])
    chat = client.chat([{"role": "user", "content": "hi"}], max_tokens=2)
    assert chat["timings"]["queue_ms"] >= 0 and chat["timings"]["total_since_arrival_ms"] >= chat["timings"]["total_ms"]


def test_an_idle_daemon_tells_the_goals_reading_from_the_queue(client):
    """goal "infer": the model reads the goal in the task first, a request of its own. An idle daemon
    said `queued 3409 ms` for it; now queue_ms is the wait, goal_reading_ms the reading, and what the
    client waited is all of it."""
    answer = client.plan("Switch on the tv.", max_tokens=16, goal="infer", deadline_ms=120_000)
    t = answer["timings"]
    assert answer["goal_inferred"] and t["goal_reading_ms"] > 0
    assert t["queue_ms"] < t["goal_reading_ms"]  # idle: no wait, where the reading is a whole decode
    assert abs(t["ttft_since_arrival_ms"] - t["queue_ms"] - t["goal_reading_ms"] - t["ttft_ms"]) < 0.01
    assert abs(t["total_since_arrival_ms"] - t["queue_ms"] - t["goal_reading_ms"] - t["total_ms"]) < 0.01
    assert f"then goal read in {t['goal_reading_ms']:.0f} ms, then TTFT" in summary(answer)
    assert client.plan("Open the fridge.", max_tokens=4, goal="none")["timings"]["goal_reading_ms"] == 0


def test_cached_tokens_are_only_tokens_this_request_did_not_compute(client):
    """A chat with another system prompt no longer evicts the pinned home (the paged cache keeps pins);
    every plan finds at least the home's whole blocks cached. What each request reports as cached and
    what the engine fed through prefill add up to its prompt, and /metrics follows both."""
    prefix = client.health()["prefix_tokens"]
    client.plan("Open the fridge.", max_tokens=2, goal="none")
    before = client.metrics()
    plans = []
    unique = f"{time.time_ns()}"  # prompts no earlier test sent: the first one finds only the home cached
    for task in (f"Open the wardrobe ({unique}).", f"Close the fridge ({unique}).", f"Open the wardrobe ({unique})."):
        client.chat(CHAT_ELSEWHERE, max_tokens=2)  # other traffic between the plans
        plans.append(client.plan(task, max_tokens=2, goal="none")["timings"])
    for t in plans:
        assert t["cached_prompt_tokens"] >= prefix // 16 * 16
        assert t["cached_prompt_tokens"] + t["computed_prompt_tokens"] == t["prompt_tokens"]
    # the repeated task finds its own earlier prompt: everything but its last, partly filled block
    assert plans[2]["cached_prompt_tokens"] == (plans[2]["prompt_tokens"] - 1) // 16 * 16
    assert plans[2]["computed_prompt_tokens"] < plans[0]["computed_prompt_tokens"]
    after = client.metrics()

    def grew(name: str, endpoint: str = "plan") -> float:
        return metric(after, name, endpoint) - metric(before, name, endpoint)

    assert grew("orin_llm_cached_prompt_tokens_total") == sum(t["cached_prompt_tokens"] for t in plans)
    assert grew("orin_llm_computed_prompt_tokens_total") == sum(t["computed_prompt_tokens"] for t in plans)
    assert grew("orin_llm_prompt_tokens_total") == sum(t["prompt_tokens"] for t in plans)


def test_a_streamed_plan_sends_each_step_before_the_end(client):
    """Typed {"step"} events arrive as each line completes, before the final answer, and add up to its
    steps: a robot can start the first step while the planner still writes the rest."""
    events = list(client.plan_stream("Bring the mug from the kitchen to the coffee table.", max_tokens=64,
                                     goal="none"))
    final = events[-1]
    kinds = ["step" if "step" in e else "delta" if "delta" in e else "final" for e in events]
    steps = [e["step"] for e in events if "step" in e]
    assert steps and kinds[-1] == "final" and kinds.index("step") < len(kinds) - 2  # the first step came early
    assert [{"action": s["action"], "args": s["args"]} for s in steps] == final["steps"]
    assert [s["index"] for s in steps] == list(range(len(steps)))
    text_at_first_step = "".join(e["delta"] for e in events[:kinds.index("step")] if "delta" in e)
    assert len(text_at_first_step) < len(final["plan"])
