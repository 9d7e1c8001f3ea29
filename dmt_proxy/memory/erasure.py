"""Erasing a user, and exporting everything held about one: the one place both are done.

``erase_user`` removes a user's text from every place the proxy writes it, in this order:

1. the outbox (and a PostgreSQL outbox's local spool) drops the user's queued writes
   (``Outbox.cancel_user``), so no worker claims one again;
2. the worker of this process stops the user's rows it has in progress
   (``OutboxWorker.abandon``); a worker elsewhere that comes to mark such a row stored
   or to save its verdict finds it gone and undoes what it stored (``memory.write.worker``);
3. the backend deletes the user's records and removes their text from every file or
   table it writes (``ErasingBackend.erase``: mem0's history, WAL files, free pages);
   steps 1 to 3 repeat (at most ``ROUNDS`` times) while a write of the user still lands;
4. the review trail turns each of the user's events into a tombstone: the decision is
   kept (memory id, time, who decided, statuses and domains), the words go (reason,
   evidence with the rationale and the tag's text) (``Trail.erase_user``);
5. the outbox's and the trail's storages are compacted: a SQLite file's WAL is
   checkpointed and truncated and the file vacuumed, a PostgreSQL table vacuumed
   (``Outbox.compact``, ``Trail.compact``); with ``full``, PostgreSQL tables are
   rewritten whole (``storage.vacuum_tables``: a plain ``VACUUM`` frees the deleted rows'
   space without overwriting it).

The answer, an ``Erasure``, says what was removed and compacted, and in ``kept`` what
could not be cleared (PostgreSQL's write-ahead log, replicas and backups; a backend
without ``erase``; writes that kept landing). The console reads the backend and the
trail, so it shows nothing of the user's text afterwards: only the tombstones.

``export_user`` answers everything held about a user as one JSON document
(``UserExport``, versioned): the memories as the admin API lists them, with their
provenance; the writes still queued, with what the worker kept of them; and the user's
review trail, tombstones included.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_serializer

from dmt_proxy.memory.base import (
    ErasingBackend,
    MemoryBackend,
    MemoryRecord,
    Scope,
    StoreErasure,
)
from dmt_proxy.memory.entry import MemoryEntry
from dmt_proxy.memory.write.outbox import Outbox, OutboxItem
from dmt_proxy.memory.write.storage import (
    POSTGRES_KEEPS,
    POSTGRES_PLAIN_VACUUM_KEEPS,
    POSTGRES_STATISTICS_KEEPS,
    STATISTICS,
)
from dmt_proxy.memory.write.trail import Trail, TrailEvent, now_utc
from dmt_proxy.memory.write.worker import OutboxWorker
from dmt_proxy.provenance import Origin, Provenance
from dmt_proxy.tags import AuditStatus

log = logging.getLogger(__name__)

ROUNDS = 3
"""How often an erasure deletes again while writes of the user still land."""
EXPORT_VERSION = 1
"""Format of ``UserExport``; bump it when a field changes meaning or goes."""

SHARED_OUTBOX_KEEPS = (
    "shared outbox: writes of this user that another proxy spooled locally while the "
    "database was unreachable reach the database when it answers again; erase through "
    "that proxy too, or again later"
)
"""What an erasure on a PostgreSQL outbox cannot reach: the other proxies' spools."""


class Erasure(BaseModel):
    """What erasing a user did (``DELETE /v1/memories?user=U``, ``dmt-proxy erase``)."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", json_schema_serialization_defaults_required=True
    )

    object: Literal["erasure"] = "erasure"
    user: str
    memories: int
    """Stored memories deleted from the backend."""
    queued: int
    """Writes dropped from the outbox and the spool before they were stored."""
    abandoned: int = 0
    """Writes this process's worker had in progress, stopped."""
    tombstones: int
    """Review-trail events turned into tombstones (decision kept, words cleared)."""
    compacted: list[str] = Field(default_factory=list)
    """Files (paths) and tables (``postgresql:<table>``) rewritten or removed so that no
    deleted text is left in them."""
    kept: list[str] = Field(default_factory=list)
    """Where the user's text may still be, and why (empty: nowhere the proxy writes)."""
    erased_at: datetime

    @field_serializer("erased_at")
    def _iso(self, at: datetime) -> str:
        return at.isoformat()


