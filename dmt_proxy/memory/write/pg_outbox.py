"""The outbox in PostgreSQL, shared by any number of proxies and workers on any machines.

``enqueue`` is one ``INSERT`` on an autocommit connection: it returns after the
server committed the row (as durable as the server's ``synchronous_commit``), so
an acknowledged write survives the proxy that took it.

``due`` claims rows for one worker: ``SELECT … FOR UPDATE SKIP LOCKED`` picks due
rows nobody holds, and the same statement sets ``lease_until`` and ``leased_by``;
two workers polling at once never get the same row. ``retry_later`` releases the
row, ``done`` deletes it. While the outbox is open a heartbeat renews, each
``lease_s / 3`` seconds, the leases of the rows this worker has claimed and not yet
finished or rescheduled, so an audit slower than the lease (the auditor's timeout
is minutes) keeps its row; a row whose ``retry_later`` could not reach the database
is no longer renewed and lapses. A worker killed mid-row stops renewing, its leases
run out within ``lease_s``, and the rows are claimed again. Storage stays exactly-once
because the row carries its final memory id (the backend's write is idempotent on
it), and a verdict already saved on the row is applied without a second audit.

Times come from the database clock (``now()``), so machines whose clocks disagree
still agree on what is due. The layout is versioned as component ``outbox`` in
``<prefix>schema_version`` (see ``dmt_proxy.database.migrate``); a newer one is
refused with a ``ConfigError``, as the SQLite outbox does. Layout 2 adds the nullable
``origin`` (jsonb): rows written before it read with their origin unknown, as in the
SQLite outbox; a proxy of the previous release still running inserts rows without it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from dmt_proxy.database import Step, json_without_nul, without_nul
from dmt_proxy.exchange import Exchange
from dmt_proxy.memory.circuit import describe
from dmt_proxy.memory.write.outbox import ROW_SCHEMA_VERSION, OutboxItem, exchange_row
from dmt_proxy.memory.write.storage import open_storage_pool, vacuum_tables

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from psycopg import AsyncConnection
    from psycopg.sql import Composed
    from psycopg_pool import AsyncConnectionPool

PG_OUTBOX_SCHEMA_VERSION = 2
"""Layout of ``<prefix>outbox``; bump it with a new step in ``_steps``."""

_COLUMNS = (
    "id, user_id, agent_id, session_id, query, answer, request_id, mode, origin,"
    " extract(epoch FROM created_at)::float8 AS created_at, attempts, stored, verdict,"
    " last_error, schema_version"
)
"""``outbox.COLUMNS``, with ``created_at`` read as seconds since the epoch."""


def _stored(exchange: Exchange) -> list[Any]:
    """``exchange_row(exchange)`` (``outbox.EXCHANGE_COLUMNS``) as PostgreSQL takes it: the
    origin as jsonb, and no NUL in any text (PostgreSQL text cannot hold one; scope parts
    never carry one: ``Scope`` refuses it)."""
    from psycopg.types.json import Jsonb

    *texts, _origin = exchange_row(exchange)
    origin = exchange.origin
    stored: list[Any] = [None if v is None else without_nul(v) for v in texts]
    # A NUL inside a JSON string becomes an escape that jsonb refuses: clean the value.
    stored.append(
        None if origin is None else Jsonb(json_without_nul(origin.model_dump(mode="json")))
    )
    return stored


def _steps(prefix: str) -> dict[int, Step]:
    from psycopg import sql

    table = sql.Identifier(f"{prefix}outbox")

    async def v1(conn: AsyncConnection[Any]) -> None:
        await conn.execute(
            sql.SQL(
                "CREATE TABLE {} (id text PRIMARY KEY, user_id text NOT NULL, agent_id text,"
                " session_id text, query text NOT NULL, answer text NOT NULL,"
                " request_id text NOT NULL, mode text NOT NULL,"
                " created_at timestamptz NOT NULL DEFAULT now(),"
                " attempts integer NOT NULL DEFAULT 0,"
                " next_attempt_at timestamptz NOT NULL DEFAULT now(),"
                " lease_until timestamptz, leased_by text, last_error text,"
                " stored boolean NOT NULL DEFAULT false, verdict jsonb,"
                " schema_version integer NOT NULL)"
            ).format(table)
        )
        await conn.execute(
            sql.SQL("CREATE INDEX {} ON {} (next_attempt_at)").format(
                sql.Identifier(f"{prefix}outbox_due"), table
            )
        )
        await conn.execute(
            sql.SQL("CREATE INDEX {} ON {} (user_id)").format(
                sql.Identifier(f"{prefix}outbox_user"), table
            )
        )

    async def v2(conn: AsyncConnection[Any]) -> None:
        # Nullable: the rows already there keep no origin (unknown), and a running proxy of
        # the previous release inserts rows without one.
        await conn.execute(sql.SQL("ALTER TABLE {} ADD COLUMN origin jsonb").format(table))

    return {1: v1, 2: v2}


def default_worker_id() -> str:
    """``host:pid:random``: names the worker holding a lease (for operators reading the table)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class PostgresOutbox:
    """Implements ``Outbox`` over a PostgreSQL table with leased claims (module docstring)."""

    def __init__(
        self, pool: AsyncConnectionPool, *, prefix: str, lease_s: float, worker_id: str
    ) -> None:
        from psycopg import sql

        self._pool = pool
        self._table_name = f"{prefix}outbox"
        self._table = sql.Identifier(self._table_name)
        self.lease_s = lease_s
        self.worker_id = worker_id
        self.found_version = 0
        """Layout version found when the outbox was opened (0: new)."""
        self._heartbeat: asyncio.Task[None] | None = None
        self._held: set[str] = set()
        """Rows claimed by ``due`` and not yet done or rescheduled: the ones renewed."""

    @classmethod
    async def open(
        cls,
        dsn: str,
        *,
        prefix: str = "dmt_",
        pool_size: int = 4,
        lease_s: float = 30.0,
        connect_timeout_s: float = 10.0,
        worker_id: str | None = None,
    ) -> PostgresOutbox:
        """Check the database, migrate the table and open the pool; ConfigError when unusable."""
        opened = await open_storage_pool(dsn, prefix=prefix, component="outbox", steps=_steps,
                                         what="the PostgreSQL outbox", pool_size=pool_size,
                                         pool_name="dmt-outbox",
                                         connect_timeout_s=connect_timeout_s)  # fmt: skip
        outbox = cls(opened.pool, prefix=prefix, lease_s=lease_s,
                     worker_id=worker_id or default_worker_id())  # fmt: skip
        outbox.found_version = opened.found_version
        outbox._heartbeat = asyncio.create_task(outbox._beat(), name="dmt-outbox-heartbeat")
        return outbox

    async def _beat(self) -> None:
        failures = 0
        while True:
            await asyncio.sleep(self.lease_s / 3)
            try:
                await self.renew()
                failures = 0
            except Exception as exc:  # the database may be down a while: keep trying
                failures += 1
                # One warning per outage, naming its cause; later failures are expected.
                log.log(
                    logging.WARNING if failures == 1 else logging.DEBUG,
                    "outbox lease renewal failed (%s); retrying",
                    describe(exc),
                )

    async def renew(self) -> int:
        """Extend by ``lease_s`` the leases of the rows in progress here; how many there are."""
        from psycopg import sql

        if not self._held:
            return 0
        return await self._execute(
            sql.SQL(
                "UPDATE {} SET lease_until = now() + make_interval(secs => %s)"
                " WHERE id = ANY(%s) AND leased_by = %s"
            ).format(self._table),
            [self.lease_s, sorted(self._held), self.worker_id],
        )

    async def _execute(self, query: Composed, params: list[Any]) -> int:
        async with self._pool.connection() as conn:
            cur = await conn.execute(query, params)
            return int(cur.rowcount)

    async def _rows(self, query: Composed, params: list[Any]) -> list[dict[str, Any]]:
        from psycopg.rows import dict_row

        async with self._pool.connection() as conn:
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(query, params)
            return await cur.fetchall()

    # -- producer side -------------------------------------------------------

    async def enqueue(self, exchange: Exchange, *, item_id: str | None = None) -> str:
        """Commit ``exchange`` and return its memory id (returns after the commit).

        ``item_id`` (default: a new one) makes a repeated enqueue of the same write a no-op
        while the row is pending (the local spool retries with the id it acknowledged).
        """
        from psycopg import sql

        item_id = item_id or f"mem_{uuid.uuid4().hex}"
        await self._execute(
            sql.SQL(
                "INSERT INTO {} (id, user_id, agent_id, session_id, query, answer, request_id,"
                " mode, origin, schema_version)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
                " ON CONFLICT (id) DO NOTHING"
            ).format(self._table),
            [item_id, *_stored(exchange), ROW_SCHEMA_VERSION],
        )
        return item_id

    async def forward(self, item: OutboxItem) -> None:
        """Insert a row taken from a local spool, keeping its id and creation time (a no-op
        when a row with that id is still pending)."""
        from psycopg import sql

        await self._execute(
            sql.SQL(
                "INSERT INTO {} (id, user_id, agent_id, session_id, query, answer, request_id,"
                " mode, origin, created_at, schema_version)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, to_timestamp(%s), %s)"
                " ON CONFLICT (id) DO NOTHING"
            ).format(self._table),
            [item.id, *_stored(item.exchange), item.created_at, item.schema_version],
        )

    # -- worker side ---------------------------------------------------------

    async def due(self, limit: int = 16) -> list[OutboxItem]:
        """Claim up to ``limit`` due rows nobody holds, oldest first, for ``lease_s`` seconds."""
        from psycopg import sql

        rows = await self._rows(
            sql.SQL(
                "WITH due AS (SELECT id AS due_id FROM {t} WHERE next_attempt_at <= now()"
                " AND (lease_until IS NULL OR lease_until <= now())"
                " ORDER BY created_at LIMIT %s FOR UPDATE SKIP LOCKED)"
                " UPDATE {t} SET lease_until = now() + make_interval(secs => %s), leased_by = %s"
                " FROM due WHERE id = due.due_id RETURNING {cols}"
            ).format(t=self._table, cols=sql.SQL(_COLUMNS)),
            [limit, self.lease_s, self.worker_id],
        )
        items = sorted(OutboxItem.readable(rows), key=lambda i: (i.created_at, i.id))
        self._held.update(i.id for i in items)
        return items

    async def mark_stored(self, item_id: str) -> bool:
        """Remember that the backend has the record; False when the row is gone (cancelled)."""
        from psycopg import sql

        query = sql.SQL("UPDATE {} SET stored = true WHERE id = %s").format(self._table)
        return await self._execute(query, [item_id]) > 0

    async def save_verdict(self, item_id: str, verdict: dict[str, Any]) -> bool:
        """Keep an auditor verdict on the row; False when the row is gone (cancelled)."""
        from psycopg import sql
        from psycopg.types.json import Jsonb

        query = sql.SQL("UPDATE {} SET verdict = %s WHERE id = %s").format(self._table)
        return await self._execute(query, [Jsonb(verdict), item_id]) > 0

    async def retry_later(self, item_id: str, error: str, delay_s: float) -> None:
        """Record a failed attempt, schedule the next one and release the row."""
        from psycopg import sql

        try:
            await self._execute(
                sql.SQL(
                    "UPDATE {} SET attempts = attempts + 1, last_error = %s,"
                    " next_attempt_at = now() + make_interval(secs => %s),"
                    " lease_until = NULL, leased_by = NULL WHERE id = %s"
                ).format(self._table),
                [without_nul(error[:2000]), delay_s, item_id],
            )
        finally:  # even if the update failed: then the lease lapses and another worker retries
            self._held.discard(item_id)

    async def done(self, item_id: str) -> None:
        """The write is complete: forget it."""
        from psycopg import sql

        try:
            query = sql.SQL("DELETE FROM {} WHERE id = %s").format(self._table)
            await self._execute(query, [item_id])
        finally:
            self._held.discard(item_id)

    # -- admin side ----------------------------------------------------------

    async def cancel(self, item_id: str) -> bool:
        """Drop a pending write (its memory was deleted by an admin)."""
        from psycopg import sql

        query = sql.SQL("DELETE FROM {} WHERE id = %s").format(self._table)
        return await self._execute(query, [item_id]) > 0

    async def cancel_user(self, user: str) -> int:
        """Drop every pending write of ``user``; returns how many."""
        from psycopg import sql

        query = sql.SQL("DELETE FROM {} WHERE user_id = %s").format(self._table)
        return await self._execute(query, [user])

    async def stats(self) -> tuple[int, float]:
        """(pending count, age in seconds of the oldest pending row; 0 when empty)."""
        from psycopg import sql

        rows = await self._rows(
            sql.SQL(
                "SELECT count(*) AS depth, coalesce(extract(epoch FROM now() - min(created_at)),"
                " 0)::float8 AS age FROM {}"
            ).format(self._table),
            [],
        )
        return int(rows[0]["depth"]), max(0.0, float(rows[0]["age"]))

    async def pending(self, user: str | None = None) -> list[OutboxItem]:
        """Every row still in the outbox (optionally one user's), oldest first."""
        from psycopg import sql

        where, params = (sql.SQL("WHERE user_id = %s"), [user]) if user is not None else (
            sql.SQL(""), [])  # fmt: skip
        rows = await self._rows(
            sql.SQL("SELECT {} FROM {} {} ORDER BY created_at, id").format(
                sql.SQL(_COLUMNS), self._table, where
            ),
            params,
        )
        return OutboxItem.readable(rows)

    async def compact(self, *, skip: Iterable[str] = (), full: bool = False) -> list[str]:
        """``VACUUM`` the outbox table (``storage.vacuum_tables``, ``skip`` as there)."""
        return await vacuum_tables(self._pool, [self._table_name], full=full, skip=skip)

    async def release(self) -> int:
        """Give up every lease this worker holds, so others claim those rows now; how many."""
        from psycopg import sql

        return await self._execute(
            sql.SQL(
                "UPDATE {} SET lease_until = NULL, leased_by = NULL WHERE leased_by = %s"
            ).format(self._table),
            [self.worker_id],
        )

    async def aclose(self) -> None:
        """Release this worker's leases (best effort) and close the pool.

        A worker that dies instead leaves its rows to be claimed again when the leases end.
        """
        import psycopg

        if self._heartbeat is not None:
            self._heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeat
            self._heartbeat = None
        # The database may be gone: then the leases simply run out.
        with contextlib.suppress(psycopg.Error):
            await self.release()
        self._held.clear()
        await self._pool.close()
