"""A local durable spool in front of the shared PostgreSQL outbox, for when the database is down.

An enqueue cannot commit to a database that is unreachable, yet the client must get
its answer and its write must not be lost. ``SpooledOutbox`` tries the PostgreSQL
outbox first (for at most ``enqueue_timeout_s``, and not at all while the store's
circuit, ``dmt_proxy.memory.circuit``, is open); when that fails for a lost or
refused connection it commits the row to a SQLite outbox under the proxy's state
directory (``spool.sqlite3``, ``synchronous=FULL``) and acknowledges. A background
task forwards spooled rows to PostgreSQL, oldest first, retrying with capped
exponential backoff until the database answers again (with a circuit: the moment
its probe closes it); a forwarded row is deleted
from the spool only after PostgreSQL committed it. While the spool holds rows, new
writes go straight to it (no per-request wait on a dead database) until the
forwarder has emptied it.

Exactly-once: the memory id is chosen before the first attempt and kept by the
spool, and PostgreSQL inserts are ``ON CONFLICT (id) DO NOTHING``; so a row that
did commit although the client side timed out, or a row forwarded again after a
crash between the PostgreSQL commit and the spool delete, is not queued twice
while it is still pending. In the rarer case that the first copy was already
stored and deleted before the second arrives, the worker stores the same id
again (the backend write is idempotent on it: still one memory) and audits it
a second time.

A spooled row keeps what the write's ``Exchange`` carries (its origin included: the
spool is a ``SqliteOutbox``), and the forward copies it whole.

The spool belongs to one proxy: it survives a crashed or restarted proxy only if
its state directory does (a persistent volume in Kubernetes). An erasure reaches the
spool of the proxy it runs in (``cancel_user``, ``compact``), not another proxy's. The worker side
(``due``, ``done``...) goes to PostgreSQL only: workers never see spooled rows
until they are forwarded.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from dmt_proxy.exchange import Exchange
from dmt_proxy.memory.circuit import CircuitBreaker, CircuitOpenError, describe
from dmt_proxy.memory.write.outbox import OutboxItem, SqliteOutbox
from dmt_proxy.memory.write.pg_outbox import PostgresOutbox
from dmt_proxy.metrics import Metrics

log = logging.getLogger(__name__)

T = TypeVar("T")


def connection_lost(exc: BaseException) -> bool:
    """Whether ``exc`` means the database could not be reached (not a bug or a bad row)."""
    import psycopg

    return isinstance(exc, (psycopg.OperationalError, TimeoutError, OSError))


class SpooledOutbox:
    """Implements ``Outbox``: the PostgreSQL outbox, with a local spool for enqueues
    that cannot reach it (module docstring)."""

    def __init__(
        self,
        primary: PostgresOutbox,
        spool: SqliteOutbox,
        *,
        metrics: Metrics | None = None,
        enqueue_timeout_s: float = 2.0,
        forward_backoff_s: tuple[float, float] = (0.25, 10.0),
        circuit: CircuitBreaker | None = None,
    ) -> None:
        self.primary = primary
        self.spool = spool
        self._metrics = metrics
        self._enqueue_timeout_s = enqueue_timeout_s
        self._backoff = forward_backoff_s
        self._circuit = circuit
        """The store's circuit: while it is open, enqueues spool without trying PostgreSQL."""
        self._spooling = False
        """Set after an enqueue failed; cleared by the forwarder once the spool is empty."""
        self._kick = asyncio.Event()
        self._forwarder: asyncio.Task[None] | None = None

    @classmethod
    def open(
        cls,
        primary: PostgresOutbox,
        state_dir: Path,
        *,
        metrics: Metrics | None = None,
        circuit: CircuitBreaker | None = None,
    ) -> SpooledOutbox:
        """Open ``state_dir/spool.sqlite3`` and start forwarding what it already holds."""
        outbox = cls(primary, SqliteOutbox(state_dir / "spool.sqlite3"), metrics=metrics,
                     circuit=circuit)  # fmt: skip
        outbox._forwarder = asyncio.create_task(outbox._forward_loop(), name="dmt-spool-forward")
        return outbox

    def _count_lost(self, where: str) -> None:
        if self._metrics is not None:
            self._metrics.database_unavailable.labels("outbox", where).inc()

    async def _on_primary(self, where: str, call: Callable[[], Awaitable[T]]) -> T:
        try:
            return await call()
        except Exception as exc:
            if connection_lost(exc):
                self._count_lost(where)
            raise

    # -- producer side -------------------------------------------------------

    async def enqueue(self, exchange: Exchange, *, item_id: str | None = None) -> str:
        """Commit ``exchange`` to PostgreSQL, or to the local spool when it is unreachable."""
        item_id = item_id or f"mem_{uuid.uuid4().hex}"
        if not self._spooling and (self._circuit is None or self._circuit.allow()):
            insert = self.primary.enqueue(exchange, item_id=item_id)
            try:
                if self._circuit is None:
                    return await asyncio.wait_for(insert, timeout=self._enqueue_timeout_s)
                # Gives up as soon as the circuit opens (the insert may still have committed:
                # the spooled copy keeps its id, so it is not queued twice).
                return await self._circuit.run(
                    insert, timeout_s=self._enqueue_timeout_s, operation="enqueue"
                )
            except Exception as exc:
                if not connection_lost(exc):
                    raise
                if not isinstance(exc, CircuitOpenError):  # the circuit has logged its cause
                    self._count_lost("enqueue")
                    log.warning("outbox database unreachable (%s); spooling writes locally",
                                describe(exc))  # fmt: skip
                self._spooling = True
        await self.spool.enqueue(exchange, item_id=item_id)
        if self._metrics is not None:
            self._metrics.outbox_spooled.inc()
        self._kick.set()
        return item_id

    async def _forward_once(self) -> int:
        """Move every spooled row to PostgreSQL, oldest first; how many were moved."""
        moved = 0
        for item in sorted(await self.spool.pending(), key=lambda i: (i.created_at, i.id)):
            await self._on_primary("forward", functools.partial(self.primary.forward, item))
            await self.spool.done(item.id)  # after the commit there: a crash in between re-sends
            moved += 1
            if self._metrics is not None:
                self._metrics.outbox_spool_forwarded.inc()
        return moved

    async def _forward_loop(self) -> None:
        failures = 0
        while True:
            try:
                moved = await self._forward_once()
                depth, _ = await self.spool.stats()
                if depth == 0:
                    self._spooling = False
                if self._metrics is not None:
                    self._metrics.outbox_spool_depth.set(depth)
                if moved or failures:
                    log.info("forwarded %d spooled write(s) to the outbox database%s", moved,
                             f" after {failures} failed tries" if failures else "")  # fmt: skip
                failures = 0
                delay = 1.0
            except Exception as exc:  # the database may stay down for a long time: keep trying
                failures += 1
                base, cap = self._backoff
                delay = min(cap, base * 2 ** min(failures - 1, 20))
                # One warning per outage; the retries that follow are routine.
                log.log(logging.WARNING if failures == 1 else logging.DEBUG,
                        "spool forward failed (%s); retrying with backoff (%d in a row, next "
                        "in %.1fs)", describe(exc), failures, delay)  # fmt: skip
            self._kick.clear()
            if failures and self._circuit is not None and not self._circuit.allow():
                # The circuit's probe watches the database: forward the moment it closes.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._backoff[1]):
                        await self._circuit.wait_closed()
                continue
            if failures:  # the database is down: wait out the backoff
                await asyncio.sleep(delay)
                continue
            with contextlib.suppress(TimeoutError):  # healthy: a new spooled write wakes it
                async with asyncio.timeout(delay):
                    await self._kick.wait()

    async def flush(self) -> int:
        """Forward the spool now (tests, shutdown); how many rows moved. Raises if unreachable."""
        moved = await self._forward_once()
        if (await self.spool.stats())[0] == 0:
            self._spooling = False
        return moved

    # -- worker side: PostgreSQL only ----------------------------------------

    async def due(self, limit: int = 16) -> list[OutboxItem]:
        """Rows claimed from the PostgreSQL outbox for this worker."""
        return await self._on_primary("worker", lambda: self.primary.due(limit))

    async def mark_stored(self, item_id: str) -> bool:
        """Remember that the backend has the record; False when the row is gone."""
        return await self._on_primary("worker", lambda: self.primary.mark_stored(item_id))

    async def save_verdict(self, item_id: str, verdict: dict[str, Any]) -> bool:
        """Keep an auditor verdict on the row; False when the row is gone."""
        return await self._on_primary("worker",
                                      lambda: self.primary.save_verdict(item_id, verdict))  # fmt: skip

    async def retry_later(self, item_id: str, error: str, delay_s: float) -> None:
        """Record a failed attempt and release the row."""
        await self._on_primary("worker",
                               lambda: self.primary.retry_later(item_id, error, delay_s))  # fmt: skip

    async def done(self, item_id: str) -> None:
        """The write is complete: forget it."""
        await self._on_primary("worker", lambda: self.primary.done(item_id))

    # -- admin side: both ----------------------------------------------------

    async def cancel(self, item_id: str) -> bool:
        """Drop a pending write, spooled or shared."""
        spooled = await self.spool.cancel(item_id)
        return await self._on_primary("admin", lambda: self.primary.cancel(item_id)) or spooled

    async def cancel_user(self, user: str) -> int:
        """Drop every pending write of ``user``, spooled or shared; how many."""
        spooled = await self.spool.cancel_user(user)
        return spooled + await self._on_primary("admin", lambda: self.primary.cancel_user(user))

    async def stats(self) -> tuple[int, float]:
        """Depth and oldest age over the shared outbox and this proxy's spool."""
        depth, age = await self._on_primary("admin", self.primary.stats)
        spooled, spool_age = await self.spool.stats()
        return depth + spooled, max(age, spool_age)

    async def pending(self, user: str | None = None) -> list[OutboxItem]:
        """Pending rows of the shared outbox and of this proxy's spool, oldest first."""
        rows = await self._on_primary("admin", lambda: self.primary.pending(user))
        known = {r.id for r in rows}
        rows += [r for r in await self.spool.pending(user) if r.id not in known]
        return sorted(rows, key=lambda r: (r.created_at, r.id))

    async def compact(self, *, skip: Iterable[str] = (), full: bool = False) -> list[str]:
        """Compact this proxy's spool file and ``VACUUM`` the shared table (as
        ``Outbox.compact``)."""
        spooled = await self.spool.compact(skip=skip)
        shared = await self._on_primary("admin",
                                        lambda: self.primary.compact(skip=skip, full=full))  # fmt: skip
        return spooled + shared

    async def aclose(self) -> None:
        """Try a last forward, stop the forwarder, close both outboxes."""
        if self._forwarder is not None:
            self._forwarder.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._forwarder
            self._forwarder = None
        started = time.monotonic()
        with contextlib.suppress(Exception):  # what stays in the spool is forwarded next start
            await asyncio.wait_for(self.flush(), timeout=self._enqueue_timeout_s)
        log.debug("spool closed in %.2fs", time.monotonic() - started)
        await self.spool.aclose()
        await self.primary.aclose()
