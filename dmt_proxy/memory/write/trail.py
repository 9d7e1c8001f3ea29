"""The review trail: every status change of a memory, machine or human, append-only.

One ``TrailEvent`` per change: who (the auditor, or a named reviewer), when, the
status and domain before and after, the reason, and for a machine verdict the
evidence it was decided on (both judges' scores, P(biased), the domain
probabilities, findings, rationale: the verdict as the auditor returned it). The
backend record keeps only the decision (status and tag); the evidence lives here,
so a reviewer sees why, and the review queue can order memories by how unsure the
judges were.

A human verdict holds: ``held(memory_id)`` is true while the newest human event of
the memory is anything but a re-audit request, and the worker (and
``audit-backfill``) then leave the memory alone instead of storing a machine
verdict over it.

Erasure (``dmt_proxy.memory.erasure``): erasing a user turns each of their events into
a tombstone (``erase_user``): the event stays, with its id (``seq``), memory id, user,
time, who decided (``actor``, ``human``, ``action``) and the decision (statuses and
domains before and after), and ``erased_at`` is set; its ``reason`` (the auditor's or the
reviewer's words) and ``evidence`` (the verdict, with its rationale, tag text and
grounding spans) are cleared. That is the one change the trail allows: the database
refuses any other ``UPDATE``, and every ``DELETE``.

Storage: ``SqliteTrail`` keeps the table in the outbox's SQLite file (a table of its
own beside ``outbox``; the outbox's ``PRAGMA user_version`` is not touched, the trail's
layout version is the row of ``review_trail_schema``), on a thread of its own
(``dmt_proxy.memory.write.storage``, shared with the outbox). Append-only is enforced by the
database: triggers refuse ``DELETE`` and every ``UPDATE`` but a tombstone's. ``MemoryTrail``
is the in-process one for tests and for a proxy without an outbox file.

Layout versions: 1, the table; 2, ``erased_at`` and the trigger that lets an erasure
write a tombstone (an older release refuses a version-2 file, as for any newer layout).
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from dmt_proxy.errors import ConfigError
from dmt_proxy.memory.write.storage import SqliteStorage, like_prefix

TRAIL_SCHEMA_VERSION = 2
"""Layout of the trail table (the row of ``review_trail_schema``); bump with a migration."""
EVENT_FORMAT_VERSION = 1
"""Format of one event's fields and evidence JSON, stored on every row."""

MACHINE = "machine"
"""The ``action`` of an event written by the audit (worker, re-audit, backfill)."""
REAUDIT = "reaudit"
"""The human action that lifts a hold: the next machine verdict is stored again."""


class TrailEvent(BaseModel):
    """One status change of one memory, as stored and as the API serves it."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", json_schema_serialization_defaults_required=True
    )

    seq: int = 0
    """Position in the trail (assigned when appended; 0 before)."""
    memory_id: str
    user: str
    at: datetime
    actor: str
    """``auditor:<label>`` for a machine verdict, ``reviewer:<name>`` for a human one."""
    human: bool
    action: str
    """``machine``, or the reviewer's action (confirm, clear, change_domain, ...)."""
    before_status: str | None = None
    after_status: str
    before_domain: str | None = None
    after_domain: str | None = None
    reason: str = Field(default="", max_length=2000)
    evidence: dict[str, Any] | None = None
    """A machine event's verdict (``AuditVerdict`` JSON) and decision; ``None`` for a human
    and for a tombstone."""
    format_version: int = EVENT_FORMAT_VERSION
    erased_at: datetime | None = None
    """When the event's user was erased: the event is a tombstone (``reason`` and
    ``evidence`` cleared, the decision kept); ``None`` for a live event."""

    def tombstone(self, at: datetime) -> TrailEvent:
        """This event with its content cleared, as an erasure leaves it."""
        if self.erased_at is not None:
            return self
        return self.model_copy(update={"reason": "", "evidence": None, "erased_at": at})


def now_utc() -> datetime:
    """The time stamp of a new event."""
    return datetime.now(UTC)


