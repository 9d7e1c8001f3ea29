"""The flow of one chat request, identical for streaming and non-streaming.

``prepare`` resolves the model endpoint and mitigation mode, retrieves the user's
memories and assembles the upstream messages; the upstream is called; ``finish``
hands the exchange to the memory writer (never awaited by the client beyond an
enqueue). Streaming differs only in how the upstream's answer is delivered.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

from dmt_proxy.errors import InvalidRequest, UpstreamError, UpstreamRejected, UpstreamTimeout
from dmt_proxy.memory.base import Scope
from dmt_proxy.metrics import Metrics
from dmt_proxy.openai_types import ChatCompletion, ChatCompletionChunk, ChatCompletionRequest
from dmt_proxy.policy import Mode, Policy
from dmt_proxy.resources import prompt_path
from dmt_proxy.upstream.base import ChatModel, ModelEndpoint, UpstreamCall
from dmt_proxy.upstream.registry import ModelRegistry

log = logging.getLogger(__name__)


class MemoryAccess(str, Enum):
    """What a request may do with memory (header ``X-DMT-Memory``)."""

    READ_WRITE = "read-write"
    READ_ONLY = "read-only"
    OFF = "off"


@dataclass
class RequestContext:
    """Per-request facts gathered by the API layer, plus what the pipeline reports back."""

    request_id: str
    mode: Mode
    memory: MemoryAccess
    scope: Scope | None
    """The memory scope, built once by the API layer (``None``: the request names no user)."""
    started: float = field(default_factory=time.perf_counter)
    upstream_seconds: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    """Response headers the pipeline wants the client to see (``x-dmt-*``)."""

    def overhead_ms(self) -> float:
        return max(0.0, (time.perf_counter() - self.started - self.upstream_seconds) * 1000.0)


@dataclass(frozen=True)
class Exchange:
    """A finished interaction ``(q_t, r_t)``, the unit written to memory."""

    scope: Scope
    query: str
    answer: str
    request_id: str
    mode: Mode


class MemoryService(Protocol):
    """The memory side of the pipeline: retrieval before, write-behind after."""

    async def context_messages(self, ctx: RequestContext, query: str) -> list[dict[str, Any]]:
        """System messages carrying the user's retrieved memories ([] if none)."""
        ...

    async def record(self, exchange: Exchange) -> None:
        """Durably enqueue ``exchange`` for auditing and storage; must return fast."""
        ...


@dataclass(frozen=True)
class Prepared:
    call: UpstreamCall
    query: str


class ChatPipeline:
    """Turns a validated chat request into an upstream call and a memory write."""

    def __init__(
        self,
        *,
        upstream: ChatModel,
        registry: ModelRegistry,
        policy: Policy,
        metrics: Metrics,
        memory: MemoryService | None = None,
    ) -> None:
        """``registry`` endpoints carry the upstream timeout and retry budget."""
        self._upstream = upstream
        self._registry = registry
        self._policy = policy
        self._metrics = metrics
        self._memory = memory
        self._ssp_text = prompt_path(policy.audit.ssp_prompt).read_text(encoding="utf-8").strip()

    async def _prepare(self, req: ChatCompletionRequest, ctx: RequestContext) -> Prepared:
        await self._registry.ensure_providers(req.model)
        endpoint = self._registry.resolve(req.model)
        messages = [m.model_dump(exclude_none=True) for m in req.messages]
        query = req.last_user_text()
        injected: list[dict[str, Any]] = []
        if ctx.mode.uses_ssp:
            injected.append({"role": "system", "content": self._ssp_text})
        if ctx.memory is MemoryAccess.OFF:
            ctx.headers["x-dmt-memory"] = "off"
        elif ctx.scope is None:
            ctx.headers["x-dmt-memory"] = "none; no user (set the 'user' field or X-DMT-User)"
            self._metrics.memory_skipped.labels("no_user").inc()
        elif self._memory is None:
            ctx.headers["x-dmt-memory"] = "disabled"
        else:
            injected.extend(await self._memory.context_messages(ctx, query))
        # Injected context goes first so the client's own system prompt keeps the last word.
        call = UpstreamCall(endpoint, messages=injected + messages, params=req.upstream_params())
        return Prepared(call=call, query=query)

    async def _finish(self, prepared: Prepared, ctx: RequestContext, answer: str) -> None:
        if (
            self._memory is None
            or ctx.scope is None
            or ctx.memory is not MemoryAccess.READ_WRITE
            or not prepared.query
            # A reply that is only a tool call has no answer yet: the turn is stored once,
            # with the answer that follows the tool results.
            or not answer
        ):
            return
        await self._memory.record(
            Exchange(
                scope=ctx.scope,
                query=prepared.query,
                answer=answer,
                request_id=ctx.request_id,
                mode=ctx.mode,
            )
        )
        ctx.headers.setdefault("x-dmt-memory-write", "queued")

    def _count_upstream_error(self, endpoint: ModelEndpoint, exc: UpstreamError) -> None:
        kind = (
            "timeout"
            if isinstance(exc, UpstreamTimeout)
            else "rejected"
            if isinstance(exc, UpstreamRejected)
            else "error"
        )
        self._metrics.upstream_errors.labels(endpoint.kind, kind).inc()

    async def complete(self, req: ChatCompletionRequest, ctx: RequestContext) -> ChatCompletion:
        """Non-streaming completion."""
        if req.stream:
            raise InvalidRequest("use stream() for streaming requests", param="stream")
        prepared = await self._prepare(req, ctx)
        endpoint = prepared.call.endpoint
        t0 = time.perf_counter()
        try:
            completion = await self._upstream.complete(prepared.call)
        except UpstreamError as exc:
            self._count_upstream_error(endpoint, exc)
            raise
        finally:
            elapsed = time.perf_counter() - t0
            ctx.upstream_seconds += elapsed
            self._metrics.upstream_duration.labels(endpoint.kind, "false").observe(elapsed)
        completion.model = endpoint.name
        await self._finish(prepared, ctx, completion.text())
        return completion

    async def stream(
        self, req: ChatCompletionRequest, ctx: RequestContext
    ) -> AsyncGenerator[ChatCompletionChunk, None]:
        """Streaming completion: yields chunks; the memory write happens after the last one."""
        prepared = await self._prepare(req, ctx)
        endpoint = prepared.call.endpoint
        parts: list[str] = []
        waiting_since: float | None = time.perf_counter()
        finished = False
        try:
            async for chunk in self._upstream.stream(prepared.call):
                if waiting_since is not None:
                    ctx.upstream_seconds += time.perf_counter() - waiting_since
                    waiting_since = None
                chunk.model = endpoint.name
                parts.append(chunk.text())
                # Time spent yielding to the client is the client's, not the proxy's.
                yield chunk
                waiting_since = time.perf_counter()
            finished = True
        except UpstreamError as exc:
            self._count_upstream_error(endpoint, exc)
            raise
        finally:
            if waiting_since is not None:
                ctx.upstream_seconds += time.perf_counter() - waiting_since
            self._metrics.upstream_duration.labels(endpoint.kind, "true").observe(
                ctx.upstream_seconds
            )
            if not finished:
                log.info("stream %s ended early; its exchange is not written", ctx.request_id)
        await self._finish(prepared, ctx, "".join(parts))
