"""Where the memory side is put together: the one module of ``memory/`` that builds the audit.

``build_memory_service`` assembles the proxy's memory service (the backend named by
the policy, the outbox, the audit pipeline and the worker that moves outbox rows
through the audit into the backend); ``backfill_store`` assembles the same pieces
for ``dmt-proxy audit-backfill``; ``erase_stored_user`` and ``export_stored_user`` open
the stores alone (no audit) for ``dmt-proxy erase`` and ``dmt-proxy export``. The first
two build the audit pipeline with
``dmt_proxy.audit.stages.build_audit_pipeline``; every other module of ``memory/``
sees the audit only through its seam (``dmt_proxy.audit.protocol`` and the verdict
types of ``dmt_proxy.audit.schema``).

Single process or scaled out: the outbox is SQLite under the state dir (one
process) or PostgreSQL (``DMT_OUTBOX``; by default PostgreSQL exactly when the
memory backend keeps its store there, as it declares with
``BackendPlugin.store_database``), shared by any number of proxies and
``dmt-proxy worker`` processes. ``DMT_WORKER=off`` builds the worker but never
starts it, leaving the draining to those processes; it needs the shared outbox.

One circuit breaker (``dmt_proxy.memory.circuit``) guards the store for retrieval
and, with the PostgreSQL outbox, for the enqueue: its probe lists a reserved scope
in the backend and reads the shared outbox's depth, so it closes only when both
pools answer again.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any, Literal

from dmt_proxy.audit.protocol import Auditor
from dmt_proxy.audit.stages import build_audit_pipeline
from dmt_proxy.errors import ConfigError
from dmt_proxy.memory.base import MemoryBackend, Scope
from dmt_proxy.memory.circuit import CircuitBreaker, CircuitState, PoolReconnectWarnings
from dmt_proxy.memory.erasure import Erasure, UserExport, erase_user, export_user
from dmt_proxy.memory.registry import StoreDatabase, backend_class, open_policy_backend
from dmt_proxy.memory.review import ReviewService
from dmt_proxy.memory.review_dataset import LabelledReview, labelled_reviews
from dmt_proxy.memory.service import DurableMemoryService
from dmt_proxy.memory.write.backfill import DEFAULT_STATUSES, BackfillReport, backfill
from dmt_proxy.memory.write.outbox import Outbox, SqliteOutbox
from dmt_proxy.memory.write.trail import SqliteTrail, Trail
from dmt_proxy.memory.write.worker import OutboxWorker
from dmt_proxy.metrics import Metrics
from dmt_proxy.policy import Policy
from dmt_proxy.settings import Settings
from dmt_proxy.tags import AuditStatus
from dmt_proxy.upstream.base import ChatModel
from dmt_proxy.upstream.factory import Upstream, open_upstream
from dmt_proxy.upstream.models import ModelRegistry

PROBE_SCOPE = Scope(user="dmt-circuit-probe")
"""The scope the circuit's probe lists: a read of one indexed key, whatever the backend."""


DEFAULT_PREFIX = "dmt_"
"""Table prefix of the outbox and trail in a database the memory store does not use."""


def store_database(
    settings: Settings, policy: Policy, backend: type[Any] | None = None
) -> StoreDatabase | None:
    """The PostgreSQL database the policy's backend keeps its store in, as the backend
    declares (``BackendPlugin.store_database``); ``None`` for a store kept elsewhere.

    ``backend`` is the backend's class when it is at hand (an opened or injected store);
    by default the registered one, imported.
    """
    cls = backend if backend is not None else backend_class(policy.memory.backend)
    declare = getattr(cls, "store_database", None)  # a test's own backend may declare none
    if not callable(declare):
        return None
    found: StoreDatabase | None = declare(policy.memory.options, settings.database_url)
    return found


def outbox_kind(
    settings: Settings, database: StoreDatabase | None
) -> Literal["sqlite", "postgres"]:
    """The outbox ``settings.outbox`` names; ``auto``: PostgreSQL when the store is there."""
    if settings.outbox != "auto":
        return settings.outbox
    return "postgres" if database is not None else "sqlite"


def database_url(settings: Settings, database: StoreDatabase | None) -> str | None:
    """The PostgreSQL URL: the store's own database, else ``DMT_DATABASE_URL``."""
    return database.url if database is not None else settings.database_url


def _prefix(database: StoreDatabase | None) -> str:
    """The table prefix of the outbox and trail: the store's, when they share its database."""
    return database.prefix if database is not None else DEFAULT_PREFIX