class Trail(Protocol):
    """Append-only storage of ``TrailEvent``s."""

    async def append(self, event: TrailEvent) -> TrailEvent:
        """Store ``event``; returns it with its ``seq``."""
        ...

    async def history(self, memory_id: str) -> list[TrailEvent]:
        """Every event of ``memory_id``, oldest first."""
        ...

    async def latest(self, user_prefix: str | None = None) -> list[TrailEvent]:
        """The newest event of every memory (of users starting with ``user_prefix``)."""
        ...

    async def events(self, user_prefix: str | None = None, since: float = 0.0) -> list[TrailEvent]:
        """Every event since ``since`` (epoch seconds), oldest first."""
        ...

    async def held(self, memory_id: str) -> bool:
        """Whether a human verdict holds ``memory_id`` (no machine verdict may replace it)."""
        ...

    async def of_user(self, user: str) -> list[TrailEvent]:
        """Every event of exactly ``user`` (tombstones included), oldest first."""
        ...

    async def erase_user(self, user: str, at: datetime) -> int:
        """Turn every live event of ``user`` into a tombstone erased ``at``; how many."""
        ...

    async def compact(self, *, skip: Iterable[str] = (), full: bool = False) -> list[str]:
        """Remove what cleared content left in the storage (``Outbox.compact``)."""
        ...

    async def aclose(self) -> None:
        """Release the storage."""
        ...


def is_held(events: list[TrailEvent]) -> bool:
    """The hold rule on one memory's events: the newest human one is not a re-audit."""
    humans = [e for e in events if e.human]
    return bool(humans) and humans[-1].action != REAUDIT


def _visible(user: str, prefix: str | None) -> bool:
    return prefix is None or user.startswith(prefix)


class MemoryTrail:
    """The trail in a list: for tests and fakes (lost when the process ends)."""

    def __init__(self) -> None:
        self._events: list[TrailEvent] = []

    async def append(self, event: TrailEvent) -> TrailEvent:
        """Store ``event`` with the next ``seq``."""
        stored = event.model_copy(update={"seq": len(self._events) + 1})
        self._events.append(stored)
        return stored

    async def history(self, memory_id: str) -> list[TrailEvent]:
        """Every event of ``memory_id``, oldest first."""
        return [e for e in self._events if e.memory_id == memory_id]

    async def latest(self, user_prefix: str | None = None) -> list[TrailEvent]:
        """The newest event of each memory."""
        newest: dict[str, TrailEvent] = {}
        for e in self._events:
            if _visible(e.user, user_prefix):
                newest[e.memory_id] = e
        return sorted(newest.values(), key=lambda e: e.seq)

    async def events(self, user_prefix: str | None = None, since: float = 0.0) -> list[TrailEvent]:
        """Every event since ``since``."""
        return [
            e for e in self._events if _visible(e.user, user_prefix) and e.at.timestamp() >= since
        ]

    async def held(self, memory_id: str) -> bool:
        """Whether a human verdict holds ``memory_id``."""
        return is_held(await self.history(memory_id))

    async def of_user(self, user: str) -> list[TrailEvent]:
        """Every event of ``user``, oldest first."""
        return [e for e in self._events if e.user == user]

    async def erase_user(self, user: str, at: datetime) -> int:
        """Turn every live event of ``user`` into a tombstone."""
        count = 0
        for i, e in enumerate(self._events):
            if e.user == user and e.erased_at is None:
                self._events[i] = e.tombstone(at)
                count += 1
        return count

    async def compact(self, *, skip: Iterable[str] = (), full: bool = False) -> list[str]:
        """Nothing on disk."""
        return []

    async def aclose(self) -> None:
        """Nothing to release."""


