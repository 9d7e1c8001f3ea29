"""The OpenAI chat-completions wire format, modelled once and reused.

Requests are validated strictly where a wrong value would change behaviour
(roles, ``n``, ``stream``); fields the proxy does not interpret are passed to the
upstream unchanged. Fields no upstream here can honour are rejected with a 400
instead of being silently ignored.

Replies (``ChatCompletion``, ``ChatCompletionChunk``) are what every chat model
returns and what the OpenAPI document describes; they keep the fields a provider
adds, so the client gets what the upstream sent (the proxy only renames ``model``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from dmt_proxy.errors import InvalidRequest

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


# Replies. Every model keeps the fields it does not declare (``extra="allow"``): providers
# add their own (``system_fingerprint``, llama.cpp's ``timings``, ``reasoning_content``...),
# and the proxy returns what the upstream sent. Declared fields are optional wherever some
# upstream omits them, so a reply is refused only when a field has the wrong type. Dump
# with ``wire_json`` (``exclude_unset``) so nothing the upstream did not send is added.


class _Reply(BaseModel):
    model_config = ConfigDict(extra="allow")

    def wire_json(self) -> bytes:
        """Compact JSON of what the upstream sent (fields it left out stay out)."""
        # The serializer's bytes directly: no str round trip on the per-chunk path.
        return self.__pydantic_serializer__.to_json(self, exclude_unset=True)


class FunctionCall(_Reply):
    """The function a tool call invokes (in a stream, a fragment of it)."""

    name: str | None = None
    arguments: str | None = None


class ToolCall(_Reply):
    """A tool call of an assistant message, or a fragment of one in a stream delta."""

    index: int | None = None
    """Streams only: which tool call of the message this fragment continues."""
    id: str | None = None
    type: str | None = None
    function: FunctionCall | None = None


class CompletionMessage(_Reply):
    """The assistant message of a completion choice."""

    role: str | None = "assistant"
    content: str | list[dict[str, Any]] | None = None
    tool_calls: list[ToolCall] | None = None


class Choice(_Reply):
    index: int = 0
    message: CompletionMessage = Field(default_factory=CompletionMessage)
    finish_reason: str | None = None


class Usage(_Reply):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None


_TOOL_FINISH = ("tool_calls", "function_call")


def _text(content: object) -> str:
    return content if isinstance(content, str) else ""


class ChatCompletion(_Reply):
    """A non-streaming answer (``stream: true`` answers ``text/event-stream`` chunks)."""

    id: str | None = None
    object: str = "chat.completion"
    created: int | None = None
    model: str | None = None
    choices: list[Choice] = Field(default_factory=list)
    usage: Usage | None = None

    @classmethod
    def of_text(
        cls, text: str, *, id: str, model: str, created: int, usage: Usage | None = None
    ) -> ChatCompletion:
        """A finished one-choice answer ``text`` (what the shipped fakes send)."""
        message = CompletionMessage(role="assistant", content=text)
        choice = Choice(index=0, message=message, finish_reason="stop")
        reply = cls(id=id, object="chat.completion", created=created, model=model,
                    choices=[choice])  # fmt: skip
        if usage is not None:
            reply.usage = usage
        return reply

    def text(self) -> str:
        """The assistant text of the first choice ('' when there is none)."""
        return _text(self.choices[0].message.content) if self.choices else ""

    def calls_tools(self) -> bool:
        """True when the first choice ends in tool calls (a tool-loop step, not an answer)."""
        if not self.choices:
            return False
        choice = self.choices[0]
        return bool(choice.message.tool_calls) or choice.finish_reason in _TOOL_FINISH


class Delta(_Reply):
    """What one stream chunk adds to the assistant message."""

    role: str | None = None
    content: str | list[dict[str, Any]] | None = None
    tool_calls: list[ToolCall] | None = None


class ChunkChoice(_Reply):
    index: int = 0
    delta: Delta = Field(default_factory=Delta)
    finish_reason: str | None = None


class ChatCompletionChunk(_Reply):
    """One server-sent event of a streamed answer."""

    id: str | None = None
    object: str = "chat.completion.chunk"
    created: int | None = None
    model: str | None = None
    choices: list[ChunkChoice] = Field(default_factory=list)
    usage: Usage | None = None

    @classmethod
    def of_text(
        cls, text: str | None, *, id: str, model: str, created: int, finish: str | None = None
    ) -> ChatCompletionChunk:
        """A one-choice chunk adding ``text`` (None: an empty delta, e.g. the last chunk)."""
        delta = Delta(content=text) if text is not None else Delta()
        choice = ChunkChoice(index=0, delta=delta, finish_reason=finish)
        return cls(id=id, object="chat.completion.chunk", created=created, model=model,
                   choices=[choice])  # fmt: skip

    def text(self) -> str:
        """The text delta of the first choice ('' when there is none)."""
        return _text(self.choices[0].delta.content) if self.choices else ""

    def calls_tools(self) -> bool:
        """True when this chunk adds a tool call or ends the answer in tool calls."""
        if not self.choices:
            return False
        choice = self.choices[0]
        return bool(choice.delta.tool_calls) or choice.finish_reason in _TOOL_FINISH


def reply_problem(exc: ValidationError) -> str:
    """The first problem of a reply that failed validation, for an error message."""
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    return f"{where}: {first['msg']}" if where else str(first["msg"])


def translated_chat_request(body: dict[str, Any], param: str) -> ChatCompletionRequest:
    """A chat request from another API's translated fields (``None`` values left out).

    A translated value out of chat's range is a 400 naming the chat field, with ``param``
    the caller's own field it came from (the Responses API's ``input``, Messages'
    ``messages``).
    """
    try:
        return ChatCompletionRequest.model_validate({k: v for k, v in body.items()
                                                     if v is not None})  # fmt: skip
    except ValidationError as exc:  # a translated field out of range: name the chat field
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InvalidRequest(
            f"Invalid request after translation to chat ({where}): {first['msg']}", param=param
        ) from None
