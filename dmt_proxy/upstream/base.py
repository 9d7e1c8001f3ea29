"""The chat model seam: one call in, a typed OpenAI completion (or chunks) out.

``ModelEndpoint`` is the one description of how to reach a model (the proxy's
routes, the auditor, a memory backend's model, a benchmark's generator);
``upstream.factory`` builds them. ``UpstreamCall`` is one request to an endpoint, its
messages typed (``ChatMessage``); each client turns them into the wire format's dicts
at its own HTTP edge (``UpstreamCall.wire_messages``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator

from dmt_proxy.openai_types import ChatCompletion, ChatCompletionChunk, ChatMessage

EndpointKind = Literal["local", "alias", "provider", "direct"]
"""``local`` (embedded model), ``alias`` (declared in the policy), ``provider`` (a litellm
name), ``direct`` (given outside the registry: flags, benchmark configs, tests)."""

_OPENAI_WIRE_PREFIXES = ("openai/", "hosted_vllm/")


class ModelEndpoint(BaseModel):
    """How to reach one model: its litellm name, address, key and call limits."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = ""
    """The name clients, tags and logs know it by (``local/qwen2.5-0.5b``); default ``model``."""
    model: str = Field(min_length=1)
    """litellm model name, e.g. ``openai/qwen2.5-0.5b`` or ``anthropic/claude-3-haiku``."""
    api_base: str | None = None
    api_key: str | None = Field(default=None, repr=False)
    kind: EndpointKind = "direct"
    """A bounded label for metrics."""
    timeout_s: float = Field(default=300.0, gt=0)
    max_retries: int = Field(default=0, ge=0)
    supports_tools: bool = False
    """True only for models that really make tool calls (langmem's own manager)."""

    @model_validator(mode="before")
    @classmethod
    def _default_name(cls, data: Any) -> Any:
        if isinstance(data, dict) and not data.get("name") and data.get("model"):
            return {**data, "name": data["model"]}
        return data

    @property
    def label(self) -> str:
        """Human name for error messages: the name and, when there is one, the address."""
        return f"{self.name} at {self.api_base}" if self.api_base else self.name

    @property
    def openai_compatible(self) -> bool:
        """True when calls can go to ``api_base`` as they are (no litellm translation)."""
        return bool(self.api_base) and self.model.startswith(_OPENAI_WIRE_PREFIXES)

    def with_limits(self, *, timeout_s: float, max_retries: int = 0) -> ModelEndpoint:
        """The same endpoint with another timeout and retry budget."""
        return self.model_copy(update={"timeout_s": timeout_s, "max_retries": max_retries})


MessageLike = ChatMessage | Mapping[str, Any]
"""A message as callers write it: typed, or its OpenAI dict (validated into a ``ChatMessage``)."""


def as_message(message: MessageLike) -> ChatMessage:
    """``message`` as a ``ChatMessage`` (a dict is validated; ValidationError if malformed)."""
    return message if isinstance(message, ChatMessage) else ChatMessage.model_validate(message)


@dataclass(frozen=True, init=False)
class UpstreamCall:
    """One request to an endpoint: typed messages, turned into dicts only at a client's edge."""

    endpoint: ModelEndpoint
    messages: tuple[ChatMessage, ...]
    params: dict[str, Any] = field(default_factory=dict)
    label: str = ""
    """Who is calling, for error messages (``auditor local/qwen2.5-1.5b``); default the
    endpoint's label."""

    def __init__(
        self,
        endpoint: ModelEndpoint,
        messages: Iterable[MessageLike],
        params: dict[str, Any] | None = None,
        label: str = "",
    ) -> None:
        """``messages`` may be typed or OpenAI dicts; dicts are validated here, once."""
        # Frozen: the fields are set the way dataclasses' own __init__ sets them.
        object.__setattr__(self, "endpoint", endpoint)
        object.__setattr__(self, "messages", tuple(as_message(m) for m in messages))
        object.__setattr__(self, "params", {} if params is None else params)
        object.__setattr__(self, "label", label)

    @property
    def where(self) -> str:
        """The name used in error messages about this call."""
        return self.label or self.endpoint.label

    def wire_messages(self) -> list[dict[str, Any]]:
        """The messages in the OpenAI wire format, as they were given (for a client's HTTP edge)."""
        return [m.model_dump(exclude_unset=True) for m in self.messages]


class ChatModel(Protocol):
    """Anything that answers chat completions (litellm, a scripted fake, ...)."""

    async def complete(self, call: UpstreamCall) -> ChatCompletion:
        """Return the upstream's ``chat.completion``."""
        ...

    def stream(self, call: UpstreamCall) -> AsyncIterator[ChatCompletionChunk]:
        """Yield the upstream's ``chat.completion.chunk`` objects."""
        ...


class OwnedChatModel(ChatModel, Protocol):
    """A chat model with resources (a connection pool) that its builder closes."""

    async def aclose(self) -> None:
        """Release the model's connections."""
        ...
