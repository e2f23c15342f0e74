"""What each endpoint runs on the worker thread, and the payload it answers with.

Each `*_job` returns a `begin(planner)` for worker.Job: it validates what needs the tokenizer
(prompt length, the speculation name), makes the request and returns a worker.JobStart: the
request, and a `finish(queue_s)` that builds the response once the request is done.

Timings say where they start. The engine's own figures (`ttft_ms`, `total_ms`, decode speed) count
from when the engine began the request; `queue_ms` is the wait before that, from the request's
arrival (its headers read); a plan's `goal_reading_ms` is the goal read in the task text (goal "infer")
after it; `ttft_since_arrival_ms` and `total_since_arrival_ms` are what the client waited: queue (+ goal
reading) + engine.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Optional

from ..planning.feasibility import narrowed
from ..planning.home import Environment
from ..planning.home.world import World
from ..planning.planner import Plan, Planner
from ..planning.step_events import FeasibleSteps
from ..runtime.generate import Result
from ..runtime.sampling import SamplingParams
from ..runtime.tasks import Task
from .call_narrowing import CallSets
from .errors import RequestError
from .plan_calls import CheckedCalls, checked_message, plan_tools
from .schemas import ChatRequest, PlanRequest
from .structured import Answer, GrammarCache
from .tool_calls import CallParser, chat_messages, parse_answer
from .worker import JobStart


def plan_job(req: PlanRequest, params: SamplingParams, arrived: Optional[float] = None):
    """A plan: its goal, its one-off state and its feasibility mode are checked against the home on
    this thread (a goal or state naming things the home lacks: 422), as the planner starts it. A
    goal's search ends within the request's deadline (`arrived`: time.monotonic() at its arrival;
    default: now)."""
    arrived = time.monotonic() if arrived is None else arrived

    def begin(planner: Planner) -> JobStart:
        prefix = planner.home(req.environment).prefix
        conv = planner.conversation(req.conversation, req.environment) if req.conversation else None
        left_s = req.deadline_ms / 1e3 - (time.monotonic() - arrived) if req.deadline_ms else None
        # the goal's reading, the plan's request, a goal's later candidates: the worker runs each
        task = Task(planner.plan_task(req.task, params, req.observations, req.speculation, req.constrained, conv,
                                      req.environment, feasibility=req.feasibility, goal=req.goal, state=req.state,
                                      deadline_s=left_s))

        def steps(gen) -> FeasibleSteps:
            # with a goal (given, or read in the task) the plan may be another candidate's or the search's:
            # its text and steps are sent once chosen
            run = task.context  # the primary's PlanRun
            return FeasibleSteps(prefix.environment, run.world, hold=run.goal is not None)

        def finish(queue_s: float) -> dict:
            plan, run = task.value, task.context  # no primary: the goal held already, nothing was decoded
            assert plan is not None
            goal_s = run.goal_s if run is not None else plan.goal_reading_s
            out = {"engine": planner.engine.name, "environment_version": plan.environment_version,
                   "plan": plan.text, "steps": [s.as_dict() for s in plan.steps],
                   "rejected_lines": [r.as_dict() for r in plan.rejected], "constrained": plan.constrained,
                   "finish_reason": plan.result.finish_reason, **stats(plan.result, queue_s, goal_s),
                   **feasibility_fields(plan)}
            if req.environment:
                out["environment"] = req.environment
            if conv is not None:
                out["conversation"] = {"id": conv.id, "turn": conv.turns}
            return out
        return JobStart(None, finish, steps, task=task)
    return begin


def feasibility_fields(plan: Plan) -> dict:
    """What the simulation says of a plan: the mode, the violated steps, the predicted final state,
    and, with a goal, whether it is reached, what is missing and how the plan was found (goal "infer":
    the facts the model read in the task, and those it wrote that contradicted an earlier one, left out)."""
    final = plan.final_state
    return {"feasibility": plan.feasibility, "violations": [v.as_dict() for v in plan.violations],
            "final_state": final.model_dump(mode="json") if final is not None else None,
            "goal": plan.goal, "goal_source": plan.goal_source,
            "goal_reached": plan.goal_reached, "goal_missing": list(plan.goal_missing), "search": plan.search,
            "goal_inferred": plan.goal_inferred, "goal_dropped": list(plan.goal_dropped),
            "goal_doubts": list(plan.goal_doubts)}


def state_job(update: dict, home: Optional[str]):
    """A state change of a home (None: the default one), checked against the home (422, nothing
    changes) and rendered after its pinned static prefix; plans already running keep their state."""
    def begin(planner: Planner) -> JobStart:
        if home not in planner.homes:
            raise RequestError(404, f"no environment named {home!r}; GET /v1/environments lists them")
        change = planner.set_state(update, home)

        def finish(queue_s: float) -> dict:
            return {"state": change.state.model_dump(mode="json"), "environment_version": change.version,
                    "computed_tokens": change.computed_tokens, **({"environment": home} if home else {})}
        return JobStart(None, finish, task=change.task)
    return begin


@dataclass
class PlanCheck:
    """A chat answer whose calls are steps of the default home (server/plan_calls.py): the world
    its calls start from, set by the job on the engine's thread, read by the stream's checker too."""

    feasibility: str
    world: Optional[World] = None

    def checker(self) -> Optional[CheckedCalls]:
        return CheckedCalls(self.world, self.feasibility) if self.world is not None else None


def chat_job(req: ChatRequest, params: SamplingParams, meta: dict, answer: Answer, grammars: GrammarCache,
             native_tools: bool, check: Optional[PlanCheck] = None):
    """`answer`: what the answer must be (server/structured.py); `native_tools`: the chat template renders
    tools itself (server/tool_calls.py); `check`: the calls are checked against the default home's
    state (when its tools are the home's actions). Tool messages that answer no earlier call: 422, here."""
    messages, tools = chat_messages(req.messages, req.tools, native_tools)

    def begin(planner: Planner) -> JobStart:
        started = time.perf_counter()  # timings include rendering and tokenizing, as for plans
        ids = planner.prompt_ids(messages, tools=tools)  # reuses the pinned prefix when the chat starts with it
        grammar = grammars.for_answer(answer, planner.engine)  # compiled once per distinct shape (422 if bad)
        extra = {"constraint": grammar.constraint()} if grammar is not None else {}
        if check is not None and check.feasibility != "off":
            env = planner.home().prefix.environment
            if plan_tools(answer, env):
                check.world = World.start(env, planner.current_state(None))
                if check.feasibility == "enforce" and answer.calls == "must" and "constraint" in extra:
                    # calls only: narrowed as a plan's steps are (an answer that may be text: checked after)
                    extra["constraint"] = narrowed(extra["constraint"], CallSets(env, answer), check.world,
                                                   planner.engine.vocabulary())
        gen = planner.engine.generate(ids, params, req.speculation, **extra)
        gen.started = started

        def finish(queue_s: float) -> dict:
            assert gen.result is not None
            return chat_completion(meta, gen.result, queue_s, answer, check.checker() if check else None)
        return JobStart(gen, finish)
    return begin


def environment_job(env: Environment, if_match: Optional[int], home: Optional[str] = None):
    """A new version of a home (None: the default one): rendered and checked here; its prefix is
    computed as a request of the engine (in the same steps as the requests running) and pinned when
    done. Until then plans use the version before it."""
    def begin(planner: Planner) -> JobStart:
        current = planner.homes.get(home)
        version = current.prefix.version if current else 0
        if if_match is not None and if_match != version:
            where = f"environment {home!r}" if home else "the environment"
            raise RequestError(412, f"{where} is at version {version}, not {if_match} (If-Match); GET it again "
                                    "and retry")
        prefix = planner.render(env, home)  # 413/422 here: the version in force stays in force
        gen = planner.engine.pin_request(list(prefix.ids))  # 507 here: it would not fit next to the other pins
        gen.started = time.perf_counter()

        def finish(queue_s: float) -> dict:
            planner.use(prefix, gen.pin, gen.timings.total_s, home)
            return {"version": prefix.version, "name": env.name, "prefix_tokens": len(prefix.ids),
                    **({"environment": home} if home else {})}
        return JobStart(gen, finish)
    return begin


def remove_environment_job(home: str):
    def begin(planner: Planner) -> JobStart:
        if home not in planner.homes:
            raise RequestError(404, f"no environment named {home!r}; GET /v1/environments lists them")
        planner.remove(home)
        return JobStart(None, lambda queue_s: {"removed": home})
    return begin


def stats(result: Result, queue_s: float, goal_s: Optional[float] = None) -> dict:
    """The answer's timings; `goal_s` (plans): the goal's reading, between the queue and the engine."""
    t = result.timings
    before = queue_s + (goal_s or 0.0)
    timings = {**t.as_dict(), "queue_ms": ms(queue_s), **({} if goal_s is None else {"goal_reading_ms": ms(goal_s)}),
               "ttft_since_arrival_ms": ms(before + t.ttft_s), "total_since_arrival_ms": ms(before + t.total_s)}
    return {"timings": timings, "speculation": result.speculation.as_dict()}


def ms(seconds: float) -> float:
    return round(seconds * 1e3, 3)


def chat_meta(model: str) -> dict:
    return {"id": f"chatcmpl-{uuid.uuid4().hex}", "created": int(time.time()), "model": model}


def chat_completion(meta: dict, result: Result, queue_s: float, answer: Optional[Answer] = None,
                    checker: Optional[CheckedCalls] = None) -> dict:
    """`checker`: the calls are steps of the home, simulated (server/plan_calls.py); the answer then
    says `violations`."""
    message, finish_reason = {"role": "assistant", "content": result.text}, result.finish_reason
    violations: Optional[list[dict]] = None
    if answer is not None and answer.parser_mode is not None:
        parsed = parse_answer(result.text, answer.parser_mode)
        message, finish_reason = answer_message(parsed, finish_reason)
        if checker is not None:
            message, finish_reason, violations = checked_message(message, finish_reason, parsed.complete_calls,
                                                                 checker)
    return {**meta, "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": None}],
            "usage": usage(result), **stats(result, queue_s),
            **({"violations": violations} if checker is not None else {})}


