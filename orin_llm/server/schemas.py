"""Request bodies. Unknown fields are refused (422 naming them) rather than silently ignored, and
types are strict: no "8" or true for an integer, no "0.5" for a number, no 1 for a boolean (pydantic's
strict mode). NaN and ±Infinity, which Python's JSON parser reads although JSON has no such numbers,
are refused by name.

Static bounds live here; the engine-dependent one (max_tokens ≤ the engine's output limit) is
checked by the app, which knows the engine. Strings that cannot be UTF-8 encoded (lone
surrogates, which JSON can spell as "\\ud800") are refused here: the tokenizer cannot take them.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import AfterValidator, BaseModel, ConfigDict, Discriminator, Field, Tag, field_validator, model_validator

MAX_TASK_CHARS = 2000
MAX_OBSERVATIONS = 64
MIN_TEMPERATURE = 0.01  # below this (and above 0) logits / T overflows: use 0 for greedy
MAX_SEED = 2**63 - 1
MAX_DEADLINE_MS = 3_600_000
MAX_GOAL_FACTS = 64
MAX_FACT_CHARS = 256


def utf8(value: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("text must be valid Unicode (no lone surrogates)") from None
    return value


def check_utf8(obj: Any) -> None:
    """The same check over a parsed JSON document (the environment body); iterative, so that
    a deeply nested document cannot exhaust the stack."""
    todo = [obj]
    while todo:
        item = todo.pop()
        if isinstance(item, str):
            utf8(item)
        elif isinstance(item, dict):
            todo.extend(item.keys())
            todo.extend(item.values())
        elif isinstance(item, list):
            todo.extend(item)


Text = Annotated[str, AfterValidator(utf8)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class Sampling(_Strict):
    """Fields shared by plans and chat completions."""

    temperature: Optional[float] = Field(None, ge=0, le=2, description="0 or unset: greedy.")
    top_p: Optional[float] = Field(None, gt=0, le=1)
    seed: Optional[int] = Field(None, ge=0, le=MAX_SEED)
    stream: bool = False
    deadline_ms: Optional[int] = Field(None, ge=1, le=MAX_DEADLINE_MS,
                                       description="Give up (504) when the answer is not done by then, "
                                                   "counted from arrival, queue wait included.")
    speculation: str = Field("auto", min_length=1, max_length=64,
                             description="Drafter: auto, none, or one the engine lists; "
                                         "an unavailable one is refused (422).")

    @field_validator("temperature")
    @classmethod
    def _temperature(cls, v: Optional[float]) -> Optional[float]:
        if v is not None and 0 < v < MIN_TEMPERATURE:
            raise ValueError(f"temperature must be 0 (greedy) or at least {MIN_TEMPERATURE}")
        return v


Fact = Annotated[str, Field(min_length=1, max_length=MAX_FACT_CHARS), AfterValidator(utf8)]
Name = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/-]*$")]
HomeName = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]*$")]


def _infer_or_none(v: str) -> str:
    if v not in ("infer", "none"):
        raise ValueError(f"a list of facts like [\"at(mug, sink)\"], \"infer\" to have the model read them in "
                         f"the task text (the default), or \"none\" for no goal; got the string {json.dumps(v)[:80]}")
    return v


# "infer", "none", or the facts; the tags hold "[" so that error messages leave them out (app.py describe)
Goal = Annotated[Union[Annotated[str, AfterValidator(_infer_or_none), Tag("str[infer|none]")],
                       Annotated[list[Fact], Field(min_length=1, max_length=MAX_GOAL_FACTS), Tag("list[facts]")]],
                 Discriminator(lambda v: "str[infer|none]" if isinstance(v, str) else "list[facts]")]


class PlanRequest(Sampling):
    task: Text = Field(min_length=1, max_length=MAX_TASK_CHARS, description="What the robot should do.")
    observations: list[Annotated[Text, Field(max_length=MAX_TASK_CHARS)]] = Field(
        default_factory=list, max_length=MAX_OBSERVATIONS, description="What the robot perceives now.")
    max_tokens: Optional[int] = Field(None, ge=1, description="Default 128; at most the engine's limit.")
    constrained: bool = Field(True, description="Every line of the plan is a step of the home: an action it "
                                                "declares, with things of the home of the right types (its "
                                                "grammar). false: free text, checked line by line afterwards.")
    conversation: Optional[Name] = Field(None, description="An agent loop's id: this request is its next turn "
                                         "(the previous turns, plans included, stay cached; only the new turn is "
                                         "computed). A new environment version starts it over.")
    environment: Optional[HomeName] = Field(None, description="A named environment (PUT /v1/environments/NAME) "
                                        "instead of the default one.")
    goal: Optional[Goal] = Field(
        None,
        description="Facts the plan must make true, written like steps: at(mug, coffee_table), holding(o), "
                    "robot_at(p), open(p), closed(p), on(d), off(d), done(action, p), said; or \"infer\": the "
                    "model reads them in the task text first (the answer's goal_inferred says which); or \"none\": "
                    "no goal, the model's plan as it decodes it. Absent: \"infer\" wherever a goal can be "
                    "checked (a home with rooms and actions, feasibility enforce or report, a constrained plan), "
                    "else none. The answer says goal_reached and, when false, goal_missing; the planner searches "
                    "for a plan that reaches it within the deadline. A goal that holds already is answered with an "
                    "empty plan (search.source \"start\").")
    feasibility: Literal["enforce", "report", "off"] = Field(
        "enforce", description="enforce (the default): every step's preconditions hold in the state simulated "
                               "from the steps before it (the constraint allows only those); report: the grammar "
                               "only, and the violations listed; off: no state checked.")
    state: Optional[dict[str, Any]] = Field(
        None, description="A change to the home's state for this request only (the keys of GET "
                          "/v1/environment/state: robot_at, holding, object_at, open, on, said); the home's "
                          "own state stays as it is (PATCH /v1/environment/state changes it).")

    @field_validator("task")
    @classmethod
    def _task(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("the task is blank; say what the robot should do")
        return v


class ContentPart(_Strict):
    type: Literal["text"]
    text: Text


FunctionName = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$",
                                    description="Letters, digits, underscores and dashes (OpenAI's rule).")]
MAX_TOOLS = 64


class FunctionCall(_Strict):
    name: FunctionName
    arguments: Text = Field(description="The arguments: a JSON object, encoded as a string.")

    @field_validator("arguments")
    @classmethod
    def _arguments(cls, v: str) -> str:
        try:
            args = json.loads(v)
        except ValueError:
            args = None
        if not isinstance(args, dict):
            raise ValueError('must be a JSON object encoded as a string, e.g. "{\\"room\\": \\"kitchen\\"}"')
        return v


class ToolCall(_Strict):
    """A call an assistant message made (sent back by agent frameworks as the conversation goes on)."""

    id: str = Field(min_length=1, max_length=256)
    type: Literal["function"]
    function: FunctionCall


class ChatMessage(_Strict):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Union[Text, list[ContentPart], None] = Field(
        None, description="Required, except in an assistant message with tool_calls (null or absent there).")
    name: Optional[str] = Field(None, max_length=256, description="Accepted and ignored.")
    tool_calls: Optional[list[ToolCall]] = Field(None, max_length=MAX_TOOLS,
                                                 description="An assistant message's calls.")
    tool_call_id: Optional[str] = Field(None, min_length=1, max_length=256,
                                        description="A tool message: the id of the call it answers.")
    refusal: Optional[str] = Field(None, max_length=4096, description="Accepted and ignored (OpenAI clients "
                                                                       "send an answer's message back as is).")

    @model_validator(mode="after")
    def _shape(self) -> ChatMessage:
        if self.tool_calls and self.role != "assistant":
            raise ValueError(f"tool_calls: only an assistant message carries tool_calls, not a {self.role} message")
        if self.content is None and not (self.role == "assistant" and self.tool_calls):
            raise ValueError("content: required (null only in an assistant message with tool_calls)")
        if self.role == "tool" and self.tool_call_id is None:
            raise ValueError("tool_call_id: required in a tool message (the id of the tool call it answers)")
        if self.role != "tool" and self.tool_call_id is not None:
            raise ValueError(f"tool_call_id: only a tool message answers a call, not a {self.role} message")
        return self

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class FunctionDef(_Strict):
    name: FunctionName
    description: Optional[Text] = Field(None, max_length=8192)
    parameters: Optional[dict[str, Any]] = Field(
        None, description='A JSON schema of the arguments, an object ("type": "object"); omitted: no arguments.')
    strict: Optional[bool] = Field(None, description="Accepted: arguments always follow the schema here.")

    @field_validator("parameters")
    @classmethod
    def _parameters(cls, v: Optional[dict[str, Any]]) -> Optional[dict[str, Any]]:
        if v is not None and v.get("type") != "object":
            got = json.dumps(v.get("type")) if "type" in v else "no type"
            raise ValueError(f'must be a JSON schema of an object ("type": "object"), got {got}: a call\'s '
                             "arguments are a JSON object")
        return v


class Tool(_Strict):
    type: Literal["function"]
    function: FunctionDef


class NamedFunction(_Strict):
    name: FunctionName


class NamedToolChoice(_Strict):
    type: Literal["function"]
    function: NamedFunction


class JsonSchemaFormat(_Strict):
    name: FunctionName
    description: Optional[Text] = Field(None, max_length=8192)
    schema_: dict[str, Any] = Field(alias="schema", description="The JSON schema the answer follows.")
    strict: Optional[bool] = Field(None, description="Accepted: the answer always follows the schema here.")


class ResponseFormat(_Strict):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: Optional[JsonSchemaFormat] = Field(None, description='With "type": "json_schema": its name and '
                                                                      "schema.")

    @model_validator(mode="after")
    def _shape(self) -> ResponseFormat:
        if self.type == "json_schema" and self.json_schema is None:
            raise ValueError('json_schema: required with "type": "json_schema" ({"name": ..., "schema": {...}})')
        if self.type != "json_schema" and self.json_schema is not None:
            raise ValueError(f'json_schema: only with "type": "json_schema", not "{self.type}"')
        return self


class StreamOptions(_Strict):
    include_usage: bool = False


class ChatRequest(Sampling):
    """OpenAI's chat completion request, the parts this server honours (others: 422)."""

    model: Optional[str] = Field(None, max_length=256, description="Accepted whatever it names.")
    messages: list[ChatMessage] = Field(min_length=1, max_length=256)
    max_tokens: Optional[int] = Field(None, ge=1)
    max_completion_tokens: Optional[int] = Field(None, ge=1, description="Newer name of max_tokens.")
    stop: Union[Text, list[Text], None] = None
    n: Optional[int] = Field(None, description="Only 1: one choice per request.")
    stream_options: Optional[StreamOptions] = None
    user: Optional[str] = Field(None, max_length=256, description="Accepted and ignored.")
    presence_penalty: Optional[float] = Field(None, description="Only 0 (not supported).")
    frequency_penalty: Optional[float] = Field(None, description="Only 0 (not supported).")
    logprobs: Optional[bool] = Field(None, description="Only false (not supported).")
    response_format: Optional[ResponseFormat] = Field(
        None, description="text (the default), json_object or json_schema: the answer is decoded under that "
                          "grammar (server/structured.py).")
    tools: Optional[list[Tool]] = Field(None, min_length=1, max_length=MAX_TOOLS,
                                        description="Functions the answer may call (OpenAI function tools).")
    tool_choice: Union[Literal["none", "auto", "required"], NamedToolChoice, None] = Field(
        None, description="none, auto (the default with tools), required, or one named function.")
    parallel_tool_calls: Optional[bool] = Field(None, description="false: at most one call (default true).")
    feasibility: Literal["enforce", "report", "off"] = Field(
        "enforce", description="When every function of tools is an action of the home, the calls are steps of a "
                               "plan, simulated from the home's state: enforce (the default) decodes only calls "
                               "that can run when the answer must call, and returns the calls up to the first "
                               "whose preconditions fail; report returns them all; both list violations. off: no "
                               "check.")

    @field_validator("stop")
    @classmethod
    def _stop(cls, v: Union[str, list[str], None]) -> Union[str, list[str], None]:
        stops = [v] if isinstance(v, str) else v or []
        if len(stops) > 4:
            raise ValueError("at most 4 stop strings")
        if any(not s or len(s) > 256 for s in stops):
            raise ValueError("each stop string must have 1 to 256 characters")
        return v

    @field_validator("n")
    @classmethod
    def _n(cls, v: Optional[int]) -> Optional[int]:
        if v is not None and v != 1:
            raise ValueError("n must be 1: this server returns one choice per request")
        return v

    @field_validator("presence_penalty", "frequency_penalty")
    @classmethod
    def _penalty(cls, v: Optional[float]) -> Optional[float]:
        if v:
            raise ValueError("penalties are not supported; omit them or send 0")
        return v

    @field_validator("logprobs")
    @classmethod
    def _logprobs(cls, v: Optional[bool]) -> Optional[bool]:
        if v:
            raise ValueError("logprobs are not supported; omit it or send false")
        return v

    @field_validator("tool_choice", mode="before")
    @classmethod
    def _tool_choice(cls, v: Any) -> Any:
        if isinstance(v, str) and v not in ("none", "auto", "required"):
            raise ValueError(f'must be "none", "auto", "required" or {{"type": "function", "function": {{"name": '
                             f'...}}}}, got {json.dumps(v)}')
        return v

    def stops(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])


