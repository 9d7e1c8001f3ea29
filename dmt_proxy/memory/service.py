"""The proxy's memory service: retrieval with DMT rendering, durable writes, admin operations.

``DurableMemoryService`` implements the pipeline's ``MemoryService`` over a backend,
the outbox and the worker; it is put together in one place,
``dmt_proxy.memory.assembly.build_memory_service``. The API layer only calls the
service; it never reaches the outbox, the worker or the backend.

Layering: this module imports the memory write path (``dmt_proxy.memory.write``)
and the renderer, never ``dmt_proxy.audit``; nothing in ``audit/`` imports it, and
``dmt_proxy.memory`` (the package) does not import it either.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, field_serializer

from dmt_proxy.exchange import Exchange, RequestContext
from dmt_proxy.memory.base import MemoryBackend, MemoryRecord, Scope
from dmt_proxy.memory.circuit import CircuitBreaker, CircuitOpenError, describe
from dmt_proxy.memory.entry import MemoryEntry
from dmt_proxy.memory.erasure import Erasure, UserExport, erase_user, export_user
from dmt_proxy.memory.render import render_memories
from dmt_proxy.memory.write.outbox import Outbox, OutboxItem
from dmt_proxy.memory.write.worker import OutboxWorker, drain
from dmt_proxy.metrics import Metrics
from dmt_proxy.modes import Mode
from dmt_proxy.policy import Policy
from dmt_proxy.provenance import Origin
from dmt_proxy.resources import prompt_path
from dmt_proxy.tags import AuditStatus
from dmt_proxy.turns import Retrieval

if TYPE_CHECKING:  # the review service builds on this module, not the other way round
    from dmt_proxy.memory.review import ReviewService
    from dmt_proxy.memory.write.trail import Trail

log = logging.getLogger(__name__)

CIRCUIT_OPEN = "store circuit open"
"""The retrieval failure reported (``x-dmt-memory: unavailable (…)``) while the circuit is open."""


def _queued(item: OutboxItem) -> MemoryEntry:
    """The entry of a write still in the outbox: the record it will be, ``pending``."""
    return MemoryEntry.of(item.record(AuditStatus.PENDING))


class OutboxStats(BaseModel):
    """How far behind the write path is; served as is by ``GET /v1/admin/outbox``."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", json_schema_serialization_defaults_required=True
    )

    object: Literal["outbox"] = "outbox"
    depth: int
    """Writes acknowledged but not yet stored and audited."""
    oldest_pending_age_s: float
    """Age of the oldest of them (0 when there are none)."""

    @field_serializer("oldest_pending_age_s")
    def _ms(self, age_s: float) -> float:
        # The wire shows milliseconds, as it always has; the service keeps the exact age.
        return round(age_s, 3)