class ExportedMemory(BaseModel):
    """One memory of the export: the admin API's fields, then where it came from."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", json_schema_serialization_defaults_required=True
    )

    id: str
    user: str
    text: str
    created_at: datetime
    audit_status: AuditStatus
    tag: dict[str, Any] | None
    """The bias tag as the admin API shows it (``None``: untagged)."""
    provenance: Provenance | None
    """Who wrote it, through which door, and what audited it, as the admin API shows it
    (``None``: stored before provenance existed, or derived from several writes)."""
    stored: bool
    """In the backend (``False``: acknowledged, still in the outbox)."""
    agent: str | None
    session: str | None
    query: str | None
    """The user's words."""
    answer: str | None
    """The agent's reply."""
    updated_at: datetime | None
    metadata: dict[str, Any]
    """What the proxy wrote with it (the request id, the mode; since provenance exists the
    request id is its provenance's too)."""
    record_version: int

    @field_serializer("created_at", "updated_at")
    def _iso(self, at: datetime | None) -> str | None:
        return None if at is None else at.isoformat()

    @classmethod
    def of(cls, record: MemoryRecord, *, stored: bool) -> ExportedMemory:
        """The export of ``record``; its first fields are the admin API's own entry."""
        entry = MemoryEntry.of(record).model_dump(mode="json")
        return cls(**{**entry, "created_at": record.created_at}, stored=stored,
                   agent=record.scope.agent, session=record.scope.session, query=record.query,
                   answer=record.answer, updated_at=record.updated_at,
                   metadata=record.metadata, record_version=record.schema_version)  # fmt: skip


class QueuedWrite(BaseModel):
    """One outbox row of the user: a write acknowledged and not yet stored and audited."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", json_schema_serialization_defaults_required=True
    )

    id: str
    agent: str | None
    session: str | None
    query: str
    answer: str
    request_id: str
    mode: str
    origin: Origin | None
    """Where the write came from (``None``: acknowledged before origins were recorded)."""
    created_at: float
    """Epoch seconds."""
    attempts: int
    stored: bool
    last_error: str | None
    verdict: dict[str, Any] | None
    """The auditor's verdict, saved on the row until the backend takes it."""

    @classmethod
    def of(cls, item: OutboxItem) -> QueuedWrite:
        """The row ``item``."""
        exchange = item.exchange
        return cls(id=item.id, agent=exchange.scope.agent, session=exchange.scope.session,
                   query=exchange.query, answer=exchange.answer, request_id=exchange.request_id,
                   mode=exchange.mode.value, origin=exchange.origin, created_at=item.created_at,
                   attempts=item.attempts,
                   stored=item.stored, last_error=item.last_error, verdict=item.verdict)  # fmt: skip


