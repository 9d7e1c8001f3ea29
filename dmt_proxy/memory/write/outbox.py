"""The durable outbox: every exchange to be remembered is committed here first.

``Outbox`` is what the memory service and the worker use. The service enqueues an
``Exchange`` (``dmt_proxy.exchange``) as it is; ``OutboxItem``, one row of either table,
hands the same typed exchange to the worker with the state of its write. The columns
keep their names and text values (``mode`` as the mode's value), so rows written
before the exchange travelled whole read unchanged.

Two implementations: ``SqliteOutbox`` here, the single-process default, and
``dmt_proxy.memory.write.pg_outbox.PostgresOutbox``, shared by any number of proxies and
workers (``DMT_OUTBOX``; see ``dmt_proxy.memory.assembly.build_outbox``).

``SqliteOutbox``: SQLite in WAL mode under the state directory. ``enqueue`` returns only after the
row is committed (``synchronous=FULL``: it survives a killed process and a power
cut), so a client that received its answer has a memory write that will happen.
The worker claims due rows, audits and stores them, and deletes a row only once
the memory backend has it; a failure reschedules the row with backoff. Rows carry
their final memory id, so a retry after a crash updates instead of duplicating.

All SQLite work runs on one dedicated thread (``dmt_proxy.memory.write.storage``,
shared with the review trail): the connection is not shared across threads, and the
event loop never blocks on an fsync.

Versions: the file's layout version is ``PRAGMA user_version``
(``OUTBOX_SCHEMA_VERSION``); every row also carries ``schema_version``, the format
of its payload, so a later release can convert old rows one by one. Opening a
file migrates older layouts in one transaction (version 0 is the unversioned
layout shipped before versions existed) and refuses a newer one with a
``ConfigError`` rather than guess at it.

Layout 2 adds the nullable ``origin`` column: the write's ``Origin`` as JSON
(``dmt_proxy.provenance``). A row written before it (payload format 1 or 2, ``origin``
NULL) reads with its origin unknown (``Exchange.origin`` is ``None``) and becomes a memory
without provenance, like a memory stored before provenance existed: its channel is not
guessed from its request id (``admin`` was both the admin API's and MCP's).
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from dmt_proxy.errors import ConfigError
from dmt_proxy.exchange import Exchange
from dmt_proxy.memory.base import (
    CUT_MARKER,
    MAX_TEXT_CHARS,
    MemoryRecord,
    Scope,
    interaction_text,
)
from dmt_proxy.memory.write.storage import SqliteStorage
from dmt_proxy.modes import Mode
from dmt_proxy.provenance import Origin, Provenance
from dmt_proxy.tags import AuditStatus

log = logging.getLogger(__name__)

OUTBOX_SCHEMA_VERSION = 2
"""Layout of the outbox file (``PRAGMA user_version``); bump it with a migration step.
1: ``schema_version`` on every row; 2: the ``origin`` column."""
ROW_SCHEMA_VERSION = 3
"""Format of a row's payload (query, answer, verdict JSON, origin JSON) as written by this
release. 2: a saved verdict may carry ``findings`` (normalisation) and the judges' opinions;
a format-1 verdict (without them) still reads. 3: the row carries its ``origin``; a row of
format 1 or 2 has none (module docstring)."""

_TABLE = """
CREATE TABLE IF NOT EXISTS outbox (
    id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL,
    agent_id TEXT,
    session_id TEXT,
    query TEXT NOT NULL,
    answer TEXT NOT NULL,
    request_id TEXT NOT NULL,
    mode TEXT NOT NULL,
    created_at REAL NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt_at REAL NOT NULL,
    last_error TEXT,
    stored INTEGER NOT NULL DEFAULT 0,
    verdict TEXT,
    schema_version INTEGER NOT NULL DEFAULT 1,
    origin TEXT
)"""
_INDEX = "CREATE INDEX IF NOT EXISTS outbox_due ON outbox (next_attempt_at)"


def migrate(conn: sqlite3.Connection, path: Path) -> int:
    """Bring the outbox file to ``OUTBOX_SCHEMA_VERSION``; returns the version found."""
    conn.execute("BEGIN IMMEDIATE")  # one writer at a time, so two processes cannot both migrate
    try:
        found = int(conn.execute("PRAGMA user_version").fetchone()[0])
        if found > OUTBOX_SCHEMA_VERSION:
            raise ConfigError(
                f"outbox {path} has layout version {found}, newer than this dmt-proxy "
                f"understands ({OUTBOX_SCHEMA_VERSION}): it was written by a later release. "
                "Upgrade dmt-proxy, or point DMT_STATE_DIR elsewhere."
            )
        if found < OUTBOX_SCHEMA_VERSION:
            conn.execute(_TABLE)
            columns = {row[1] for row in conn.execute("PRAGMA table_info(outbox)")}
            # 0 -> 1: rows of the unversioned layout already have the version-1 payload format.
            if "schema_version" not in columns:
                conn.execute(
                    "ALTER TABLE outbox ADD COLUMN schema_version INTEGER NOT NULL DEFAULT 1"
                )
            # 1 -> 2: the rows already there keep no origin (NULL: unknown).
            if "origin" not in columns:
                conn.execute("ALTER TABLE outbox ADD COLUMN origin TEXT")
            conn.execute(_INDEX)
            conn.execute(f"PRAGMA user_version = {OUTBOX_SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return found


COLUMNS = ("id", "user_id", "agent_id", "session_id", "query", "answer", "request_id", "mode",
           "origin", "created_at", "attempts", "stored", "verdict", "last_error",
           "schema_version")  # fmt: skip
"""The columns an ``OutboxItem`` is read from, in both tables."""

EXCHANGE_COLUMNS = COLUMNS[1:9]
"""The columns ``exchange_row`` fills, ``user_id`` to ``origin``, in that order."""


def exchange_row(exchange: Exchange) -> tuple[str | None, ...]:
    """The columns ``EXCHANGE_COLUMNS`` of ``exchange``, as both tables store them (the
    origin as JSON text)."""
    scope = exchange.scope
    origin = None if exchange.origin is None else exchange.origin.model_dump_json()
    return (scope.user, scope.agent, scope.session, exchange.query, exchange.answer,
            exchange.request_id, exchange.mode.value, origin)  # fmt: skip


@dataclass(frozen=True)
class OutboxItem:
    """One pending memory write: the exchange to remember and how far its write got."""

    id: str
    exchange: Exchange
    created_at: float
    attempts: int
    stored: bool
    """The record already reached the backend (as ``pending``); only the audit is left."""
    verdict: dict[str, Any] | None
    last_error: str | None
    schema_version: int = ROW_SCHEMA_VERSION
    """Payload format of the row (``ROW_SCHEMA_VERSION`` when written by this release)."""

    @classmethod
    def of_row(cls, row: dict[str, Any]) -> OutboxItem:
        """The item of a row read by ``COLUMNS`` (``verdict`` already decoded from JSON;
        ``origin`` JSON text or, from PostgreSQL's jsonb, decoded; NULL: unknown)."""
        scope = Scope(user=row["user_id"], agent=row["agent_id"], session=row["session_id"])
        exchange = Exchange(scope=scope, query=row["query"], answer=row["answer"],
                            request_id=row["request_id"], mode=Mode(row["mode"]),
                            origin=_origin(row["origin"]))  # fmt: skip
        return cls(id=row["id"], exchange=exchange, created_at=float(row["created_at"]),
                   attempts=int(row["attempts"]), stored=bool(row["stored"]),
                   verdict=row["verdict"], last_error=row["last_error"],
                   schema_version=int(row["schema_version"]))  # fmt: skip

    @classmethod
    def readable(cls, rows: Iterable[dict[str, Any]]) -> list[OutboxItem]:
        """The items of ``rows``, leaving out (and logging) a row this release cannot read,
        e.g. a mode written by a newer release during a rolling upgrade on a shared outbox:
        one unreadable row must not stop every other write. It stays in the table, untouched,
        for a release that reads it."""
        items: list[OutboxItem] = []
        for row in rows:
            try:
                items.append(cls.of_row(row))
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("outbox row %s cannot be read by this release; left for one that "
                            "can: %s", row.get("id"), exc)  # fmt: skip
        return items

    def record(self, audit_status: AuditStatus) -> MemoryRecord:
        """The memory this write becomes: its final id, the interaction's text, the row's time,
        and its provenance (none for a row whose origin is unknown).

        The worker stores it; the admin API shows it (``pending``) while the row waits.
        """
        exchange = self.exchange
        received = datetime.fromtimestamp(self.created_at, UTC)  # when the write was acknowledged
        provenance = None
        if exchange.origin is not None:
            provenance = Provenance.of(exchange.origin, request_id=exchange.request_id,
                                       received_at=received,
                                       answered=bool(exchange.answer))  # fmt: skip
        return MemoryRecord(
            id=self.id,
            scope=exchange.scope,
            text=interaction_text(exchange.query, exchange.answer),
            # Same bound as the text: a store must not keep megabytes per interaction.
            query=_bounded(exchange.query),
            answer=_bounded(exchange.answer),
            created_at=received,
            audit_status=audit_status,
            # Kept as every release wrote it (the export shows it); the typed record of where
            # the memory came from is its provenance.
            metadata={"request_id": exchange.request_id, "mode": exchange.mode.value},
            provenance=provenance,
        )


def _origin(raw: str | dict[str, Any] | None) -> Origin | None:
    """A row's origin: JSON text (SQLite), decoded jsonb (PostgreSQL), or NULL (unknown).
    One a newer release wrote that this one cannot read raises: the row is left for it."""
    if raw is None:
        return None
    return Origin.model_validate_json(raw) if isinstance(raw, str) else Origin.model_validate(raw)


def _bounded(text: str) -> str:
    return text if len(text) <= MAX_TEXT_CHARS else text[:MAX_TEXT_CHARS] + CUT_MARKER


class Outbox(Protocol):
    """A durable queue of memory writes with at-least-once delivery.

    ``due`` hands rows to the worker that asked: where several workers share the
    outbox, a row handed out is held for that worker (a lease) until it is done,
    rescheduled with ``retry_later``, or the lease runs out.
    """

    async def enqueue(self, exchange: Exchange, *, item_id: str | None = None) -> str:
        """Commit ``exchange`` to be remembered and return its memory id (returns after the
        commit); ``item_id`` keeps a known id (default: a new one)."""
        ...

    async def due(self, limit: int = 16) -> list[OutboxItem]:
        """Rows whose next attempt is due, oldest first, held for this worker."""
        ...

    async def mark_stored(self, item_id: str) -> bool:
        """Remember that the backend has the record, so a retry only re-audits; False when
        the row is gone (cancelled meanwhile: its memory was deleted or its user erased)."""
        ...

    async def save_verdict(self, item_id: str, verdict: dict[str, Any]) -> bool:
        """Keep an auditor verdict so a storage retry does not pay for the audit again;
        False when the row is gone (cancelled meanwhile)."""
        ...

    async def retry_later(self, item_id: str, error: str, delay_s: float) -> None:
        """Record a failed attempt and schedule the next one (releasing the row)."""
        ...

    async def done(self, item_id: str) -> None:
        """The write is complete: forget it."""
        ...

    async def cancel(self, item_id: str) -> bool:
        """Drop a pending write (its memory was deleted by an admin)."""
        ...

    async def cancel_user(self, user: str) -> int:
        """Drop every pending write of ``user``; returns how many."""
        ...

    async def stats(self) -> tuple[int, float]:
        """(pending count, age in seconds of the oldest pending row; 0 when empty)."""
        ...

    async def pending(self, user: str | None = None) -> list[OutboxItem]:
        """Every row still in the outbox (optionally one user's), oldest first."""
        ...

    async def compact(self, *, skip: Iterable[str] = (), full: bool = False) -> list[str]:
        """Remove what deleted rows left in the outbox's storage (a SQLite file's WAL and
        free pages, a PostgreSQL table's dead rows; ``full``: rewrite a PostgreSQL table,
        ``storage.vacuum_tables``), except the storages named in ``skip``; the names of
        those compacted (an erasure calls it after ``cancel_user``)."""
        ...

    async def aclose(self) -> None:
        """Close the outbox; it is unusable afterwards."""
        ...


class SqliteOutbox(SqliteStorage):
    """SQLite-backed queue of memory writes with at-least-once delivery (one process).

    ``found_version`` is the file's layout version before it was opened (0: new or
    unversioned); a closed outbox raises ``StorageClosed``.
    """

    def __init__(self, path: Path, *, synchronous: str = "FULL") -> None:
        self._held: set[str] = set()
        """Rows handed out by ``due`` and not yet done or rescheduled."""
        super().__init__(path, what="outbox", migration=migrate, thread="dmt-outbox",
                         synchronous=synchronous)  # fmt: skip

    # -- producer side -------------------------------------------------------

    def _enqueue(self, row: tuple[Any, ...]) -> None:
        self._db.execute(
            f"INSERT INTO outbox (id, {', '.join(EXCHANGE_COLUMNS)}, created_at, next_attempt_at,"
            " schema_version) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            row,
        )

    async def enqueue(self, exchange: Exchange, *, item_id: str | None = None) -> str:
        """Commit ``exchange`` and return its memory id (returns after the commit).

        ``item_id``: the id to use (a spool keeps the one already acknowledged); default new.
        """
        item_id = item_id or f"mem_{uuid.uuid4().hex}"
        now = time.time()
        row = (item_id, *exchange_row(exchange), now, now, ROW_SCHEMA_VERSION)
        await self._run(self._enqueue, row)
        return item_id

    # -- worker side ---------------------------------------------------------

    def _due(self, limit: int, now: float) -> list[OutboxItem]:
        cur = self._db.execute(
            f"SELECT {', '.join(COLUMNS)} FROM outbox"
            " WHERE next_attempt_at <= ? ORDER BY created_at LIMIT ?",
            (now, limit),
        )
        rows = [dict(zip(COLUMNS, r, strict=True)) for r in cur.fetchall()]
        for row in rows:  # SQLite keeps the verdict as JSON text (PostgreSQL as jsonb)
            row["verdict"] = json.loads(row["verdict"]) if row["verdict"] else None
        return OutboxItem.readable(rows)

    async def due(self, limit: int = 16) -> list[OutboxItem]:
        """Rows whose next attempt is due, oldest first, not already handed out and still
        in progress (this process is the only worker: no lease needed)."""
        rows: list[OutboxItem] = await self._run(self._due, limit + len(self._held), time.time())
        result = [r for r in rows if r.id not in self._held][:limit]
        self._held.update(r.id for r in result)
        return result

    def _mark_stored(self, item_id: str) -> bool:
        cur = self._db.execute("UPDATE outbox SET stored = 1 WHERE id = ?", (item_id,))
        return cur.rowcount > 0

    async def mark_stored(self, item_id: str) -> bool:
        """Remember that the backend has the record; False when the row is gone."""
        stored: bool = await self._run(self._mark_stored, item_id)
        return stored

    def _save_verdict(self, item_id: str, verdict: str) -> bool:
        cur = self._db.execute("UPDATE outbox SET verdict = ? WHERE id = ?", (verdict, item_id))
        return cur.rowcount > 0

    async def save_verdict(self, item_id: str, verdict: dict[str, Any]) -> bool:
        """Keep an auditor verdict on the row; False when the row is gone."""
        saved: bool = await self._run(self._save_verdict, item_id, json.dumps(verdict))
        return saved

    def _retry(self, item_id: str, error: str, delay_s: float) -> None:
        self._db.execute(
            "UPDATE outbox SET attempts = attempts + 1, last_error = ?, next_attempt_at = ?"
            " WHERE id = ?",
            (error[:2000], time.time() + delay_s, item_id),
        )

    async def retry_later(self, item_id: str, error: str, delay_s: float) -> None:
        """Record a failed attempt and schedule the next one."""
        try:
            await self._run(self._retry, item_id, error, delay_s)
        finally:  # after the update: until then the row is still due, and must not be handed out
            self._held.discard(item_id)

    def _done(self, item_id: str) -> None:
        self._db.execute("DELETE FROM outbox WHERE id = ?", (item_id,))

    async def done(self, item_id: str) -> None:
        """The write is complete: forget it."""
        try:
            await self._run(self._done, item_id)
        finally:
            self._held.discard(item_id)

    def _cancel(self, item_id: str | None, user: str | None) -> int:
        if item_id is not None:
            cur = self._db.execute("DELETE FROM outbox WHERE id = ?", (item_id,))
        else:
            cur = self._db.execute("DELETE FROM outbox WHERE user_id = ?", (user,))
        return int(cur.rowcount)

    async def cancel(self, item_id: str) -> bool:
        """Drop a pending write (its memory was deleted by an admin)."""
        return bool(await self._run(self._cancel, item_id, None))

    async def cancel_user(self, user: str) -> int:
        """Drop every pending write of ``user``; returns how many."""
        count: int = await self._run(self._cancel, None, user)
        return count

    def _stats(self) -> tuple[int, float | None]:
        count, oldest = self._db.execute("SELECT COUNT(*), MIN(created_at) FROM outbox").fetchone()
        return int(count), oldest

    async def stats(self) -> tuple[int, float]:
        """(pending count, age in seconds of the oldest pending row; 0 when empty)."""
        count, oldest = await self._run(self._stats)
        return count, (time.time() - oldest) if oldest is not None else 0.0

    def _pending_for(self, user: str | None) -> list[OutboxItem]:
        rows = self._due(1_000_000, float("inf"))
        return [r for r in rows if user is None or r.exchange.scope.user == user]

    async def pending(self, user: str | None = None) -> list[OutboxItem]:
        """Every row still in the outbox (optionally one user's)."""
        result: list[OutboxItem] = await self._run(self._pending_for, user)
        return result