async def build_outbox(
    settings: Settings,
    policy: Policy,
    metrics: Metrics | None = None,
    *,
    circuit: CircuitBreaker | None = None,
    backend: type[Any] | None = None,
) -> Outbox:
    """The outbox ``settings.outbox`` names (``auto``: PostgreSQL when the backend keeps its
    store there; ``backend`` is its class, default the policy's); a PostgreSQL one gets a
    local spool for writes made while its database is down (and while ``circuit`` is open)."""
    database = store_database(settings, policy, backend)
    if outbox_kind(settings, database) == "sqlite":
        if not settings.worker:
            raise ConfigError(
                "DMT_WORKER=off (--no-worker) needs the shared PostgreSQL outbox "
                "(DMT_OUTBOX=postgres): nothing else drains this process's SQLite outbox"
            )
        return SqliteOutbox(settings.state_dir / "outbox.sqlite3")
    url = database_url(settings, database)
    if not url:
        raise ConfigError("the PostgreSQL outbox needs a database: set DMT_DATABASE_URL")
    from dmt_proxy.memory.write.pg_outbox import PostgresOutbox
    from dmt_proxy.memory.write.spool import SpooledOutbox

    primary = await PostgresOutbox.open(url, prefix=_prefix(database),
                                        lease_s=settings.outbox_lease_s)  # fmt: skip
    return SpooledOutbox.open(primary, settings.state_dir, metrics=metrics, circuit=circuit)


def store_circuit(
    backend: MemoryBackend,
    metrics: Metrics,
    outbox: Callable[[], Outbox | None],
    *,
    database_url: str | None = None,
) -> CircuitBreaker:
    """The store's circuit breaker, exported as ``dmt_store_circuit_state``; ``outbox``
    gives the outbox once it exists (the probe checks a shared one too). With a
    ``database_url``, a slow call checks at once whether a new connection is refused."""
    from dmt_proxy.memory.write.spool import SpooledOutbox

    async def reachable() -> None:
        import psycopg

        assert database_url is not None
        conn = await psycopg.AsyncConnection.connect(database_url, connect_timeout=2)
        await conn.close()

    async def probe() -> None:
        await backend.list(PROBE_SCOPE, limit=1)
        shared = outbox()
        if isinstance(shared, SpooledOutbox):
            await shared.primary.stats()

    def export(old: CircuitState, new: CircuitState) -> None:
        metrics.store_circuit_state.set(int(new))
        if new is CircuitState.OPEN and old is CircuitState.CLOSED:
            metrics.store_circuit_opened.inc()

    if database_url is None:  # an in-process store: slow is not down, only errors open it
        return CircuitBreaker("memory store", probe=probe, open_on_timeout=False,
                              on_change=export)  # fmt: skip
    PoolReconnectWarnings.install()  # one pool warning a minute during an outage, not each try
    return CircuitBreaker("memory store", probe=probe, check=reachable, on_change=export)


async def build_memory_service(
    settings: Settings,
    policy: Policy,
    registry: ModelRegistry,
    chat: ChatModel,
    metrics: Metrics,
    *,
    backend: MemoryBackend | None = None,
    auditor: Auditor | None = None,
) -> DurableMemoryService:
    """Build (not start) the memory service. ``backend``/``auditor`` override for tests."""
    name = policy.memory.backend
    if backend is None:
        backend = await open_policy_backend(settings, policy, registry, chat)
    backend_cls = type(backend)  # what the store declares, whether opened here or injected
    database = store_database(settings, policy, backend_cls)
    built: list[Outbox] = []
    uses_database = database is not None or settings.outbox == "postgres"
    circuit = store_circuit(backend, metrics, lambda: built[0] if built else None,
                            database_url=database_url(settings, database) if uses_database else None)  # fmt: skip
    try:
        outbox = await build_outbox(settings, policy, metrics, circuit=circuit,
                                   backend=backend_cls)  # fmt: skip
    except BaseException:
        await backend.close()
        raise
    built.append(outbox)
    try:
        trail = await build_trail(settings, policy, backend=backend_cls)
    except BaseException:
        await outbox.aclose()
        await backend.close()
        raise
    # Normalisation and the first stage wrap any auditor, an injected one included.
    pipeline = build_audit_pipeline(policy, registry, chat, metrics=metrics, auditor=auditor)
    worker = OutboxWorker(
        outbox=outbox,
        backend=backend,
        backend_name=name,
        auditor=pipeline,
        policy=policy.audit,
        metrics=metrics,
        trail=trail,
        policy_label=policy.label,
    )
    service = DurableMemoryService(backend=backend, backend_name=name, outbox=outbox,
                                   worker=worker, policy=policy, metrics=metrics,
                                   run_worker=settings.worker, trail=trail,
                                   circuit=circuit,
                                   nonce_key=settings.memory_nonce_key)  # fmt: skip
    service.review = ReviewService(backend=backend, outbox=outbox, trail=trail, policy=policy,
                                   auditor=pipeline, instruction=service.instruction,
                                   metrics=metrics)  # fmt: skip
    return service


async def build_trail(
    settings: Settings, policy: Policy, *, backend: type[Any] | None = None
) -> Trail:
    """The review trail beside the outbox: a table in the SQLite outbox file, or in the
    outbox's PostgreSQL database (shared by every proxy, worker and console); ``backend``
    is the store's class, as for ``build_outbox``."""
    database = store_database(settings, policy, backend)
    url = database_url(settings, database)
    if outbox_kind(settings, database) == "sqlite" or not url:
        return SqliteTrail(settings.state_dir / "outbox.sqlite3")
    from dmt_proxy.memory.write.pg_trail import PostgresTrail

    return await PostgresTrail.open(url, prefix=_prefix(database))


