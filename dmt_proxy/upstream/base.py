"""The chat model seam: one call in, an OpenAI-shaped completion (or chunks) out."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class UpstreamCall:
    """A fully resolved request to an upstream model."""

    model: str
    """litellm model name, e.g. ``openai/qwen2.5-0.5b`` or ``anthropic/claude-3-haiku``."""
    messages: list[dict[str, Any]]
    params: dict[str, Any] = field(default_factory=dict)
    api_base: str | None = None
    api_key: str | None = None
    label: str = ""
    """Human name of the upstream for error messages (alias and address)."""
    timeout_s: float = 300.0
    max_retries: int = 0


class ChatModel(Protocol):
    """Anything that answers chat completions (litellm, a scripted fake, ...)."""

    async def complete(self, call: UpstreamCall) -> dict[str, Any]:
        """Return an OpenAI ``chat.completion`` object as a dict."""
        ...

    def stream(self, call: UpstreamCall) -> AsyncIterator[dict[str, Any]]:
        """Yield OpenAI ``chat.completion.chunk`` objects as dicts."""
        ...


def completion_text(completion: dict[str, Any]) -> str:
    """The assistant text of a ``chat.completion`` dict ('' when there is none)."""
    choices = completion.get("choices") or []
    if not choices:
        return ""
    message = choices[0].get("message") or {}
    content = message.get("content")
    return content if isinstance(content, str) else ""


def chunk_text(chunk: dict[str, Any]) -> str:
    """The text delta of a ``chat.completion.chunk`` dict."""
    choices = chunk.get("choices") or []
    if not choices:
        return ""
    delta = choices[0].get("delta") or {}
    content = delta.get("content")
    return content if isinstance(content, str) else ""