_SCHEMA_V1 = [
    """CREATE TABLE IF NOT EXISTS review_trail (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        memory_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        at REAL NOT NULL,
        actor TEXT NOT NULL,
        human INTEGER NOT NULL,
        action TEXT NOT NULL,
        before_status TEXT,
        after_status TEXT NOT NULL,
        before_domain TEXT,
        after_domain TEXT,
        reason TEXT NOT NULL,
        evidence TEXT,
        format_version INTEGER NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS review_trail_memory ON review_trail (memory_id, seq)",
    "CREATE INDEX IF NOT EXISTS review_trail_at ON review_trail (at)",
    # Append-only, enforced where the rows live: no code path can rewrite history.
    """CREATE TRIGGER IF NOT EXISTS review_trail_no_update BEFORE UPDATE ON review_trail
       BEGIN SELECT RAISE(ABORT, 'the review trail is append-only'); END""",
    """CREATE TRIGGER IF NOT EXISTS review_trail_no_delete BEFORE DELETE ON review_trail
       BEGIN SELECT RAISE(ABORT, 'the review trail is append-only'); END""",
    "CREATE TABLE IF NOT EXISTS review_trail_schema (version INTEGER NOT NULL)",
]


def tombstone_only(same: str) -> str:
    """The one update the trail allows, as SQL over ``OLD`` and ``NEW``: a live event
    becomes a tombstone, its reason and evidence cleared, every other column unchanged.
    ``same`` is the dialect's null-safe equality (SQLite ``IS``, PostgreSQL ``IS NOT
    DISTINCT FROM``)."""
    columns = ("seq", "memory_id", "user_id", "at", "actor", "human", "action",
               "before_status", "after_status", "before_domain", "after_domain",
               "format_version")  # fmt: skip
    unchanged = " AND ".join(f"NEW.{c} {same} OLD.{c}" for c in columns)
    return ("OLD.erased_at IS NULL AND NEW.erased_at IS NOT NULL AND NEW.reason = ''"
            f" AND NEW.evidence IS NULL AND {unchanged}")  # fmt: skip


APPEND_ONLY = "the review trail is append-only (an erasure may only clear an event's content)"
"""What the database answers any other change of a trail row."""
_SCHEMA_V2 = [
    "ALTER TABLE review_trail ADD COLUMN erased_at REAL",
    "DROP TRIGGER IF EXISTS review_trail_no_update",
    f"""CREATE TRIGGER review_trail_no_update BEFORE UPDATE ON review_trail
       WHEN NOT ({tombstone_only("IS")})
       BEGIN SELECT RAISE(ABORT, '{APPEND_ONLY.replace("'", "''")}'); END""",
]
TRAIL_COLUMNS = (
    "seq, memory_id, user_id, at, actor, human, action, before_status, after_status,"
    " before_domain, after_domain, reason, evidence, format_version, erased_at"
)
"""The stored columns, in the order of ``event_row`` (after ``seq``) and ``row_event``;
the same in the PostgreSQL trail."""