class UserExport(BaseModel):
    """Everything the proxy holds about one user (``GET /v1/admin/export?user=U``,
    ``dmt-proxy export``), as one JSON document."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", json_schema_serialization_defaults_required=True
    )

    object: Literal["user_export"] = "user_export"
    version: int = EXPORT_VERSION
    user: str
    exported_at: datetime
    memories: list[ExportedMemory]
    """Stored and queued, oldest first: what ``GET /v1/memories?user=U`` lists."""
    outbox: list[QueuedWrite]
    """The user's rows in the outbox (and this proxy's spool)."""
    trail: list[TrailEvent]
    """Every review-trail event of the user, oldest first; an erased one is a tombstone."""

    @field_serializer("exported_at")
    def _iso(self, at: datetime) -> str:
        return at.isoformat()


async def _erase_store(backend: MemoryBackend, name: str, user: str, *, full: bool) -> StoreErasure:
    if isinstance(backend, ErasingBackend):
        return await backend.erase(user, full=full)
    deleted = await backend.delete_all(Scope(user=user))  # a plugin without erase()
    return StoreErasure(deleted=deleted, kept=[
        f"the {name} backend has no erase(): its records of the user were deleted, but "
        "what it keeps besides (a history, a log, the free space of its files) was not "
        "cleared"])  # fmt: skip


def _merge(into: list[str], more: list[str]) -> None:
    into.extend(m for m in more if m not in into)


async def erase_user(
    user: str, *, backend: MemoryBackend, backend_name: str, outbox: Outbox,
    trail: Trail | None, worker: OutboxWorker | None, full: bool = False,
) -> Erasure:  # fmt: skip
    """Erase ``user`` everywhere the proxy writes (module docstring); what was done.

    ``full``: rewrite PostgreSQL tables whole (``VACUUM FULL``) so no byte of the deleted
    rows stays in their files; each table is locked while it is rewritten."""
    scope = Scope(user=user)
    memories = queued = abandoned = 0
    compacted: list[str] = []
    kept: list[str] = []
    for _ in range(ROUNDS):
        queued += await outbox.cancel_user(user)
        if worker is not None:
            abandoned += await worker.abandon(user)
        store = await _erase_store(backend, backend_name, user, full=full)
        memories += store.deleted
        _merge(compacted, store.compacted)
        _merge(kept, store.kept)
        if not await backend.list(scope, limit=1) and not await outbox.pending(user):
            break
    erased_at = now_utc()
    tombstones = 0 if trail is None else await trail.erase_user(user, erased_at)
    _merge(compacted, await outbox.compact(skip=compacted, full=full))
    if trail is not None:
        _merge(compacted, await trail.compact(skip=compacted, full=full))
    tables = [name for name in compacted if name.startswith("postgresql:")]
    if tables:
        _merge(kept, [POSTGRES_KEEPS] if full else [POSTGRES_KEEPS, POSTGRES_PLAIN_VACUUM_KEEPS])
        if not any(name.endswith(f"/{STATISTICS}") for name in tables):
            _merge(kept, [POSTGRES_STATISTICS_KEEPS])
        if any(name.endswith("outbox") for name in tables):
            _merge(kept, [SHARED_OUTBOX_KEEPS])
    if trail is not None and any(e.erased_at is None for e in await trail.of_user(user)):
        # An event recorded while the files were compacted (a worker of another process).
        tombstones += await trail.erase_user(user, now_utc())
        await trail.compact(full=full)
    left = len(await backend.list(scope)) + len(await outbox.pending(user))
    if left:
        kept.append(f"{left} write(s) of this user landed while the erasure ran (a worker of "
                    "another process, or writes still arriving): erase again")  # fmt: skip
    log.info("erased user: %d memories, %d queued writes, %d trail events made tombstones",
             memories, queued, tombstones)  # fmt: skip
    return Erasure(user=user, memories=memories, queued=queued, abandoned=abandoned,
                   tombstones=tombstones, compacted=compacted, kept=kept,
                   erased_at=erased_at)  # fmt: skip


async def export_user(
    user: str, *, backend: MemoryBackend, outbox: Outbox, trail: Trail | None
) -> UserExport:
    """Everything held about ``user`` as one document."""
    scope = Scope(user=user)
    records = await backend.list(scope)
    pending = await outbox.pending(user)
    known = {r.id for r in records}
    memories = [ExportedMemory.of(r, stored=True) for r in records]
    memories += [ExportedMemory.of(item.record(AuditStatus.PENDING), stored=False)
                 for item in pending if not item.stored and item.id not in known]  # fmt: skip
    memories.sort(key=lambda m: (m.created_at, m.id))
    events = [] if trail is None else await trail.of_user(user)
    return UserExport(user=user, exported_at=now_utc(), memories=memories,
                      outbox=[QueuedWrite.of(item) for item in pending], trail=events)  # fmt: skip
