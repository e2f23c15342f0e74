"""Request bodies. Unknown fields are refused (422 naming them) rather than silently ignored, and
types are strict: no "8" or true for an integer, no "0.5" for a number, no 1 for a boolean (pydantic's
strict mode). NaN and ±Infinity, which Python's JSON parser reads although JSON has no such numbers,
are refused by name.

Static bounds live here; the engine-dependent one (max_tokens ≤ the engine's output limit) is
checked by the app, which knows the engine. Strings that cannot be UTF-8 encoded (lone
surrogates, which JSON can spell as "\\ud800") are refused here: the tokenizer cannot take them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, Union

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

MAX_TASK_CHARS = 2000
MAX_OBSERVATIONS = 64
MIN_TEMPERATURE = 0.01  # below this (and above 0) logits / T overflows: use 0 for greedy
MAX_SEED = 2**63 - 1
MAX_DEADLINE_MS = 3_600_000


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


Name = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/-]*$")]
HomeName = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]*$")]


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

    @field_validator("task")
    @classmethod
    def _task(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("the task is blank; say what the robot should do")
        return v


class ContentPart(_Strict):
    type: Literal["text"]
    text: Text


class ChatMessage(_Strict):
    role: Literal["system", "developer", "user", "assistant"]
    content: Union[Text, list[ContentPart]]
    name: Optional[str] = Field(None, max_length=256, description="Accepted and ignored.")

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


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

    def stops(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])


# Responses: for the OpenAPI document only (handlers build plain dicts).

class StepOut(BaseModel):
    action: str
    args: list[str]


class RejectedLine(BaseModel):
    line: str
    reason: str = Field(description="Why the line is not a step the home can execute.")


class PlanResponse(BaseModel):
    engine: str
    environment_version: int = Field(description="The environment version this plan was made in.")
    plan: str = Field(description="The answer's text, one action call per line.")
    steps: list[StepOut] = Field(description="The lines that call a declared action with things of the home of "
                                             "the right types.")
    rejected_lines: list[RejectedLine] = Field(description="The other lines, each with why (an unconstrained "
                                                           "plan, or the last line of a plan cut by max_tokens).")
    constrained: bool = Field(description="Whether the plan was decoded under the home's grammar.")
    finish_reason: Literal["stop", "length"]
    timings: dict[str, float] = Field(description="ttft_ms, total_ms, decode_tokens_per_s, prompt_tokens, "
                                                  "cached_prompt_tokens, completion_tokens")
    speculation: dict[str, Any] = Field(description="drafter, drafted, accepted, acceptance_rate, "
                                                    "mean_accepted_length")


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
