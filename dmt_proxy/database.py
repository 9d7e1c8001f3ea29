"""PostgreSQL plumbing shared by the ``postgres`` memory backend and the PostgreSQL outbox.

psycopg 3 (async) with a ``psycopg_pool`` pool; both are optional (``pip install
'dmt-proxy[postgres]'``) and imported only when a PostgreSQL component is opened.

Start-up checks raise ``ConfigError`` naming what is missing: an unparsable
connection string, a server that cannot be reached or refuses the login, a
database without the ``vector`` extension. Messages name the host, port,
database and user, never the password.

Schema versions: one ``<prefix>schema_version`` table holds a row per component
(``memory``, ``outbox``). ``migrate`` brings a component to the version the code
knows, one step per version, in one transaction under an advisory lock (two
processes starting at once do not both migrate), and refuses a version newer than
the code knows, as the SQLite outbox does.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from dmt_proxy.errors import ConfigError

if TYPE_CHECKING:
    from psycopg import AsyncConnection
    from psycopg_pool import AsyncConnectionPool

PREFIX_PATTERN = r"^[a-z_][a-z0-9_]{0,39}$"
"""Allowed table prefixes: a lower-case SQL identifier start, short enough for index names."""

Step = Callable[["AsyncConnection[Any]"], Awaitable[None]]
"""One migration step: the DDL that takes a component from version n-1 to n."""


def require_psycopg() -> None:
    """Raise a ConfigError naming the extra when psycopg, its pool or pgvector is missing."""
    try:
        import pgvector.psycopg  # noqa: F401
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError as exc:
        raise ConfigError(
            f"PostgreSQL support needs packages that are not installed ({exc}); "
            "install the postgres extra: pip install 'dmt-proxy[postgres]'"
        ) from exc


def reason(exc: BaseException) -> str:
    """A database error's message on one line (libpq's are several, with hints)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return "; ".join(lines) or type(exc).__name__


def check_prefix(prefix: str) -> str:
    """``prefix`` if it is a safe table prefix, else a ConfigError."""
    if not re.fullmatch(PREFIX_PATTERN, prefix):
        raise ConfigError(f"table prefix {prefix!r} must match {PREFIX_PATTERN}")
    return prefix


