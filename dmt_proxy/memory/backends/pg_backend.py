"""``postgres``: memories in PostgreSQL with pgvector, shared by every proxy and worker.

Built directly on psycopg 3 (async) and the ``pgvector`` adapter, not on mem0's
pgvector vector store. mem0's store can update a payload without a vector, but
the rest does not fit: ids must be UUIDs (ours are ``mem_<hex>``), the scope would
live in JSON-path filters over an unindexed ``payload``, there is no schema version
to migrate or refuse, it runs ``CREATE EXTENSION`` on first use and opens its pool
without waiting (a bad DSN shows on the first request, not at start-up), and it is
synchronous (a thread per call). Here the scope is a set of indexed columns and the
filter is in SQL, the audit update touches the audit columns only (the embedding is
computed once per write, never on an audit), and a write whose id belongs to
another user is detected by the same statement that would overwrite it.

Layout (``<prefix>memories``, schema version ``MEMORY_SCHEMA_VERSION`` in
``<prefix>schema_version``): one row per record with its scope columns, the record
fields, ``record_version`` (``MemoryRecord.schema_version``) and ``embedding
vector(d)``, d fixed by the embedder when the table is created. Version 2 adds the
nullable ``provenance`` (jsonb): rows written before it read with none. Indexes: a b-tree on
``(user_id, created_at)`` for listing and for scoped search, and HNSW with cosine
distance on the embedding. With pgvector 0.8 or later ``hnsw.iterative_scan`` is
``strict_order``, so a scoped search through the HNSW index keeps scanning until it
has ``k`` visible rows instead of returning fewer.

Visibility is ``Scope.sees`` written in SQL: ``user_id`` always, and ``agent_id`` /
``session_id`` only when the scope names them. Tenants are part of the user (the API
namespaces the user by tenant before it builds the scope).

Erasure (``erase(user)``): the user's rows are deleted and the table vacuumed
(``VACUUM (ANALYZE)``; with ``full``, ``VACUUM (FULL, ANALYZE)``: see
``storage.vacuum_tables``). Measured on the test cluster: a plain ``VACUUM`` left the
bytes of 27 of 50 deleted rows in the table's file, a full one none; the write-ahead
log (``pg_wal``) kept all 50 either way. What no client can clear: the server's WAL
keeps the deleted text until its segments are recycled, WAL archives, replicas and
backups as long as they are kept.

Failures at run time (lost connection, server error) raise ``MemoryStoreError``;
the pool checks each connection before handing it out, so one dropped by a server
restart is replaced rather than failing a request.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from dmt_proxy.database import (
    PREFIX_PATTERN,
    Step,
    check_database,
    json_without_nul,
    migrate,
    open_pool,
    require_psycopg,
    without_nul,
)
from dmt_proxy.embedder import TextEmbedder
from dmt_proxy.errors import ConfigError
from dmt_proxy.memory.backends.runner import StoreRunner
from dmt_proxy.memory.base import (
    MemoryRecord,
    MemoryStoreError,
    RecordConflict,
    Scope,
    SearchHit,
    StoreErasure,
    check_write,
    nothing_to_search,
    with_audit,
)
from dmt_proxy.memory.registry import (
    BackendConfig,
    BackendPlugin,
    ContractEnv,
    StoreDatabase,
    register_backend,
)
from dmt_proxy.memory.write.storage import (
    POSTGRES_KEEPS,
    POSTGRES_PLAIN_VACUUM_KEEPS,
    vacuum_tables,
)
from dmt_proxy.provenance import AuditStamp, Provenance
from dmt_proxy.tags import AuditStatus, BiasTag

if TYPE_CHECKING:
    from psycopg import AsyncConnection
    from psycopg.sql import SQL, Composed
    from psycopg_pool import AsyncConnectionPool

MEMORY_SCHEMA_VERSION = 2
"""Layout of ``<prefix>memories``; bump it with a new step in ``_steps``."""

_COLUMNS = (
    "id, user_id, agent_id, session_id, text, query, answer, created_at, updated_at,"
    " audit_status, tag, metadata, record_version, provenance"
)


def _steps(prefix: str, dims: int) -> dict[int, Step]:
    from psycopg import sql

    table = sql.Identifier(f"{prefix}memories")

    async def v1(conn: AsyncConnection[Any]) -> None:
        await conn.execute(
            sql.SQL(
                "CREATE TABLE {} (id text PRIMARY KEY, user_id text NOT NULL, agent_id text,"
                " session_id text, text text NOT NULL, query text, answer text,"
                " created_at timestamptz NOT NULL, updated_at timestamptz NOT NULL,"
                " audit_status text NOT NULL, tag jsonb, metadata jsonb NOT NULL,"
                " record_version integer NOT NULL, embedding vector({}) NOT NULL)"
            ).format(table, sql.Literal(dims))
        )
        await conn.execute(
            sql.SQL("CREATE INDEX {} ON {} (user_id, created_at)").format(
                sql.Identifier(f"{prefix}memories_user"), table
            )
        )
        await conn.execute(
            sql.SQL("CREATE INDEX {} ON {} USING hnsw (embedding vector_cosine_ops)").format(
                sql.Identifier(f"{prefix}memories_hnsw"), table
            )
        )

    async def v2(conn: AsyncConnection[Any]) -> None:
        # Nullable: a record stored before provenance existed has none.
        await conn.execute(sql.SQL("ALTER TABLE {} ADD COLUMN provenance jsonb").format(table))

    return {1: v1, 2: v2}


def _jsonb(value: BaseModel | None) -> Any:
    """``value`` as a jsonb parameter (``None`` as NULL), without NUL: jsonb refuses the
    escape a NUL becomes in JSON."""
    from psycopg.types.json import Jsonb

    return None if value is None else Jsonb(json_without_nul(value.model_dump(mode="json")))


def _scope_filter(scope: Scope) -> tuple[Composed, list[Any]]:
    """The SQL of ``scope.sees(record)``: user always, agent and session when named."""
    from psycopg import sql

    parts: list[SQL] = [sql.SQL("user_id = %s")]
    params: list[Any] = [scope.user]
    if scope.agent is not None:
        parts.append(sql.SQL("agent_id = %s"))
        params.append(scope.agent)
    if scope.session is not None:
        parts.append(sql.SQL("session_id = %s"))
        params.append(scope.session)
    return sql.SQL(" AND ").join(parts), params


def _record(row: dict[str, Any]) -> MemoryRecord:
    return MemoryRecord(
        id=row["id"],
        scope=Scope(user=row["user_id"], agent=row["agent_id"], session=row["session_id"]),
        text=row["text"],
        query=row["query"],
        answer=row["answer"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        audit_status=AuditStatus(row["audit_status"]),
        tag=None if row["tag"] is None else BiasTag.model_validate(row["tag"]),
        metadata=row["metadata"] or {},
        provenance=_provenance(row["provenance"]),
        schema_version=row["record_version"],
    )


def _provenance(raw: dict[str, Any] | None) -> Provenance | None:
    return None if raw is None else Provenance.model_validate(raw)


def _pgvector_version(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split(".")[:2] if p.isdigit())


@register_backend("postgres")
class PostgresBackend(BackendPlugin):
    """Memories in a PostgreSQL table with a pgvector HNSW index (see the module docstring)."""

    name: ClassVar[str]

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid")
        dsn: str | None = None
        """libpq URL or key=value string; default: the ``DMT_DATABASE_URL`` setting."""
        table_prefix: str = Field(default="dmt_", pattern=PREFIX_PATTERN)
        """Prefix of every table and index, so several deployments can share a database."""
        pool_size: int = Field(default=4, ge=1, le=100)
        """Most connections this process opens for the memory store."""
        connect_timeout_s: float = Field(default=10.0, gt=0, le=300)

    def __init__(
        self,
        *,
        pool: AsyncConnectionPool,
        embedder: TextEmbedder,
        prefix: str,
        timeout_s: float,
    ) -> None:
        from psycopg import sql

        self._pool = pool
        self._embedder = embedder
        self._timeout_s = timeout_s
        self._table_name = f"{prefix}memories"
        self._table = sql.Identifier(self._table_name)
        self._runner = StoreRunner("postgres")

    @classmethod
    def contract_config(cls, env: ContractEnv) -> BackendConfig:
        """The contract runs on a fresh database of its own."""
        return BackendConfig(state_dir=env.state_dir, embedder=env.embedder,
                             options={"dsn": env.database_url()})  # fmt: skip

    @classmethod
    def store_database(
        cls, options: Mapping[str, Any], database_url: str | None
    ) -> StoreDatabase | None:
        """The store's database (its ``dsn`` option, else ``DMT_DATABASE_URL``) and table
        prefix: the outbox and the review trail default to them, one prefix for all three."""
        url = str(options["dsn"]) if options.get("dsn") else database_url
        return StoreDatabase(url=url, prefix=str(options.get("table_prefix", "dmt_")))

    @classmethod
    async def open(cls, config: BackendConfig, options: PostgresBackend.Options) -> PostgresBackend:
        """Check the database, migrate the table and open the pool; ConfigError when unusable."""
        require_psycopg()
        dsn = options.dsn or config.database_url  # the policy's dsn wins over DMT_DATABASE_URL
        if not dsn:
            raise ConfigError(
                "memory backend 'postgres' needs a database: set DMT_DATABASE_URL "
                "(or memory.options.dsn in the policy)"
            )
        what = "memory backend 'postgres'"
        version = await check_database(
            dsn, connect_timeout_s=options.connect_timeout_s, need_vector=True, what=what
        )
        assert version is not None
        embedder = config.shared_embedder()
        dims = len((await asyncio.to_thread(embedder.embed, ["dimension probe"]))[0])
        iterative = _pgvector_version(version) >= (0, 8)

        async def configure(conn: AsyncConnection[Any]) -> None:
            from pgvector.psycopg import register_vector_async

            await register_vector_async(conn)
            await conn.execute("SET TIME ZONE 'UTC'")
            if iterative:
                await conn.execute("SET hnsw.iterative_scan = strict_order")

        pool = await open_pool(dsn, size=options.pool_size, name="dmt-memory",
                               connect_timeout_s=options.connect_timeout_s, configure=configure)  # fmt: skip
        backend = cls(pool=pool, embedder=embedder, prefix=options.table_prefix,
                      timeout_s=options.connect_timeout_s)  # fmt: skip
        try:
            async with pool.connection() as conn:
                await migrate(conn, prefix=options.table_prefix, component="memory",
                              steps=_steps(options.table_prefix, dims), what=what)  # fmt: skip
                await backend._check_dims(conn, dims)
        except BaseException:
            await pool.close()
            raise
        return backend

    async def _check_dims(self, conn: AsyncConnection[Any], dims: int) -> None:
        row = await (
            await conn.execute(
                "SELECT atttypmod FROM pg_attribute WHERE attrelid = %s::regclass"
                " AND attname = 'embedding'",
                (self._table.as_string(conn),),
            )
        ).fetchone()
        if row is not None and int(row[0]) != dims:
            raise ConfigError(
                f"memory backend 'postgres': table {self._table.as_string(conn)} holds "
                f"{row[0]}-dimensional embeddings but the embedder makes {dims}: it was written "
                "with another embedding model. Use another table prefix or database."
            )

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[AsyncConnection[Any]]:
        """A pooled connection; database failures become ``MemoryStoreError``."""
        import psycopg

        self._runner.check_open()
        try:
            async with self._pool.connection(timeout=self._timeout_s) as conn:
                yield conn
        except psycopg.Error as exc:
            raise MemoryStoreError(f"postgres store failed: {exc}") from exc

    async def _embed(self, text: str) -> np.ndarray:
        vector = (await asyncio.to_thread(self._embedder.embed, [text]))[0]
        return np.asarray(vector, dtype=np.float32)

    async def _rows(self, query: Composed, params: list[Any]) -> list[dict[str, Any]]:
        from psycopg.rows import dict_row

        async with self._connection() as conn:
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(query, params)
            return await cur.fetchall()

    async def search(
        self, scope: Scope, query: str, k: int = 5, *, include_quarantined: bool = False
    ) -> list[SearchHit]:
        from psycopg import sql

        if nothing_to_search(query, k):
            return []
        self._runner.check_open()
        vector = await self._embed(query)
        where, params = _scope_filter(scope)
        if not include_quarantined:
            where = sql.SQL("{} AND audit_status <> %s").format(where)
            params.append(AuditStatus.QUARANTINED.value)
        rows = await self._rows(
            sql.SQL(
                "SELECT {}, 1 - (embedding <=> %s) AS score FROM {} WHERE {}"
                " ORDER BY embedding <=> %s LIMIT %s"
            ).format(sql.SQL(_COLUMNS), self._table, where),
            [vector, *params, vector, k],
        )
        return [SearchHit(record=_record(r), score=float(r["score"])) for r in rows]

    async def write(self, scope: Scope, record: MemoryRecord) -> MemoryRecord:
        from psycopg import sql
        from psycopg.types.json import Jsonb

        check_write(scope, record)
        self._runner.check_open()
        vector = await self._embed(record.text)
        tag = None if record.tag is None else Jsonb(json_without_nul(record.tag.model_dump()))
        values = [
            record.id, scope.user, scope.agent, scope.session, without_nul(record.text),
            None if record.query is None else without_nul(record.query),
            None if record.answer is None else without_nul(record.answer),
            record.created_at, record.updated_at, record.audit_status.value, tag,
            Jsonb(json_without_nul(record.metadata)), record.schema_version,
            _jsonb(record.provenance), vector,
        ]  # fmt: skip
        # One statement: insert, or overwrite the same user's record keeping its created_at;
        # no row back means the id belongs to another user.
        query = sql.SQL(
            "INSERT INTO {t} ({cols}, embedding) VALUES ({marks})"
            " ON CONFLICT (id) DO UPDATE SET agent_id = EXCLUDED.agent_id,"
            " session_id = EXCLUDED.session_id, text = EXCLUDED.text, query = EXCLUDED.query,"
            " answer = EXCLUDED.answer, updated_at = EXCLUDED.updated_at,"
            " audit_status = EXCLUDED.audit_status, tag = EXCLUDED.tag,"
            " metadata = EXCLUDED.metadata, record_version = EXCLUDED.record_version,"
            " provenance = EXCLUDED.provenance,"
            " embedding = EXCLUDED.embedding WHERE {t}.user_id = EXCLUDED.user_id"
            " RETURNING created_at"
        ).format(
            t=self._table,
            cols=sql.SQL(_COLUMNS),
            marks=sql.SQL(", ").join([sql.Placeholder()] * len(values)),
        )
        async with self._connection() as conn:
            row = await (await conn.execute(query, values)).fetchone()
        if row is None:
            raise RecordConflict(f"record {record.id} belongs to another user")
        return record.model_copy(update={"created_at": row[0]})

    async def update(
        self,
        scope: Scope,
        id: str,
        *,
        audit_status: AuditStatus,
        tag: BiasTag | None,
        audited: AuditStamp | None = None,
    ) -> MemoryRecord | None:
        from psycopg import sql
        from psycopg.rows import dict_row
        from psycopg.types.json import Jsonb

        where, params = _scope_filter(scope)
        async with self._connection() as conn, conn.transaction():
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(
                sql.SQL("SELECT {} FROM {} WHERE id = %s AND {} FOR UPDATE").format(
                    sql.SQL(_COLUMNS), self._table, where
                ),
                [id, *params],
            )
            row = await cur.fetchone()
            if row is None:
                return None
            new = with_audit(_record(row), audit_status, tag, audited)
            stored_tag = None if new.tag is None else Jsonb(json_without_nul(new.tag.model_dump()))
            # The audit columns only (and the provenance's audit stamp): the text and its
            # embedding stay as written.
            await cur.execute(
                sql.SQL(
                    "UPDATE {} SET audit_status = %s, tag = %s, updated_at = %s,"
                    " provenance = %s WHERE id = %s"
                ).format(self._table),
                [new.audit_status.value, stored_tag, new.updated_at, _jsonb(new.provenance), id],
            )
        return new

    async def get(self, scope: Scope, id: str) -> MemoryRecord | None:
        from psycopg import sql

        where, params = _scope_filter(scope)
        rows = await self._rows(
            sql.SQL("SELECT {} FROM {} WHERE id = %s AND {}").format(
                sql.SQL(_COLUMNS), self._table, where
            ),
            [id, *params],
        )
        return _record(rows[0]) if rows else None

    async def scope_of(self, id: str) -> Scope | None:
        from psycopg import sql

        rows = await self._rows(
            sql.SQL("SELECT user_id, agent_id, session_id FROM {} WHERE id = %s").format(
                self._table
            ),
            [id],
        )
        if not rows:
            return None
        row = rows[0]
        return Scope(user=row["user_id"], agent=row["agent_id"], session=row["session_id"])

    async def users(self) -> list[str]:
        """Every user with at least one memory (``dmt-proxy audit-backfill`` walks them)."""
        from psycopg import sql

        rows = await self._rows(
            sql.SQL("SELECT DISTINCT user_id FROM {} ORDER BY user_id").format(self._table), []
        )
        return [str(r["user_id"]) for r in rows]

    async def list(self, scope: Scope, *, limit: int | None = None) -> list[MemoryRecord]:
        from psycopg import sql

        where, params = _scope_filter(scope)
        query = sql.SQL("SELECT {} FROM {} WHERE {} ORDER BY created_at, id").format(
            sql.SQL(_COLUMNS), self._table, where
        )
        if limit is not None:
            query = sql.SQL("{} LIMIT %s").format(query)
            params.append(limit)
        return [_record(r) for r in await self._rows(query, params)]

    async def delete(self, scope: Scope, id: str) -> bool:
        from psycopg import sql

        where, params = _scope_filter(scope)
        async with self._connection() as conn:
            cur = await conn.execute(
                sql.SQL("DELETE FROM {} WHERE id = %s AND {}").format(self._table, where),
                [id, *params],
            )
            return cur.rowcount > 0

    async def delete_all(self, scope: Scope) -> int:
        from psycopg import sql

        where, params = _scope_filter(scope)
        async with self._connection() as conn:
            cur = await conn.execute(
                sql.SQL("DELETE FROM {} WHERE {}").format(self._table, where), params
            )
            return int(cur.rowcount)

    async def erase(self, user: str, *, full: bool = False) -> StoreErasure:
        """Delete ``user``'s rows and vacuum the table (module docstring for its limits)."""
        import psycopg

        deleted = await self.delete_all(Scope(user=user))
        try:
            compacted = await vacuum_tables(self._pool, [self._table_name], full=full)
        except psycopg.Error as exc:
            raise MemoryStoreError(f"postgres store failed: {exc}") from exc
        kept = [POSTGRES_KEEPS] if full else [POSTGRES_KEEPS, POSTGRES_PLAIN_VACUUM_KEEPS]
        return StoreErasure(deleted=deleted, compacted=compacted, kept=kept)

    async def close(self) -> None:
        if self._runner.closed:
            return
        self._runner.shut(lambda: None)
        await self._pool.close()