class DurableMemoryService:
    """Implements ``pipeline.MemoryService`` (and the admin operations) over a backend,
    the durable outbox and the worker that audits and stores what the outbox holds."""

    def __init__(
        self,
        *,
        backend: MemoryBackend,
        backend_name: str,
        outbox: Outbox,
        worker: OutboxWorker,
        policy: Policy,
        metrics: Metrics,
        retrieval_timeout_s: float = 5.0,
        run_worker: bool = True,
        trail: Trail | None = None,
        circuit: CircuitBreaker | None = None,
        nonce_key: str | None = None,
    ) -> None:
        """``nonce_key``: hex key of the memory block's nonce (``Settings.memory_nonce_key``;
        ``None``: the renderer's random per-process key)."""
        self._backend = backend
        self._nonce_key = bytes.fromhex(nonce_key) if nonce_key is not None else None
        self._trail = trail
        self.review: ReviewService | None = None
        """The human review operations (``dmt_proxy.memory.review``), set by the assembly."""
        self._backend_name = backend_name
        self._outbox = outbox
        self._worker = worker
        self._policy = policy
        self._metrics = metrics
        self._retrieval_timeout_s = retrieval_timeout_s
        self._run_worker = run_worker
        self._circuit = circuit
        """The store's circuit: while it is open retrieval is skipped without waiting."""
        self._instruction = prompt_path(policy.audit.dmt_prompt).read_text(encoding="utf-8").strip()

    @property
    def instruction(self) -> str:
        """The DMT instruction shown above tagged memories (the versioned prompt's text)."""
        return self._instruction

    # -- lifecycle -------------------------------------------------------------

    def start(self) -> None:
        """Start the worker (in the running event loop), unless it runs elsewhere."""
        if self._run_worker:
            self._worker.start()

    async def aclose(self) -> None:
        """Stop the worker and the circuit's probe, then close the outbox and the backend."""
        await self._worker.stop()
        if self._circuit is not None:
            await self._circuit.aclose()
        await self._outbox.aclose()
        if self._trail is not None:
            await self._trail.aclose()
        await self._backend.close()

    async def drain(self, *, timeout_s: float = 600.0) -> bool:
        """Wait until every acknowledged write is stored and audited (False on timeout)."""
        return await drain(self._worker, timeout_s=timeout_s)

    # -- the request path --------------------------------------------------------

    async def retrieve(self, ctx: RequestContext, query: str) -> Retrieval:
        """System messages carrying the memories of ``ctx.scope`` relevant to ``query``."""
        assert ctx.scope is not None, "the pipeline asks for memories only with a scope"
        top_k = self._policy.memory.top_k
        if top_k == 0 or not query.strip():
            return Retrieval.skipped(ctx.memory)
        if self._circuit is not None and not self._circuit.allow():
            # The store is known to be down: answer at once instead of waiting out the timeout.
            self._metrics.memory_skipped.labels("store_unavailable").inc()
            return Retrieval.unavailable(ctx.memory, CIRCUIT_OPEN)
        started = time.perf_counter()
        fetch = self._fetch(ctx.scope, query, top_k)
        try:
            if self._circuit is None:
                records = await asyncio.wait_for(fetch, timeout=self._retrieval_timeout_s)
            else:  # gives up as soon as the circuit opens, and reports what failed to it
                records = await self._circuit.run(
                    fetch, timeout_s=self._retrieval_timeout_s, operation="retrieval"
                )
        except Exception as exc:
            # The chat still answers; the write side is unaffected (it goes to the outbox).
            self._metrics.memory_skipped.labels("store_unavailable").inc()
            if isinstance(exc, CircuitOpenError):  # the circuit has said why, once
                return Retrieval.unavailable(ctx.memory, CIRCUIT_OPEN)
            log.warning("memory retrieval failed for request %s: %s", ctx.request_id, describe(exc))
            return Retrieval.unavailable(ctx.memory, type(exc).__name__)
        finally:
            self._metrics.retrieval_duration.labels(self._backend_name).observe(
                time.perf_counter() - started
            )
        # Oldest first, not most similar first: the same memories then render as the same
        # block for every query, so llama-server's prefix cache reuses it across requests
        # (a DIB audit's decisions differ in the query, rarely in the memories retrieved).
        records.sort(key=lambda r: (r.created_at, r.id))
        text = self.render([MemoryEntry.of(r) for r in records], ctx.mode)
        messages = [{"role": "system", "content": text}] if text else []
        return Retrieval.searched(ctx.memory, messages, len(records))

    def render(self, entries: Sequence[MemoryEntry], mode: Mode) -> str:
        """The nonce-framed memory block of ``entries`` as ``mode`` shows it ('' if none).

        The one rendering of retrieved memories: chat retrieval and the MCP tools use it.
        """
        return render_memories(
            entries,
            with_tags=mode.shows_tags,
            instruction=self._instruction,
            show_instruction=mode.shows_instruction,
            with_source=self._policy.memory.show_source,
            nonce_key=self._nonce_key,
        )

    async def search(self, scope: Scope, query: str, limit: int) -> list[MemoryEntry]:
        """The stored memories of ``scope`` most relevant to ``query`` (at most ``limit``),
        by the policy's retrieval rule; quarantined ones are never among them."""
        records = await self._fetch(scope, query, limit)
        return [MemoryEntry.of(r) for r in records if not r.quarantined]

    async def _fetch(self, scope: Scope, query: str, top_k: int) -> list[MemoryRecord]:
        """The records to show: the most relevant (``search``) or the newest (``recent``)."""
        if self._policy.memory.retrieval == "recent":
            shown = [r for r in await self._backend.list(scope) if not r.quarantined]
            return shown[-top_k:]
        min_score = self._policy.memory.min_score
        hits = await self._backend.search(scope, query, top_k)
        return [h.record for h in hits if min_score is None or h.score >= min_score]

    async def record(self, exchange: Exchange) -> None:
        """Durably enqueue ``exchange`` for auditing and storage; returns after the commit."""
        memory_id = await self._outbox.enqueue(exchange)
        log.debug("queued memory %s for user scope", memory_id)
        self._worker.wake()

    # -- admin operations --------------------------------------------------------

    async def write(
        self, scope: Scope, query: str, answer: str, mode: Mode, *, origin: Origin,
        request_id: str | None = None,
    ) -> str:  # fmt: skip
        """Queue a memory for ``scope`` as if an exchange had written it; its id.

        It goes through the outbox like any chat write, so it is stored ``pending`` and
        audited when ``mode`` audits writes (else stored ``unaudited``). ``origin``: the
        door it came through (the admin API, an MCP tool); ``request_id``: the request
        that wrote it (default: the channel's name, for a write outside any request).
        """
        exchange = Exchange(scope=scope, query=query, answer=answer, mode=mode, origin=origin,
                            request_id=request_id or origin.channel.value)  # fmt: skip
        memory_id = await self._outbox.enqueue(exchange)
        self._worker.wake()
        return memory_id

    async def rewrite(
        self, scope: Scope, memory_id: str, text: str, mode: Mode, *, origin: Origin,
        request_id: str | None = None,
    ) -> bool:  # fmt: skip
        """Replace the text of ``scope``'s memory ``memory_id``, keeping its id; whether it
        existed. The new text is queued through the outbox like any write (``pending``,
        audited when ``mode`` audits); the stored record is overwritten when the worker
        stores it, so the old text stays readable until the new one is durable. ``origin``
        and ``request_id`` as for ``write``: the new text's provenance is its own."""
        entry = await self.get(memory_id)
        if entry is None or entry.user != scope.user:
            return False
        await self._outbox.cancel(memory_id)  # a queued older text must not land after this one
        exchange = Exchange(scope=scope, query=text, answer="", mode=mode, origin=origin,
                            request_id=request_id or origin.channel.value)  # fmt: skip
        await self._outbox.enqueue(exchange, item_id=memory_id)
        self._worker.wake()
        return True

    async def list(self, scope: Scope) -> list[MemoryEntry]:
        """Memories of ``scope``, oldest first: stored ones and writes still queued."""
        entries = [MemoryEntry.of(r) for r in await self._backend.list(scope)]
        known = {e.id for e in entries}
        # Acknowledged writes not yet in the backend are listed too, as pending.
        entries += [
            _queued(item)
            for item in await self._outbox.pending(scope.user)
            if not item.stored and item.id not in known and scope.sees(item.exchange.scope)
        ]
        entries.sort(key=lambda e: e.created_at)
        return entries

    async def get(self, memory_id: str) -> MemoryEntry | None:
        """Memory ``memory_id``, stored or queued (``None`` if there is none)."""
        scope = await self._backend.scope_of(memory_id)
        record = None if scope is None else await self._backend.get(scope, memory_id)
        if record is not None:
            return MemoryEntry.of(record)
        for item in await self._outbox.pending():
            if item.id == memory_id:
                return _queued(item)
        return None

    async def delete(self, memory_id: str) -> bool:
        """Forget memory ``memory_id``: its queued write and its stored record; whether any."""
        cancelled = await self._outbox.cancel(memory_id)
        scope = await self._backend.scope_of(memory_id)
        deleted = scope is not None and await self._backend.delete(scope, memory_id)
        return cancelled or deleted

    async def delete_all(self, scope: Scope) -> int:
        """Forget every memory of ``scope``, queued and stored; how many. (Erasing a user
        everywhere, the review trail and the files included, is ``erase``.)"""
        cancelled = await self._outbox.cancel_user(scope.user)
        deleted = await self._backend.delete_all(scope)
        return deleted + cancelled

    async def erase(self, user: str, *, full: bool = False) -> Erasure:
        """Erase ``user`` from every place the proxy writes their text: the backend (and
        its histories and files), the outbox and spool, the review trail (tombstones
        kept) and the files of all of them (``dmt_proxy.memory.erasure``; ``full``:
        rewrite PostgreSQL tables whole)."""
        return await erase_user(user, backend=self._backend, backend_name=self._backend_name,
                                outbox=self._outbox, trail=self._trail, worker=self._worker,
                                full=full)  # fmt: skip

    async def export(self, user: str) -> UserExport:
        """Everything held about ``user``: memories, queued writes and review trail."""
        return await export_user(user, backend=self._backend, outbox=self._outbox,
                                 trail=self._trail)  # fmt: skip

    async def outbox_stats(self) -> OutboxStats:
        """The depth of the write queue and the age of its oldest row."""
        depth, oldest = await self._outbox.stats()
        return OutboxStats(depth=depth, oldest_pending_age_s=oldest)
