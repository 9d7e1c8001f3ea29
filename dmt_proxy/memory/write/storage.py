"""The storage plumbing that the outbox and the review trail share, in SQLite and PostgreSQL.

``SqliteStorage`` is the base of ``SqliteOutbox`` and ``SqliteTrail``: one SQLite file
in WAL mode, its tables migrated on opening, and one connection that lives on a thread
of its own, because a connection is not shared across threads and the event loop must
never block on an fsync. A storage used after it was closed raises ``StorageClosed``.

``open_storage_pool`` is how ``PostgresOutbox`` and ``PostgresTrail`` open: check the
database (naming the extra when psycopg is missing, refusing a bad table prefix), open
a pool, migrate the component, and close the pool again when the migration fails.
``like_prefix`` is the ``LIKE`` pattern both trails filter users by.

Erasure (``dmt_proxy.memory.erasure``): every connection opened here deletes with
``PRAGMA secure_delete=ON`` (SQLite overwrites what a ``DELETE`` or ``UPDATE`` frees
with zeros, whatever the build's default), and ``compact_sqlite`` removes what is
left of deleted rows in a file: the write-ahead log is checkpointed and truncated,
and ``VACUUM`` rewrites the database from its live rows alone. ``vacuum_tables`` is
the PostgreSQL side: ``VACUUM`` on the tables an erasure touched.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from dmt_proxy.database import (
    Step,
    check_database,
    check_prefix,
    migrate,
    open_pool,
    require_psycopg,
)
from dmt_proxy.memory.base import MemoryStoreError

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool

T = TypeVar("T")

log = logging.getLogger(__name__)

POSTGRES_KEEPS = (
    "PostgreSQL: the server's write-ahead log (pg_wal), WAL archives, replicas and backups "
    "keep the deleted text until they are recycled or expire; no statement of a client "
    "clears them"
)
"""What an erasure cannot clear in PostgreSQL, as it reports it."""
POSTGRES_STATISTICS_KEEPS = (
    "PostgreSQL: the planner's statistics (pg_statistic) were not vacuumed: only the "
    "database's owner or a superuser may; its dead rows may hold sampled values of the "
    "user's text until autovacuum or that role vacuums it"
)
"""What an erasure reports when this role could not vacuum ``pg_statistic``."""
POSTGRES_PLAIN_VACUUM_KEEPS = (
    "PostgreSQL: a plain VACUUM frees the deleted rows' space for reuse without overwriting "
    "it, so their bytes stay in the tables' files until new rows take it; erase with "
    "vacuum=full (--vacuum-full) to rewrite the tables (an exclusive lock on each meanwhile)"
)
"""What a plain ``VACUUM`` leaves, measured (``vacuum_tables``)."""

Migration = Callable[[sqlite3.Connection, Path], int]
"""Creates or upgrades a SQLite storage's tables; returns the layout version it found."""


class StorageClosed(MemoryStoreError, RuntimeError):
    """The outbox or the review trail was used after it was closed.

    Also a ``RuntimeError``, which it was before the exception tree had a place for it.
    """


class SqliteStorage:
    """One SQLite file on one thread of its own (module docstring)."""

    def __init__(
        self,
        path: Path,
        *,
        what: str,
        migration: Migration,
        thread: str,
        synchronous: str = "FULL",
        timeout_s: float = 5.0,
    ) -> None:
        """Open ``path`` (created with its directory) and migrate it with ``migration``.

        ``what`` names the storage in errors; ``thread`` names its thread; ``timeout_s``
        is how long a statement waits for another process's lock on the file.
        """
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.what = what
        self.found_version = 0
        """Layout version of the file before it was opened (0: new or unversioned)."""
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=thread)
        self._conn: sqlite3.Connection | None = None
        try:
            self._executor.submit(self._open, migration, synchronous, timeout_s).result()
        except BaseException:
            self._executor.shutdown(wait=True)
            raise

    def _open(self, migration: Migration, synchronous: str, timeout_s: float) -> None:
        conn = sqlite3.connect(self.path, isolation_level=None, timeout=timeout_s)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={synchronous}")
            conn.execute("PRAGMA secure_delete=ON")  # freed space is zeroed (erasure)
            self.found_version = migration(conn, self.path)
        except BaseException:
            conn.close()
            raise
        self._conn = conn

    @property
    def _db(self) -> sqlite3.Connection:
        """The connection (on the storage's thread only); ``StorageClosed`` once closed."""
        if self._conn is None:
            raise StorageClosed(f"{self.what} is closed")
        return self._conn

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the storage's thread."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    def _compact(self) -> None:
        compact_sqlite(self._db, self.path)

    async def compact(self, *, skip: Iterable[str] = (), full: bool = False) -> list[str]:
        """Remove what deleted rows left in the file (``compact_sqlite``), unless its
        name (the path) is in ``skip``; the names compacted. (SQLite's ``VACUUM`` always
        rewrites the file: ``full`` changes nothing here.)"""
        if str(self.path) in set(skip):
            return []
        await self._run(self._compact)
        return [str(self.path)]

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    async def aclose(self) -> None:
        """Close the file and its thread."""
        await self._run(self._close)
        self._executor.shutdown(wait=True)

    def close(self) -> None:
        """``aclose`` from synchronous code."""
        self._executor.submit(self._close).result()
        self._executor.shutdown(wait=True)


class StoragePool(NamedTuple):
    """What ``open_storage_pool`` opened."""

    pool: AsyncConnectionPool
    found_version: int
    """The component's layout version before the migration (0: new)."""


