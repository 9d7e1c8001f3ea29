"""The memory side of the request pipeline: retrieval with DMT rendering, durable write-behind."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from dmt_proxy.audit.outbox import Outbox
from dmt_proxy.audit.render import RenderItem, render_memories
from dmt_proxy.audit.worker import OutboxWorker
from dmt_proxy.memory.base import MemoryBackend, Scope
from dmt_proxy.metrics import Metrics
from dmt_proxy.pipeline import Exchange, RequestContext
from dmt_proxy.policy import Policy
from dmt_proxy.resources import prompt_path

log = logging.getLogger(__name__)


class MemoryPipeline:
    """Implements ``pipeline.MemoryService`` over a backend, the outbox and its worker."""

    def __init__(
        self,
        *,
        backend: MemoryBackend,
        backend_name: str,
        outbox: Outbox,
        worker: OutboxWorker | None,
        policy: Policy,
        metrics: Metrics,
        retrieval_timeout_s: float = 5.0,
    ) -> None:
        self.backend = backend
        self.backend_name = backend_name
        self.outbox = outbox
        self.worker = worker
        self.policy = policy
        self.metrics = metrics
        self.retrieval_timeout_s = retrieval_timeout_s
        self._instruction = prompt_path(policy.audit.dmt_prompt).read_text(encoding="utf-8").strip()

    async def context_messages(self, ctx: RequestContext, query: str) -> list[dict[str, Any]]:
        assert ctx.user is not None
        ctx.headers["x-dmt-memory"] = ctx.memory.value
        top_k = self.policy.memory.top_k
        if top_k == 0 or not query.strip():
            return []
        started = time.perf_counter()
        try:
            hits = await asyncio.wait_for(
                self.backend.search(Scope(user=ctx.user), query, top_k),
                timeout=self.retrieval_timeout_s,
            )
        except Exception as exc:
            # The chat still answers; the write side is unaffected (it goes to the outbox).
            log.warning("memory retrieval failed for request %s: %r", ctx.request_id, exc)
            self.metrics.memory_skipped.labels("store_unavailable").inc()
            ctx.headers["x-dmt-memory"] = (
                f"unavailable ({type(exc).__name__}); answered without memory"
            )
            return []
        finally:
            self.metrics.retrieval_duration.labels(self.backend_name).observe(
                time.perf_counter() - started
            )
        min_score = self.policy.memory.min_score
        records = [h.record for h in hits if min_score is None or h.score >= min_score]
        ctx.headers["x-dmt-memories"] = str(len(records))
        items = [RenderItem(r.text, r.created_at, r.audit_status, r.tag) for r in records]
        text = render_memories(items, with_tags=ctx.mode.uses_dmt, instruction=self._instruction)
        return [{"role": "system", "content": text}] if text else []

    async def record(self, exchange: Exchange) -> None:
        memory_id = await self.outbox.enqueue(
            user=exchange.user,
            query=exchange.query,
            answer=exchange.answer,
            request_id=exchange.request_id,
            mode=exchange.mode.value,
        )
        log.debug("queued memory %s for user scope", memory_id)
        if self.worker is not None:
            self.worker.wake()
