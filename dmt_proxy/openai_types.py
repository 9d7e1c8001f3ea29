"""The OpenAI chat-completions wire format, modelled once and reused.

Requests are validated strictly where a wrong value would change behaviour
(roles, ``n``, ``stream``); fields the proxy does not interpret are passed to the
upstream unchanged. Fields no upstream here can honour are rejected with a 400
instead of being silently ignored.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

Role = Literal["system", "developer", "user", "assistant", "tool", "function"]

# Parameters forwarded to the upstream as they are.
PASSTHROUGH_PARAMS: tuple[str, ...] = (
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "stop",
    "presence_penalty",
    "frequency_penalty",
    "seed",
    "logprobs",
    "top_logprobs",
    "response_format",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "logit_bias",
    "stream_options",
)

# OpenAI fields that no upstream behind this proxy can honour: rejected, never dropped.
UNSUPPORTED_PARAMS: dict[str, str] = {
    "audio": "audio output is not supported by dmt-proxy",
    "modalities": "only text output is supported by dmt-proxy",
    "prediction": "predicted outputs are not supported by dmt-proxy",
    "web_search_options": "web search is not supported by dmt-proxy",
    "functions": "the deprecated 'functions' field is not supported; use 'tools'",
    "function_call": "the deprecated 'function_call' field is not supported; use 'tool_choice'",
}


class ChatMessage(BaseModel):
    """One message of a chat request."""

    model_config = ConfigDict(extra="allow")

    role: Role
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None

    def text(self) -> str:
        """The message's text: string content, or the text parts joined."""
        if isinstance(self.content, str):
            return self.content
        if isinstance(self.content, list):
            return "\n".join(
                str(part.get("text", ""))
                for part in self.content
                if isinstance(part, dict) and part.get("type") == "text"
            )
        return ""


class ChatCompletionRequest(BaseModel):
    """``POST /v1/chat/completions`` body."""

    model_config = ConfigDict(extra="allow")

    model: str | None = Field(default=None, min_length=1)
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool = False
    n: int | None = Field(default=None, ge=1)
    user: str | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    stop: str | list[str] | None = None
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    seed: int | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    response_format: dict[str, Any] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    logit_bias: dict[str, float] | None = None
    stream_options: dict[str, Any] | None = None

    @field_validator("n")
    @classmethod
    def _single_choice(cls, value: int | None) -> int | None:
        if value is not None and value > 1:
            raise ValueError("n > 1 is not supported: memory is written from a single answer")
        return value

    def upstream_params(self) -> dict[str, Any]:
        """Parameters to forward: the known ones that are set, then unknown extras."""
        params = {k: getattr(self, k) for k in PASSTHROUGH_PARAMS if getattr(self, k) is not None}
        # Extras (e.g. llama.cpp's ``grammar`` sent through ``extra_body``) go on unchanged.
        for key, value in (self.model_extra or {}).items():
            params[key] = value
        return params

    def last_user_text(self) -> str:
        """Text of the last user message ('' if there is none)."""
        for message in reversed(self.messages):
            if message.role == "user":
                return message.text()
        return ""
