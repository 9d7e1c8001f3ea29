"""The flow of one chat request, identical for streaming and non-streaming.

``prepare`` resolves the model endpoint and mitigation mode, retrieves the user's
memories and assembles the upstream messages; the upstream is called; ``finish``
hands the exchange to the memory writer (never awaited by the client beyond an
enqueue). Streaming differs only in how the upstream's answer is delivered.
Every route (``/v1/chat/completions``, ``/v1/responses``) goes through here.
What became of memory (retrieval, write) is recorded as a typed ``MemoryOutcome``
on the request context; only the API layer turns it into response headers.

The unit of memory is a user turn, not a request (``dmt_proxy.turns``). In an
agent's tool loop every step repeats the user's last message:

* retrieval runs at the turn's first step; later steps (messages after the last
  user message) reuse it from a bounded, expiring ``TurnCache`` instead of
  embedding and searching the same text again;
* a step whose answer ends in ``tool_calls`` writes nothing; the step that
  answers in text writes the turn: the user's last message and that final answer;
* tool outputs are never part of what is written or audited: the stored text is
  ``User: <last user message> / Assistant: <final answer>``. Tool results are
  third-party text (a web page, a database row), not the user's words, and
  auditing them as the user's would tag the user for what a tool returned.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass, replace
from typing import Any

from dmt_proxy.errors import InvalidRequest, UpstreamError, UpstreamRejected, UpstreamTimeout
from dmt_proxy.exchange import Exchange, MemoryService, RequestContext, WriteStatus
from dmt_proxy.metrics import Metrics
from dmt_proxy.openai_types import ChatCompletion, ChatCompletionChunk, ChatCompletionRequest
from dmt_proxy.policy import Policy
from dmt_proxy.resources import prompt_path
from dmt_proxy.turns import (
    MemoryAccess,
    RetrievalOutcome,
    RetrievalStatus,
    Turn,
    TurnCache,
    TurnKey,
    turn_of,
)
from dmt_proxy.upstream.base import ChatModel, ModelEndpoint, UpstreamCall
from dmt_proxy.upstream.models import ModelRegistry

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Prepared:
    call: UpstreamCall
    turn: Turn


def _report(ctx: RequestContext, retrieval: RetrievalOutcome) -> None:
    """Record what retrieval did in the request's memory outcome (the API reports it)."""
    ctx.outcome = replace(ctx.outcome, retrieval=retrieval)


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
        turns: TurnCache | None = None,
    ) -> None:
        """``registry`` endpoints carry the upstream timeout and retry budget."""
        self._turns = turns if turns is not None else TurnCache()
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
        turn = turn_of(req.messages)
        injected: list[dict[str, Any]] = []
        if ctx.mode.uses_ssp:
            injected.append({"role": "system", "content": self._ssp_text})
        if ctx.memory is MemoryAccess.OFF:
            _report(ctx, RetrievalOutcome(RetrievalStatus.OFF))
        elif ctx.scope is None:
            _report(ctx, RetrievalOutcome(RetrievalStatus.NO_USER))
            self._metrics.memory_skipped.labels("no_user").inc()
        elif self._memory is None:
            _report(ctx, RetrievalOutcome(RetrievalStatus.DISABLED))
        else:
            injected.extend(await self._retrieve(self._memory, ctx, turn))
        # Injected context goes first so the client's own system prompt keeps the last word.
        call = UpstreamCall(endpoint, messages=injected + messages, params=req.upstream_params())
        return Prepared(call=call, turn=turn)

    async def _retrieve(
        self, memory: MemoryService, ctx: RequestContext, turn: Turn
    ) -> list[dict[str, Any]]:
        """The turn's retrieval: searched at its first step, reused by the later ones."""
        assert ctx.scope is not None
        key = None
        if turn.query:
            key = TurnKey(user=ctx.scope.user, mode=ctx.mode.value, turn=turn.key)
        cached = self._turns.get(key) if key is not None and turn.continuation else None
        if cached is not None:
            _report(ctx, replace(cached.outcome, reused=True))
            return list(cached.messages)
        retrieval = await memory.retrieve(ctx, turn.query)
        _report(ctx, retrieval.outcome)
        if key is not None:
            self._turns.put(key, retrieval)
        return list(retrieval.messages)

    async def _finish(
        self, prepared: Prepared, ctx: RequestContext, answer: str, *, tool_step: bool = False
    ) -> None:
        if (
            self._memory is None
            or ctx.scope is None
            or ctx.memory is not MemoryAccess.READ_WRITE
            or not prepared.turn.query
        ):
            return
        if tool_step:
            ctx.outcome = replace(ctx.outcome, write=WriteStatus.TOOL_STEP)
            return
        if not answer:
            # Nothing to remember (an empty reply): the turn is stored with a real answer.
            return
        await self._memory.record(
            Exchange(
                scope=ctx.scope,
                query=prepared.turn.query,
                answer=answer,
                request_id=ctx.request_id,
                mode=ctx.mode,
                origin=ctx.origin,
            )
        )
        ctx.outcome = replace(ctx.outcome, write=WriteStatus.QUEUED)

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
        await self._finish(prepared, ctx, completion.text(), tool_step=completion.calls_tools())
        return completion

    async def stream(
        self, req: ChatCompletionRequest, ctx: RequestContext
    ) -> AsyncGenerator[ChatCompletionChunk, None]:
        """Streaming completion: yields chunks; the memory write happens after the last one."""
        prepared = await self._prepare(req, ctx)
        endpoint = prepared.call.endpoint
        parts: list[str] = []
        tool_step = False
        waiting_since: float | None = time.perf_counter()
        finished = False
        try:
            async for chunk in self._upstream.stream(prepared.call):
                if waiting_since is not None:
                    ctx.upstream_seconds += time.perf_counter() - waiting_since
                    waiting_since = None
                chunk.model = endpoint.name
                parts.append(chunk.text())
                tool_step = tool_step or chunk.calls_tools()
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
        await self._finish(prepared, ctx, "".join(parts), tool_step=tool_step)
