"""Where a benchmark sends its requests: any OpenAI-compatible endpoint, or the proxy.

Through the proxy, a benchmark identifies the simulated user (``X-DMT-User``) and
asks for read-only memory (``X-DMT-Memory: read-only``) so that evaluation
prompts are never written back (paper §4.1, "Retrieve-only Mode").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Endpoint:
    """An OpenAI-compatible chat endpoint and the headers to send with each call."""

    base_url: str
    model: str
    api_key: str = "local"
    user: str | None = None
    memory: str | None = None
    """``read-only``, ``read-write`` or ``off``; sent as ``X-DMT-Memory`` when set."""
    mode: str | None = None
    """Mitigation mode sent as ``X-DMT-Mode`` when set (proxy only)."""
    timeout_s: float = 300.0
    concurrency: int = 4
    extra_headers: dict[str, str] = field(default_factory=dict)

    def headers(self) -> dict[str, str]:
        headers = dict(self.extra_headers)
        if self.user:
            headers["X-DMT-User"] = self.user
        if self.memory:
            headers["X-DMT-Memory"] = self.memory
        if self.mode:
            headers["X-DMT-Mode"] = self.mode
        return headers

    def client(self) -> Any:
        """An ``openai.AsyncOpenAI`` client for this endpoint."""
        from openai import AsyncOpenAI

        return AsyncOpenAI(
            base_url=self.base_url,
            api_key=self.api_key,
            timeout=self.timeout_s,
            max_retries=2,
            default_headers=self.headers(),
        )

    def model_name(self) -> str:
        """The model name as the endpoint expects it.

        llama-server answers to its alias (``qwen2.5-0.5b``); the proxy to ``local/...``.
        """
        return self.model
