"""The storage plumbing that the outbox and the review trail share, in SQLite and PostgreSQL.

``SqliteStorage`` is the base of ``SqliteOutbox`` and ``SqliteTrail``: one SQLite file
in WAL mode, its tables migrated on opening, and one connection that lives on a thread
of its own, because a connection is not shared across threads and the event loop must
never block on an fsync. A storage used after it was closed raises ``StorageClosed``.

``open_storage_pool`` is how ``PostgresOutbox`` and ``PostgresTrail`` open: check the
database (naming the extra when psycopg is missing, refusing a bad table prefix), open
a pool, migrate the component, and close the pool again when the migration fails.
``like_prefix`` is the ``LIKE`` pattern both trails filter users by.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Mapping
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