# Responses: for the OpenAPI document only (handlers build plain dicts).

class StepOut(BaseModel):
    action: str
    args: list[str]


class RejectedLine(BaseModel):
    line: str
    reason: str = Field(description="Why the line is not a step the home can execute.")


class Violation(BaseModel):
    index: int = Field(description="The step's index in steps.")
    step: str
    kind: Literal["precondition", "affordance", "unknown"]
    reason: str = Field(description="Which precondition failed, e.g. the hand is not empty.")


class PlanResponse(BaseModel):
    engine: str
    environment_version: int = Field(description="The environment version this plan was made in.")
    plan: str = Field(description="The answer's text, one action call per line.")
    steps: list[StepOut] = Field(description="The lines that call a declared action with things of the home of "
                                             "the right types.")
    rejected_lines: list[RejectedLine] = Field(description="The other lines, each with why (an unconstrained "
                                                           "plan's; a constrained plan cut by max_tokens ends at its "
                                                           "last whole step).")
    constrained: bool = Field(description="Whether the plan was decoded under the home's grammar.")
    finish_reason: Literal["stop", "length"]
    timings: dict[str, float] = Field(description=(
        "Engine figures from when the worker began the request: ttft_ms, total_ms, decode_tokens_per_s; "
        "prompt_tokens, cached_prompt_tokens (served from the KV cache, not computed), computed_prompt_tokens, "
        "completion_tokens, forced_tokens (emitted by the grammar without a model step), mask_ms (the "
        "constraint's masks), feasibility_ms (of which narrowing by the simulated state), masks; queue_ms (the wait "
        "from arrival for the worker and the engine), goal_reading_ms (goal \"infer\": the model reading the goal "
        "in the task text, after the queue and before the plan; 0 otherwise), ttft_since_arrival_ms and "
        "total_since_arrival_ms (what the client waited: queue, goal reading and engine)."))
    speculation: dict[str, Any] = Field(description="drafter, drafted, accepted, acceptance_rate, "
                                                    "mean_accepted_length")
    environment: Optional[str] = Field(None, description="The named home the plan was made in (absent: the "
                                                         "default home).")
    conversation: Optional[dict[str, Any]] = Field(None, description="id and turn of the conversation the plan "
                                                                    "continued.")
    feasibility: Literal["enforce", "report", "off"] = Field(description="The feasibility mode the plan was made "
                                                                         "under.")
    violations: list[Violation] = Field(description="Steps whose preconditions did not hold in the simulated state "
                                                    "(report and off; empty with enforce).")
    final_state: Optional[dict[str, Any]] = Field(description="The state predicted after the plan (null for a "
                                                              "plain-text home).")
    goal: Optional[list[str]] = Field(None, description="The facts the plan aimed at (null without a goal): the "
                                                        "ones given, or read in the task text (goal_source).")
    goal_source: Optional[Literal["given", "inferred"]] = Field(None, description="Whose goal it is: the "
                                                                "request's (given), or the one the model read in "
                                                                "the task (inferred: \"infer\", or no goal sent).")
    goal_reached: Optional[bool] = Field(description="Whether the simulated plan makes every fact of `goal` true "
                                                     "(null without a goal).")
    goal_missing: list[str] = Field(description="The goal facts the plan leaves false.")
    goal_inferred: Optional[list[str]] = Field(None, description="With goal \"infer\": the facts the model read in "
                                                                 "the task text, which the plan aims at.")
    goal_dropped: list[str] = Field(default_factory=list, description="With goal \"infer\": facts the model wrote "
                                    "that contradicted an earlier one (holding(mug) after at(mug, sink)), left out "
                                    "of the goal, each with the fact it contradicts.")
    goal_doubts: list[str] = Field(default_factory=list, description="With a goal read in the task: why it may not be "
                                   "the speaker's (a pronoun, \"turn it off\", that names no thing of the home), "
                                   "each with what to do; the plan aims at it all the same.")
    search: Optional[dict[str, Any]] = Field(description="With a goal: candidates (model plans tried), source "
                                                         "(model, search, none; start: the goal held already and "
                                                         "the plan is empty) and reason.")


class StateChange(BaseModel):
    state: dict[str, Any] = Field(description="The home's state after the change (as GET returns it).")
    environment_version: int = Field(description="The home's version (a state change does not make a new one).")
    computed_tokens: int = Field(description="Tokens the engine computed for the change: the state part after the "
                                             "cached static home, not the whole home.")


class EnvironmentVersion(BaseModel):
    version: int
    name: str
    prefix_tokens: int


class ErrorDetail(BaseModel):
    message: str = Field(description="What went wrong and what to fix.")
    type: str
    code: int


class ErrorResponse(BaseModel):
    error: ErrorDetail
