"""The review trail in PostgreSQL, beside the shared outbox: one trail for every proxy,
worker and ``dmt-proxy console`` of a deployment.

Same events and rules as ``dmt_proxy.memory.write.trail`` (the SQLite one); the table
is ``<prefix>review_trail``, versioned as component ``review_trail`` in
``<prefix>schema_version`` (``dmt_proxy.database.migrate``), and append-only by a
trigger that refuses ``DELETE``, ``TRUNCATE`` and every ``UPDATE`` but the one an
erasure makes (a tombstone: ``trail.tombstone_only``). Version 2 adds ``erased_at``
and that exception. After an erasure the table is vacuumed (``storage.vacuum_tables``:
what a plain and a full ``VACUUM`` leave); the server's write-ahead log, archives,
replicas and backups keep the cleared text until they are recycled or expire, which no
statement of a client can change.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from dmt_proxy.database import Step, without_nul
from dmt_proxy.memory.write.storage import like_prefix, open_storage_pool, vacuum_tables
from dmt_proxy.memory.write.trail import (
    APPEND_ONLY,
    TRAIL_COLUMNS,
    TrailEvent,
    event_row,
    is_held,
    row_event,
    tombstone_only,
)

if TYPE_CHECKING:
    from psycopg import AsyncConnection
    from psycopg_pool import AsyncConnectionPool

PG_TRAIL_SCHEMA_VERSION = 2
"""Layout of ``<prefix>review_trail``; bump it with a new step in ``_steps``."""


def _steps(prefix: str) -> dict[int, Step]:
    from psycopg import sql

    table = sql.Identifier(f"{prefix}review_trail")
    guard = sql.Identifier(f"{prefix}review_trail_append_only")

    async def v1(conn: AsyncConnection[Any]) -> None:
        await conn.execute(
            sql.SQL(
                "CREATE TABLE {} (seq bigserial PRIMARY KEY, memory_id text NOT NULL,"
                " user_id text NOT NULL, at double precision NOT NULL, actor text NOT NULL,"
                " human integer NOT NULL, action text NOT NULL, before_status text,"
                " after_status text NOT NULL, before_domain text, after_domain text,"
                " reason text NOT NULL, evidence text, format_version integer NOT NULL)"
            ).format(table)
        )
        for name, column in (("memory", "memory_id, seq"), ("at", "at"), ("user", "user_id")):
            await conn.execute(
                sql.SQL("CREATE INDEX {} ON {} ({})").format(
                    sql.Identifier(f"{prefix}review_trail_{name}"), table, sql.SQL(column)
                )
            )
        await conn.execute(
            sql.SQL(
                "CREATE FUNCTION {}() RETURNS trigger LANGUAGE plpgsql AS"
                " $$BEGIN RAISE EXCEPTION 'the review trail is append-only'; END$$"
            ).format(guard)
        )
        await conn.execute(
            sql.SQL(
                "CREATE TRIGGER {} BEFORE UPDATE OR DELETE ON {} FOR EACH ROW EXECUTE FUNCTION {}()"
            ).format(sql.Identifier(f"{prefix}review_trail_rows"), table, guard)
        )
        await conn.execute(
            sql.SQL(
                "CREATE TRIGGER {} BEFORE TRUNCATE ON {} FOR EACH STATEMENT EXECUTE FUNCTION {}()"
            ).format(sql.Identifier(f"{prefix}review_trail_truncate"), table, guard)
        )

    async def v2(conn: AsyncConnection[Any]) -> None:
        await conn.execute(sql.SQL("ALTER TABLE {} ADD COLUMN erased_at double precision")
                           .format(table))  # fmt: skip
        # The guard now lets the one update of an erasure through (a row trigger that
        # returns NEW lets it happen); TRUNCATE, DELETE and any other UPDATE still raise.
        body = (
            "BEGIN IF TG_OP = 'UPDATE' AND " + tombstone_only("IS NOT DISTINCT FROM")
            + " THEN RETURN NEW; END IF; RAISE EXCEPTION '"
            + APPEND_ONLY.replace("'", "''") + "'; END"
        )  # fmt: skip
        await conn.execute(
            sql.SQL("CREATE OR REPLACE FUNCTION {}() RETURNS trigger LANGUAGE plpgsql AS {}")
            .format(guard, sql.Literal(body))
        )  # fmt: skip

    return {1: v1, 2: v2}


class PostgresTrail:
    """Implements ``Trail`` over a PostgreSQL table (module docstring)."""

    def __init__(self, pool: AsyncConnectionPool, *, prefix: str) -> None:
        from psycopg import sql

        self._pool = pool
        self._table_name = f"{prefix}review_trail"
        self._table = sql.Identifier(self._table_name)

    @classmethod
    async def open(
        cls, dsn: str, *, prefix: str = "dmt_", pool_size: int = 2, connect_timeout_s: float = 10.0
    ) -> PostgresTrail:
        """Check the database, migrate the table and open the pool; ConfigError when unusable."""
        opened = await open_storage_pool(dsn, prefix=prefix, component="review_trail",
                                         steps=_steps, what="the PostgreSQL review trail",
                                         pool_size=pool_size, pool_name="dmt-trail",
                                         connect_timeout_s=connect_timeout_s)  # fmt: skip
        return cls(opened.pool, prefix=prefix)

    async def append(self, event: TrailEvent) -> TrailEvent:
        """Store ``event``; returns it with its ``seq`` (after the commit)."""
        from psycopg import sql

        row = [without_nul(v) if isinstance(v, str) else v for v in event_row(event)]
        names = TRAIL_COLUMNS.removeprefix("seq, ")
        async with self._pool.connection() as conn:
            cur = await conn.execute(
                sql.SQL("INSERT INTO {} (" + names + ") VALUES ("
                        + ", ".join(["%s"] * len(row)) + ") RETURNING seq").format(self._table),
                row,
            )  # fmt: skip
            found = await cur.fetchone()
        assert found is not None
        return event.model_copy(update={"seq": int(found[0])})

    async def _select(self, where: str, params: list[Any]) -> list[TrailEvent]:
        """Rows matching ``where``, in which ``{table}`` names the trail table."""
        from psycopg import sql

        query = sql.SQL(
            "SELECT " + TRAIL_COLUMNS + " FROM {table} WHERE " + where + " ORDER BY seq"
        )
        async with self._pool.connection() as conn:
            cur = await conn.execute(query.format(table=self._table), params)
            rows = await cur.fetchall()
        return [row_event(tuple(r)) for r in rows]

    async def history(self, memory_id: str) -> list[TrailEvent]:
        """Every event of ``memory_id``, oldest first."""
        return await self._select("memory_id = %s", [memory_id])

    async def latest(self, user_prefix: str | None = None) -> list[TrailEvent]:
        """The newest event of every memory (of users starting with ``user_prefix``)."""
        return await self._select(
            "seq IN (SELECT max(seq) FROM {table} GROUP BY memory_id) AND user_id LIKE %s",
            [like_prefix(user_prefix)],
        )

    async def events(self, user_prefix: str | None = None, since: float = 0.0) -> list[TrailEvent]:
        """Every event since ``since`` (epoch seconds), oldest first."""
        return await self._select("at >= %s AND user_id LIKE %s", [since, like_prefix(user_prefix)])

    async def held(self, memory_id: str) -> bool:
        """Whether a human verdict holds ``memory_id``."""
        return is_held(await self.history(memory_id))

    async def of_user(self, user: str) -> list[TrailEvent]:
        """Every event of ``user``, oldest first."""
        return await self._select("user_id = %s", [user])

    async def erase_user(self, user: str, at: datetime) -> int:
        """Turn every live event of ``user`` into a tombstone (after the commit)."""
        from psycopg import sql

        async with self._pool.connection() as conn:
            cur = await conn.execute(
                sql.SQL("UPDATE {} SET reason = '', evidence = NULL, erased_at = %s"
                        " WHERE user_id = %s AND erased_at IS NULL").format(self._table),
                [at.timestamp(), user],
            )  # fmt: skip
            return int(cur.rowcount)

    async def compact(self, *, skip: Iterable[str] = (), full: bool = False) -> list[str]:
        """``VACUUM`` the trail table (``storage.vacuum_tables``, ``skip`` as there)."""
        return await vacuum_tables(self._pool, [self._table_name], full=full, skip=skip)

    async def aclose(self) -> None:
        """Close the pool."""
        await self._pool.close()