def answer_message(parsed: CallParser, finish_reason: str) -> tuple[dict, str]:
    """The message of an answer that may call tools, and its finish_reason: OpenAI's "tool_calls" with
    `content: null` for calls. A call cut by max_tokens or a stop string is left out (its arguments
    are not JSON yet); the finish_reason then says why the answer ended."""
    if not parsed.is_calls:
        return {"role": "assistant", "content": parsed.text}, finish_reason
    calls = [c.as_dict() for c in parsed.complete_calls]
    message: dict = {"role": "assistant", "content": None, **({"tool_calls": calls} if calls else {})}
    done = bool(calls) and not parsed.truncated and finish_reason == "stop"
    return message, "tool_calls" if done else finish_reason


def usage(result: Result) -> dict:
    t = result.timings
    return {"prompt_tokens": t.prompt_tokens, "completion_tokens": t.completion_tokens,
            "total_tokens": t.prompt_tokens + t.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": t.cached_prompt_tokens}}


def chat_chunk(meta: dict, delta: Optional[dict], finish_reason: Optional[str] = None) -> dict:
    """One `chat.completion.chunk`; delta None gives the usage-only chunk (no choices)."""
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish_reason,
                                         "logprobs": None}]
    return {**meta, "object": "chat.completion.chunk", "choices": choices}