@asynccontextmanager
async def _opened_store(
    settings: Settings, policy: Policy, chat: ChatModel | None
) -> AsyncIterator[tuple[Upstream, MemoryBackend]]:
    """The policy's upstream and store, opened directly by a command (``audit-backfill``,
    ``erase``, ``export``); a store that will not open is a ``ConfigError`` that asks
    whether a proxy holds the state directory. Both are closed on the way out."""
    upstream = await open_upstream(settings, policy, chat=chat)
    try:
        try:
            backend = await open_policy_backend(settings, policy, upstream.registry, upstream.chat)
        except ConfigError:
            raise
        except Exception as exc:
            raise ConfigError(
                f"cannot open the {policy.memory.backend} store under {settings.state_dir}: "
                f"{exc}. Is a proxy running on this state directory? Stop it first."
            ) from exc
        try:
            yield upstream, backend
        finally:
            await backend.close()
    finally:
        await upstream.aclose()


async def backfill_store(
    settings: Settings,
    policy: Policy,
    users: Iterable[str] = (),
    *,
    statuses: frozenset[AuditStatus] = DEFAULT_STATUSES,
    chat: ChatModel | None = None,
    progress: Callable[[str], None] = lambda _m: None,
) -> BackfillReport:
    """Backfill the policy's store with the policy's auditor (every user when ``users`` is empty).

    The store is opened directly, so no proxy may run on the same state directory
    (Qdrant's local mode allows one client). ``chat`` replaces the production chat model, as in ``create_app``.
    """
    async with _opened_store(settings, policy, chat) as (upstream, backend):
        chosen = list(users) or await _all_users(backend, policy.memory.backend)
        auditor = build_audit_pipeline(policy, upstream.registry, upstream.chat)
        trail = await build_trail(settings, policy, backend=type(backend))
        try:
            return await backfill(backend, auditor, policy.audit, chosen, statuses=statuses,
                                  progress=progress, trail=trail,
                                  policy_label=policy.label)  # fmt: skip
        finally:
            await trail.aclose()


async def export_reviews(
    settings: Settings, policy: Policy, *, tenant: str | None = None, chat: ChatModel | None = None
) -> list[LabelledReview]:
    """The human verdicts of the policy's store and trail (one tenant's, when named)."""
    upstream = await open_upstream(settings, policy, chat=chat)
    try:
        backend = await open_policy_backend(settings, policy, upstream.registry, upstream.chat)
        try:
            trail = await build_trail(settings, policy, backend=type(backend))
            try:
                return await labelled_reviews(trail, backend, f"{tenant}/" if tenant else None)
            finally:
                await trail.aclose()
        finally:
            await backend.close()
    finally:
        await upstream.aclose()


@asynccontextmanager
async def _stores(
    settings: Settings, policy: Policy, chat: ChatModel | None
) -> AsyncIterator[tuple[MemoryBackend, Outbox, Trail]]:
    """The policy's store, outbox and trail, opened directly (no worker, no audit); as for
    ``backfill_store``, no proxy may run on the same state directory with SQLite or mem0."""
    if policy.memory.backend == "none":
        raise ConfigError("the policy turns memory off (memory.backend: none): nothing is held")
    async with _opened_store(settings, policy, chat) as (_upstream, backend):
        # This process drains nothing: the outbox is opened to read and cancel rows.
        outbox = await build_outbox(settings.model_copy(update={"worker": True}), policy,
                                    backend=type(backend))  # fmt: skip
        try:
            trail = await build_trail(settings, policy, backend=type(backend))
            try:
                yield backend, outbox, trail
            finally:
                await trail.aclose()
        finally:
            await outbox.aclose()


async def erase_stored_user(
    settings: Settings, policy: Policy, user: str, *, full: bool = False,
    chat: ChatModel | None = None,
) -> Erasure:  # fmt: skip
    """Erase ``user`` from the policy's store, outbox and trail (``memory.erasure``)."""
    async with _stores(settings, policy, chat) as (backend, outbox, trail):
        return await erase_user(user, backend=backend, backend_name=policy.memory.backend,
                                outbox=outbox, trail=trail, worker=None, full=full)  # fmt: skip


async def export_stored_user(
    settings: Settings, policy: Policy, user: str, *, chat: ChatModel | None = None
) -> UserExport:
    """Everything the policy's store, outbox and trail hold about ``user``."""
    async with _stores(settings, policy, chat) as (backend, outbox, trail):
        return await export_user(user, backend=backend, outbox=outbox, trail=trail)


async def _all_users(backend: MemoryBackend, name: str) -> list[str]:
    lister = getattr(backend, "users", None)
    if lister is None:
        raise ConfigError(f"the {name} backend cannot list users: pass --user")
    return list(await lister())