def migrate_trail(conn: sqlite3.Connection, path: Path) -> int:
    """Create or bring the trail table to ``TRAIL_SCHEMA_VERSION``; returns the version found."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute("CREATE TABLE IF NOT EXISTS review_trail_schema (version INTEGER NOT NULL)")
        row = conn.execute("SELECT MAX(version) FROM review_trail_schema").fetchone()
        found = int(row[0] or 0)
        if found > TRAIL_SCHEMA_VERSION:
            raise ConfigError(
                f"review trail in {path} has layout version {found}, newer than this dmt-proxy "
                f"understands ({TRAIL_SCHEMA_VERSION}): upgrade dmt-proxy"
            )
        if found < 1:
            for statement in _SCHEMA_V1:
                conn.execute(statement)
        if found < 2:
            for statement in _SCHEMA_V2:
                conn.execute(statement)
        if found < TRAIL_SCHEMA_VERSION:
            conn.execute("DELETE FROM review_trail_schema")
            conn.execute("INSERT INTO review_trail_schema VALUES (?)", (TRAIL_SCHEMA_VERSION,))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return found


def event_row(event: TrailEvent) -> tuple[Any, ...]:
    """The stored columns of ``event`` (without ``seq``), shared with the PostgreSQL trail."""
    return (
        event.memory_id, event.user, event.at.timestamp(), event.actor, int(event.human),
        event.action, event.before_status, event.after_status, event.before_domain,
        event.after_domain, event.reason,
        None if event.evidence is None else json.dumps(event.evidence), event.format_version,
        None if event.erased_at is None else event.erased_at.timestamp(),
    )  # fmt: skip


def row_event(row: tuple[Any, ...]) -> TrailEvent:
    """A stored row (``TRAIL_COLUMNS`` order) as an event."""
    return TrailEvent(
        seq=row[0], memory_id=row[1], user=row[2], at=datetime.fromtimestamp(row[3], UTC),
        actor=row[4], human=bool(row[5]), action=row[6], before_status=row[7],
        after_status=row[8], before_domain=row[9], after_domain=row[10], reason=row[11],
        evidence=None if row[12] is None else json.loads(row[12]), format_version=row[13],
        erased_at=None if row[14] is None else datetime.fromtimestamp(row[14], UTC),
    )  # fmt: skip


class SqliteTrail(SqliteStorage):
    """The trail in the outbox's SQLite file, on a thread of its own; ``StorageClosed``
    once closed."""

    def __init__(self, path: Path) -> None:
        # The outbox in the same file may hold its write lock a while: wait, do not fail.
        super().__init__(path, what="review trail", migration=migrate_trail,
                         thread="dmt-trail", timeout_s=30.0)  # fmt: skip

    def _append(self, row: tuple[Any, ...]) -> int:
        cur = self._db.execute(
            f"INSERT INTO review_trail ({TRAIL_COLUMNS.removeprefix('seq, ')})"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            row,
        )
        return int(cur.lastrowid or 0)

    async def append(self, event: TrailEvent) -> TrailEvent:
        """Store ``event``; returns it with its ``seq`` (after the commit)."""
        seq: int = await self._run(self._append, event_row(event))
        return event.model_copy(update={"seq": seq})

    def _select(self, where: str, args: tuple[Any, ...]) -> list[TrailEvent]:
        rows = self._db.execute(
            f"SELECT {TRAIL_COLUMNS} FROM review_trail WHERE {where} ORDER BY seq", args
        ).fetchall()
        return [row_event(r) for r in rows]

    async def history(self, memory_id: str) -> list[TrailEvent]:
        """Every event of ``memory_id``, oldest first."""
        result: list[TrailEvent] = await self._run(self._select, "memory_id = ?", (memory_id,))
        return result

    async def latest(self, user_prefix: str | None = None) -> list[TrailEvent]:
        """The newest event of every memory (of users starting with ``user_prefix``)."""
        where = (
            "seq IN (SELECT MAX(seq) FROM review_trail GROUP BY memory_id)"
            " AND user_id LIKE ? ESCAPE '\\'"
        )
        result: list[TrailEvent] = await self._run(self._select, where, (like_prefix(user_prefix),))
        return result

    async def events(self, user_prefix: str | None = None, since: float = 0.0) -> list[TrailEvent]:
        """Every event since ``since`` (epoch seconds), oldest first."""
        where = "at >= ? AND user_id LIKE ? ESCAPE '\\'"
        result: list[TrailEvent] = await self._run(
            self._select, where, (since, like_prefix(user_prefix))
        )
        return result

    async def held(self, memory_id: str) -> bool:
        """Whether a human verdict holds ``memory_id``."""
        return is_held(await self.history(memory_id))

    async def of_user(self, user: str) -> list[TrailEvent]:
        """Every event of ``user``, oldest first."""
        result: list[TrailEvent] = await self._run(self._select, "user_id = ?", (user,))
        return result

    def _erase_user(self, user: str, at: float) -> int:
        cur = self._db.execute(
            "UPDATE review_trail SET reason = '', evidence = NULL, erased_at = ?"
            " WHERE user_id = ? AND erased_at IS NULL",
            (at, user),
        )
        return int(cur.rowcount)

    async def erase_user(self, user: str, at: datetime) -> int:
        """Turn every live event of ``user`` into a tombstone (after the commit)."""
        count: int = await self._run(self._erase_user, user, at.timestamp())
        return count


def machine_event(
    memory_id: str, user: str, *, auditor: str, after_status: str, after_domain: str | None,
    reason: str, evidence: dict[str, Any], before_status: str | None = "pending",
) -> TrailEvent:  # fmt: skip
    """The event of a machine verdict stored on a memory."""
    return TrailEvent(
        memory_id=memory_id, user=user, at=now_utc(), actor=f"auditor:{auditor or 'unknown'}",
        human=False, action=MACHINE, before_status=before_status, after_status=after_status,
        after_domain=after_domain, reason=reason[:2000], evidence=evidence,
    )  # fmt: skip


def since_days(days: float) -> float:
    """Epoch seconds ``days`` ago."""
    return time.time() - days * 86400.0
