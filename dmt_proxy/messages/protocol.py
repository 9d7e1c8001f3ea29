"""The Anthropic Messages wire format: the request dmt-proxy accepts, the Message it returns.

Supported: ``model``, ``max_tokens``, ``messages`` (text, ``tool_use`` and
``tool_result`` blocks), ``system`` (a string or text blocks), custom ``tools``,
``tool_choice`` (auto, any, tool, none; ``disable_parallel_tool_use``),
``temperature``, ``top_p``, ``top_k`` (passed to the upstream as an extra
parameter, as llama.cpp takes it), ``stop_sequences``, ``stream`` and
``metadata.user_id`` (the memory scope, after ``X-DMT-User``).

Accepted and ignored: ``cache_control`` on the request, blocks and tools (a
prompt-caching hint; dmt-proxy's upstreams cache nothing a client controls),
``service_tier`` (no tier to choose), ``thinking`` of type ``disabled``.

Refused with an Anthropic-shaped 400 naming the field or block: image, document,
search result and thinking blocks, extended ``thinking``, server tools (web
search, code execution, computer use...), MCP servers, containers, structured
output settings, and every field not listed here.

Errors leave in Anthropic's shape, ``{"type": "error", "error": {"type", "message"},
"request_id"}``, with the error type Anthropic uses for each status.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from dmt_proxy.errors import InvalidRequest

REFUSED: dict[str, str] = {
    "container": "containers (code execution, skills) are not supported by dmt-proxy",
    "mcp_servers": "MCP servers are not supported by dmt-proxy; your agent runs its tools",
    "context_management": "context management is not supported by dmt-proxy",
    "output_config": "output settings (effort, structured output) are not supported by dmt-proxy",
    "output_format": "structured outputs are not supported on /v1/messages",
    "inference_geo": "dmt-proxy has no inference regions",
    "diagnostics": "diagnostics are not supported by dmt-proxy",
    "speed": "speed modes are not supported by dmt-proxy",
}
"""Fields refused whenever they are set (not null)."""

ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}
"""Anthropic's error type of each HTTP status (docs: "Errors"); others map by class."""


def error_type(status: int) -> str:
    """The Anthropic error type of an HTTP status."""
    known = ERROR_TYPES.get(status)
    if known is not None:
        return known
    return "invalid_request_error" if status < 500 else "api_error"


def error_body(status: int, message: str, request_id: str | None) -> dict[str, Any]:
    """``{"type": "error", "error": {"type", "message"}, "request_id"}``."""
    return {"type": "error", "error": {"type": error_type(status), "message": message},
            "request_id": request_id}  # fmt: skip


def check_fields(data: dict[str, Any]) -> None:
    """Refuse the fields dmt-proxy cannot honour, naming each (before validation)."""
    for field, why in REFUSED.items():
        if data.get(field) is not None:
            raise InvalidRequest(f"Unsupported parameter '{field}': {why}.", param=field,
                                 code="unsupported_parameter")  # fmt: skip
    thinking = data.get("thinking")
    if thinking is not None and not (isinstance(thinking, dict)
                                     and thinking.get("type") == "disabled"):  # fmt: skip
        raise InvalidRequest("Unsupported parameter 'thinking': extended thinking is not "
                             "supported by dmt-proxy's chat upstreams (omit it, or send "
                             '{"type": "disabled"}).', param="thinking",
                             code="unsupported_parameter")  # fmt: skip


class Metadata(BaseModel):
    """``metadata``: ``user_id`` names the memory scope."""

    model_config = ConfigDict(extra="forbid")

    user_id: str | None = None


class MessagesRequest(BaseModel):
    """``POST /v1/messages`` body (messages, system and tools are checked in ``translate``)."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1)
    max_tokens: int = Field(ge=1)
    messages: list[dict[str, Any]] = Field(min_length=1)
    system: str | list[dict[str, Any]] | None = None
    metadata: Metadata | None = None
    stop_sequences: list[str] | None = None
    stream: bool = False
    temperature: float | None = Field(default=None, ge=0, le=1)
    top_p: float | None = Field(default=None, ge=0, le=1)
    top_k: int | None = Field(default=None, ge=0)
    tools: list[dict[str, Any]] | None = None
    tool_choice: dict[str, Any] | None = None
    # Accepted and ignored (module docstring); declared so they are known.
    cache_control: dict[str, Any] | None = None
    service_tier: Literal["auto", "standard_only"] | None = None
    thinking: dict[str, Any] | None = None

    def scope_user(self) -> str | None:
        """The user named by the body: ``metadata.user_id``."""
        return self.metadata.user_id if self.metadata is not None else None


# The Message object. Fields follow anthropic.types.Message; the unit tests validate
# what these dump to against the anthropic SDK's own models.


class TextBlock(BaseModel):
    type: Literal["text"] = "text"
    text: str


class ToolUseBlock(BaseModel):
    type: Literal["tool_use"] = "tool_use"
    id: str
    name: str
    input: dict[str, Any]


ContentBlock = TextBlock | ToolUseBlock

StopReason = Literal["end_turn", "max_tokens", "stop_sequence", "tool_use", "refusal"]


class MessageUsage(BaseModel):
    input_tokens: int = 0
    output_tokens: int = 0


class MessageObject(BaseModel):
    """A Message as ``POST /v1/messages`` returns it (``message_start`` carries its shell)."""

    id: str
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"
    content: list[ContentBlock] = Field(default_factory=list)
    model: str
    stop_reason: StopReason | None = None
    stop_sequence: str | None = None
    usage: MessageUsage = Field(default_factory=MessageUsage)

    def text(self) -> str:
        """The text of every text block, joined."""
        return "".join(b.text for b in self.content if isinstance(b, TextBlock))


class ErrorDetail(BaseModel):
    type: str
    message: str


class ErrorResponse(BaseModel):
    """``{"type": "error", "error": {...}, "request_id"}``: every non-2xx answer of the route."""

    type: Literal["error"] = "error"
    error: ErrorDetail
    request_id: str | None = None