def describe(dsn: str) -> str:
    """Where ``dsn`` points, for messages: ``user@host:port/dbname`` without the password."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        info = conninfo_to_dict(dsn)
    except Exception:
        return "<unparsable connection string>"
    host = info.get("host") or info.get("hostaddr") or "localhost"
    return f"{info.get('user') or '<default user>'}@{host}:{info.get('port') or 5432}/" + str(
        info.get("dbname") or "<default database>"
    )


async def check_database(
    dsn: str, *, connect_timeout_s: float, need_vector: bool, what: str
) -> str | None:
    """Connect once to ``dsn`` and check it; returns the pgvector version (if ``need_vector``).

    Creates the ``vector`` extension when the server has it and the role may; otherwise
    a ConfigError says which of the two is missing. ``what`` names the component.
    """
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    try:
        conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        raise ConfigError(
            f"{what}: the database URL (DMT_DATABASE_URL) is not a valid PostgreSQL "
            f"connection string: {exc}"
        ) from None
    where = describe(dsn)
    try:
        conn = await psycopg.AsyncConnection.connect(
            dsn, autocommit=True, connect_timeout=max(1, round(connect_timeout_s))
        )
    except psycopg.Error as exc:
        raise ConfigError(
            f"{what}: cannot connect to PostgreSQL at {where}: {reason(exc)}"
        ) from None
    try:
        if not need_vector:
            return None
        return await _ensure_vector(conn, where, what)
    finally:
        await conn.close()


async def _ensure_vector(conn: AsyncConnection[Any], where: str, what: str) -> str:
    import psycopg

    async def installed() -> str | None:
        row = await (
            await conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        ).fetchone()
        return None if row is None else str(row[0])

    version = await installed()
    if version is not None:
        return version
    available = await (
        await conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
    ).fetchone()
    if available is None:
        raise ConfigError(
            f"{what}: the PostgreSQL server at {where} does not have the pgvector extension "
            "('vector' is not in pg_available_extensions). Install pgvector on the server "
            "(for example the postgresql-NN-pgvector package, or an image that ships it)."
        )
    try:
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext('dmt-proxy:vector'))")
            await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    except psycopg.Error as exc:
        raise ConfigError(
            f"{what}: the database at {where} lacks the 'vector' extension and this role "
            f"cannot create it ({reason(exc)}). Run 'CREATE EXTENSION vector;' in that "
            "database as its owner or a superuser."
        ) from None
    version = await installed()
    assert version is not None
    return version


RECONNECT_TIMEOUT_S = 5.0
"""How long a pool keeps one series of reconnection attempts going (see ``open_pool``)."""


async def open_pool(
    dsn: str,
    *,
    size: int,
    name: str,
    connect_timeout_s: float,
    configure: Callable[[AsyncConnection[Any]], Awaitable[None]] | None = None,
) -> AsyncConnectionPool:
    """An open pool of autocommit connections; each is checked before it is handed out,
    so a connection the server dropped (restart, failover) is replaced, not used."""
    from psycopg_pool import AsyncConnectionPool

    pool = AsyncConnectionPool(
        dsn,
        min_size=1,
        max_size=size,
        name=name,
        open=False,
        configure=configure,
        check=AsyncConnectionPool.check_connection,
        kwargs={"autocommit": True, "connect_timeout": max(1, round(connect_timeout_s))},
        timeout=connect_timeout_s,
        # psycopg's reconnection backoff doubles without a cap (1, 2, 4, 8, 16 s...) until
        # this timeout: after a 15 s outage the pool would wait up to 16 s more before
        # trying again. Giving up each series after 5 s lets the next request (or the
        # store circuit's probe) start a new one at once, so the pool follows the server
        # back within seconds.
        reconnect_timeout=RECONNECT_TIMEOUT_S,
    )
    try:
        await pool.open(wait=True, timeout=connect_timeout_s)
    except Exception as exc:
        await pool.close()
        raise ConfigError(
            f"{name}: cannot open a connection pool to PostgreSQL at {describe(dsn)}: {exc}"
        ) from None
    return pool


async def migrate(
    conn: AsyncConnection[Any],
    *,
    prefix: str,
    component: str,
    steps: Mapping[int, Step],
    what: str,
) -> int:
    """Bring ``component`` to ``max(steps)``; returns the version found (0: new).

    Refuses a newer version with a ConfigError rather than guess at its layout.
    """
    from psycopg import sql

    target = max(steps)
    table = sql.Identifier(f"{prefix}schema_version")
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"dmt-proxy:{prefix}",))
        await conn.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (component text PRIMARY KEY,"
                " version integer NOT NULL, updated_at timestamptz NOT NULL DEFAULT now())"
            ).format(table)
        )
        row = await (
            await conn.execute(
                sql.SQL("SELECT version FROM {} WHERE component = %s").format(table), (component,)
            )
        ).fetchone()
        found = 0 if row is None else int(row[0])
        if found > target:
            raise ConfigError(
                f"{what}: table {prefix}{component} has schema version {found}, newer than this "
                f"dmt-proxy understands ({target}): it was written by a later release. Upgrade "
                "dmt-proxy, or use another database or table prefix."
            )
        for version in range(found + 1, target + 1):
            await steps[version](conn)
        if found < target:
            await conn.execute(
                sql.SQL(
                    "INSERT INTO {} (component, version) VALUES (%s, %s) ON CONFLICT (component)"
                    " DO UPDATE SET version = EXCLUDED.version, updated_at = now()"
                ).format(table),
                (component, target),
            )
    return found


def without_nul(text: str) -> str:
    """``text`` with NUL characters replaced by U+FFFD: PostgreSQL text cannot hold NUL,
    and a write that can never be stored would be retried forever."""
    return text.replace("\x00", "\ufffd") if "\x00" in text else text


def json_without_nul(value: Any) -> Any:
    """``value`` (decoded JSON) with ``without_nul`` applied to every string in it."""
    if isinstance(value, str):
        return without_nul(value)
    if isinstance(value, dict):
        return {without_nul(str(k)): json_without_nul(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_without_nul(v) for v in value]
    return value