async def open_storage_pool(
    dsn: str,
    *,
    prefix: str,
    component: str,
    steps: Callable[[str], Mapping[int, Step]],
    what: str,
    pool_size: int,
    pool_name: str,
    connect_timeout_s: float,
) -> StoragePool:
    """Check the database, open a pool and migrate ``component``; ConfigError when unusable.

    ``steps(prefix)`` gives the migration steps; it is called only once psycopg and the
    prefix are known to be good (the steps build SQL with psycopg).
    """
    require_psycopg()
    check_prefix(prefix)
    await check_database(dsn, connect_timeout_s=connect_timeout_s, need_vector=False,
                         what=what)  # fmt: skip
    pool = await open_pool(dsn, size=pool_size, name=pool_name,
                           connect_timeout_s=connect_timeout_s)  # fmt: skip
    try:
        async with pool.connection() as conn:
            found = await migrate(conn, prefix=prefix, component=component,
                                  steps=steps(prefix), what=what)  # fmt: skip
    except BaseException:
        await pool.close()
        raise
    return StoragePool(pool, found)


def like_prefix(prefix: str | None) -> str:
    """A ``LIKE`` pattern, backslash escaping, for the strings that start with ``prefix``
    (every string when ``None``)."""
    if prefix is None:
        return "%"
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def compact_sqlite(conn: sqlite3.Connection, what: object = "database", *,
                   tries: int = 20) -> None:  # fmt: skip
    """Remove every byte deleted rows left in ``conn``'s database file and its WAL.

    The WAL is checkpointed and truncated to zero bytes (it holds old page images, the
    deleted text among them, until then), ``VACUUM`` rewrites the database from its live
    rows (free pages and the free space inside pages go), and the WAL the rewrite went
    through is truncated again. A file in rollback-journal mode skips the checkpoints
    (its journal is deleted after each transaction). ``conn`` must be in autocommit
    (no open transaction). A checkpoint blocked by another connection's reader is tried
    again, ``tries`` times; still blocked, ``MemoryStoreError``.
    """
    wal = str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower() == "wal"
    if wal:
        _checkpoint(conn, what, tries)
    conn.execute("VACUUM")
    if wal:
        _checkpoint(conn, what, tries)


def _checkpoint(conn: sqlite3.Connection, what: object, tries: int) -> None:
    for attempt in range(tries):
        busy, _log, _done = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        if not busy:
            return
        time.sleep(min(0.05 * 2**attempt, 1.0))  # a reader of another connection: wait for it
    raise MemoryStoreError(f"{what}: the write-ahead log could not be checkpointed (a reader "
                           "held it); try the erasure again")  # fmt: skip


STATISTICS = "pg_statistic"
"""The catalog of the planner's statistics: ``ANALYZE`` (and autovacuum's) keeps sampled
column values there, the users' text among them."""


async def vacuum_tables(
    pool: AsyncConnectionPool, tables: Iterable[str], *, full: bool = False,
    skip: Iterable[str] = (),
) -> list[str]:  # fmt: skip
    """``VACUUM (ANALYZE)`` each of ``tables`` (names as stored, prefix included), then
    ``VACUUM`` the planner's statistics (``pg_statistic``, on every call, since the
    ``ANALYZE`` leaves the old statistics behind as dead rows); the names of those
    vacuumed, as ``postgresql:<database>/<table>``, leaving out the tables named in
    ``skip``.

    The space of the rows deleted or rewritten before is freed for reuse in each table and
    its TOAST table, and the statistics (which hold sampled values) are computed again
    from the live rows, their old rows then vacuumed. Freed is not overwritten: the old
    bytes stay in the files until new rows take their place. ``full``: ``VACUUM FULL``
    rewrites each table into a new file and deletes the old one, so none stay; it holds
    an exclusive lock on the table while it runs (every proxy's reads and writes of it
    wait). A role that may not vacuum ``pg_statistic`` (only the database's owner or a
    superuser may) gets a warning from the server, and that name is left out. Outside the
    reach of either: the server's write-ahead log, archives, replicas and backups."""
    from psycopg import sql

    done: list[str] = []
    skipped = set(skip)
    warned: list[str] = []

    def notice(diagnostic: Any) -> None:
        if diagnostic.severity_nonlocalized == "WARNING":
            warned.append(str(diagnostic.message_primary))

    async with pool.connection() as conn:  # autocommit: VACUUM runs outside a transaction
        where = f"postgresql:{conn.info.dbname}/"
        conn.add_notice_handler(notice)
        try:
            for table in [*tables, STATISTICS]:
                # The statistics are vacuumed again whatever ``skip`` says: this call's
                # ANALYZE has just left the old sampled values of its tables there as dead
                # rows, and a vacuum before it did not remove those.
                if where + table in skipped and table != STATISTICS:
                    continue
                options = ["FULL"] if full else []
                if table != STATISTICS:
                    options.append("ANALYZE")
                how = sql.SQL(f"({', '.join(options)}) " if options else "")
                started, warned[:] = time.monotonic(), []
                await conn.execute(sql.SQL("VACUUM {}{}").format(how, sql.Identifier(table)))
                if warned:  # e.g. "skipping "pg_statistic" --- only ... can vacuum it"
                    log.warning("VACUUM %s: %s", table, "; ".join(warned))
                    continue
                log.info("vacuumed %s in %.2fs", table, time.monotonic() - started)
                done.append(where + table)
                skipped.add(where + table)
        finally:
            conn.remove_notice_handler(notice)
    return done
