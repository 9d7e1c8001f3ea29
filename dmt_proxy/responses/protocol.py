"""The Responses wire format: the request dmt-proxy accepts and the Response it returns.

Supported: ``input`` (a string, or message, ``function_call`` and
``function_call_output`` items), ``instructions``, function ``tools``,
``tool_choice``, ``parallel_tool_calls``, ``max_output_tokens``, ``temperature``,
``top_p``, ``text.format`` (text, json_object, json_schema), ``stream``, ``user``
and ``metadata`` (``metadata.user`` names the memory scope, after ``X-DMT-User``
and ``user``).

Accepted only at values that change nothing: ``store`` false (nothing is stored),
``include`` empty, ``truncation`` "disabled", ``background`` false, ``service_tier``
auto/default, ``stream_options.include_obfuscation`` (no padding is sent).

Refused with a 400 that names the field: ``previous_response_id`` and
``conversation`` (dmt-proxy keeps no response state: send the whole conversation
as ``input``, as the OpenAI Agents SDK does by default), ``store: true``, hosted
tools, and every field not listed here.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from dmt_proxy.errors import InvalidRequest

NO_STATE = (
    "dmt-proxy keeps no response state; send the whole conversation as 'input' "
    "(the OpenAI Agents SDK does unless told to chain responses by id)"
)

REFUSED: dict[str, str] = {
    "previous_response_id": NO_STATE,
    "conversation": NO_STATE,
    "prompt": "stored prompt templates are not supported by dmt-proxy",
    "reasoning": "reasoning options are not supported by dmt-proxy's chat upstreams",
    "max_tool_calls": "dmt-proxy runs no tools itself; limit the loop in your agent",
    "top_logprobs": "log-probabilities are not supported on /v1/responses",
    "prompt_cache_key": "prompt caching options are not supported by dmt-proxy",
    "prompt_cache_retention": "prompt caching options are not supported by dmt-proxy",
    "safety_identifier": "use 'user' or X-DMT-User to name the user",
    "context_management": "context management is not supported by dmt-proxy",
}
"""Fields refused whenever they are set (not null)."""


def _only(value: Any, allowed: tuple[Any, ...]) -> bool:
    return value is None or value in allowed


ACCEPTED_AT: dict[str, tuple[Any, str]] = {
    "store": ((False,), "responses are not stored: " + NO_STATE),
    "include": (([],), "no additional output data is available"),
    "truncation": (("disabled",), "only 'disabled' is supported"),
    "background": ((False,), "background responses are not supported"),
    "service_tier": (("auto", "default"), "only 'auto' and 'default' are supported"),
}
"""Fields accepted only at values that change nothing, and why others are refused."""


def check_fields(data: dict[str, Any]) -> None:
    """Refuse the fields dmt-proxy cannot honour, naming each (before validation)."""
    for field, why in REFUSED.items():
        if data.get(field) is not None:
            raise InvalidRequest(f"Unsupported parameter '{field}': {why}.", param=field,
                                 code="unsupported_parameter")  # fmt: skip
    for field, (allowed, why) in ACCEPTED_AT.items():
        if not _only(data.get(field), allowed):
            raise InvalidRequest(f"Unsupported value for '{field}': {why}.", param=field,
                                 code="unsupported_value")  # fmt: skip
    options = data.get("stream_options")
    if isinstance(options, dict) and set(options) - {"include_obfuscation"}:
        extra = sorted(set(options) - {"include_obfuscation"})[0]
        raise InvalidRequest(f"Unsupported parameter 'stream_options.{extra}'.",
                             param=f"stream_options.{extra}", code="unsupported_parameter")  # fmt: skip


class ResponsesRequest(BaseModel):
    """``POST /v1/responses`` body (items and tools are checked in ``translate``)."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = Field(default=None, min_length=1)
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    text: dict[str, Any] | None = None
    stream: bool = False
    user: str | None = None
    metadata: dict[str, str] | None = None
    # Accepted only at their no-op values (``check_fields``); declared so they are known.
    store: bool | None = None
    include: list[str] | None = None
    truncation: str | None = None
    background: bool | None = None
    service_tier: str | None = None
    stream_options: dict[str, bool] | None = None

    def scope_user(self) -> str | None:
        """The user named by the body: ``user``, else ``metadata.user``."""
        return self.user or (self.metadata or {}).get("user")


# The Response object. Fields follow openai.types.responses.Response; the unit tests
# validate what these dump to against the openai SDK's own models.


class OutputText(BaseModel):
    type: Literal["output_text"] = "output_text"
    text: str
    annotations: list[Any] = Field(default_factory=list)
    logprobs: list[Any] = Field(default_factory=list)


class OutputMessage(BaseModel):
    id: str
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"
    status: Literal["in_progress", "completed", "incomplete"] = "completed"
    content: list[OutputText] = Field(default_factory=list)


class FunctionCallItem(BaseModel):
    id: str
    type: Literal["function_call"] = "function_call"
    status: Literal["in_progress", "completed", "incomplete"] = "completed"
    call_id: str
    name: str
    arguments: str


OutputItem = OutputMessage | FunctionCallItem


class InputTokensDetails(BaseModel):
    cached_tokens: int = 0
    cache_write_tokens: int = 0


class OutputTokensDetails(BaseModel):
    reasoning_tokens: int = 0


class ResponseUsage(BaseModel):
    input_tokens: int
    input_tokens_details: InputTokensDetails = Field(default_factory=InputTokensDetails)
    output_tokens: int
    output_tokens_details: OutputTokensDetails = Field(default_factory=OutputTokensDetails)
    total_tokens: int


class ResponseError(BaseModel):
    code: Literal["server_error", "rate_limit_exceeded", "invalid_prompt"] = "server_error"
    message: str


class IncompleteDetails(BaseModel):
    reason: Literal["max_output_tokens", "content_filter"]


ResponseStatus = Literal["completed", "failed", "in_progress", "incomplete"]


class ResponseObject(BaseModel):
    """A Response as ``POST /v1/responses`` returns it (and the stream's events carry it)."""

    id: str
    object: Literal["response"] = "response"
    created_at: int
    status: ResponseStatus
    model: str
    output: list[OutputItem] = Field(default_factory=list)
    instructions: str | None = None
    tools: list[dict[str, Any]] = Field(default_factory=list)
    tool_choice: str | dict[str, Any] = "auto"
    parallel_tool_calls: bool = True
    temperature: float | None = None
    top_p: float | None = None
    max_output_tokens: int | None = None
    text: dict[str, Any] = Field(default_factory=lambda: {"format": {"type": "text"}})
    metadata: dict[str, str] = Field(default_factory=dict)
    user: str | None = None
    store: bool = False
    previous_response_id: None = None
    error: ResponseError | None = None
    incomplete_details: IncompleteDetails | None = None
    usage: ResponseUsage | None = None

    def output_text(self) -> str:
        """The text of every output message, joined (what memory records as the answer)."""
        return "".join(part.text for item in self.output if isinstance(item, OutputMessage)
                       for part in item.content)  # fmt: skip
