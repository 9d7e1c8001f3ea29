"""A circuit breaker around the memory store: fail fast while its database is down.

Without it, every chat request made during a database outage waited out the full
retrieval timeout (and every write the enqueue timeout) before answering without
memory; a 16 s outage let through a fraction of the usual requests. With it the
first request that meets a refused, lost or timed-out connection opens the
circuit; while it is open, retrieval is skipped at once (``x-dmt-memory:
unavailable (store circuit open)``) and writes go straight to the local spool.

States (the value of ``dmt_store_circuit_state``)::

    CLOSED (0) ──outage error──▶ OPEN (1) ──probe interval──▶ HALF_OPEN (2)
        ▲                          ▲                               │
        │                          └────────── probe failed ───────┤
        └───────────────────────── probe succeeded ────────────────┘

A refused connection is not always seen by the caller: a connection pool hides it
and makes the caller wait for a connection until its own timeout. So ``run`` does
not wait for that: a call that has not answered after ``suspect_after_s`` starts a
direct reachability ``check`` (a new connection to the database, refused within
milliseconds when the server is down; at most one at a time, and at most one per
``probe_interval_s``); if it fails for an outage the circuit opens, and every call
waiting in ``run`` stops at once with ``CircuitOpenError``.

Only a background probe moves the circuit out of ``OPEN``: every
``probe_interval_s`` it goes ``HALF_OPEN`` and runs ``probe`` (one cheap call to
the store, under ``probe_timeout_s``); success closes it, failure opens it
again. Requests never act as the trial, so none of them waits on a dead database
while the circuit is not closed.

What opens it (``is_outage``): a connection refused, lost or timed out, a pool
that hands out no connection in time (``PoolTimeout``), a timeout of the call
itself. A bad query, a constraint violation or a bug does not: the database
answered, and skipping it would hide the error.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from enum import IntEnum
from typing import Any, TypeVar

from dmt_proxy.memory.base import MemoryStoreError

log = logging.getLogger(__name__)

T = TypeVar("T")


class CircuitOpenError(MemoryStoreError, ConnectionError):
    """The store was not called, or was given up on, because its circuit is open.

    A ``ConnectionError`` too: code that treats an unreachable store as an outage
    (``is_outage``, the spool) treats an open circuit the same way."""


class CircuitState(IntEnum):
    """Where the circuit stands; the value is what ``dmt_store_circuit_state`` exports."""

    CLOSED = 0
    """The store is used normally."""
    OPEN = 1
    """The store is skipped: retrieval answers without memory, writes are spooled."""
    HALF_OPEN = 2
    """A probe is checking the store; requests still skip it until the probe succeeds."""


def _connection_classes() -> tuple[type[BaseException], ...]:
    classes: list[type[BaseException]] = [ConnectionError, TimeoutError]
    try:  # optional: only the postgres extra installs psycopg
        import psycopg

        # OperationalError covers refused and lost connections and the pool's PoolTimeout
        # (a subclass); ProgrammingError, IntegrityError and DataError are not outages.
        classes.append(psycopg.OperationalError)
    except ImportError:
        pass
    try:  # remote stores reached over HTTP (a Qdrant or Letta server)
        import httpx

        classes.append(httpx.TransportError)
    except ImportError:
        pass
    return tuple(classes)


def is_outage(exc: BaseException) -> bool:
    """Whether ``exc`` (or an error it wraps) means the store could not be reached in time."""
    classes = _connection_classes()
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, classes):
            return True
        seen.add(id(current))
        current = current.__cause__  # `raise ... from exc`: a wrapped store error
    return False


def describe(exc: BaseException) -> str:
    """A one-line reason for a log line: the error's type and message, never empty."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    name = type(exc).__name__
    if not text and isinstance(exc, TimeoutError):
        text = "no answer in time"
    return f"{name}: {text}" if text else name


class PoolReconnectWarnings(logging.Filter):
    """Lets one of psycopg's pool reconnection warnings through per pool and message a
    minute (install on the ``psycopg.pool`` logger: ``install``).

    During an outage each pool warns at every failed reconnection attempt (about one a
    second at first, per pool and per process); the circuit has already said, once and
    with the cause, that the database is down.
    """

    PREFIXES = ("error connecting in", "reconnection attempt in pool")

    def __init__(self, every_s: float = 60.0, clock: Callable[[], float] = time.monotonic):
        super().__init__()
        self.every_s = every_s
        self._clock = clock
        self._last: dict[str, float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        """False for a repeat of a reconnection warning within ``every_s``."""
        message = record.msg if isinstance(record.msg, str) else ""
        prefix = next((p for p in self.PREFIXES if message.startswith(p)), None)
        if prefix is None:
            return True
        pool = record.args[0] if isinstance(record.args, tuple) and record.args else ""
        key, now = f"{prefix} {pool}", self._clock()
        if now - self._last.get(key, float("-inf")) < self.every_s:
            return False
        self._last[key] = now
        return True

    @classmethod
    def install(cls) -> None:
        """Add the filter to the ``psycopg.pool`` logger, once per process."""
        pool_log = logging.getLogger("psycopg.pool")
        if not any(isinstance(f, cls) for f in pool_log.filters):
            pool_log.addFilter(cls())


class CircuitBreaker:
    """The store's circuit (module docstring). One per process, shared by retrieval and
    the enqueue; ``clock`` and ``sleep`` are injectable for tests."""

    def __init__(
        self,
        name: str,
        *,
        probe: Callable[[], Awaitable[object]],
        check: Callable[[], Awaitable[object]] | None = None,
        suspect_after_s: float = 0.25,
        open_on_timeout: bool = True,
        probe_interval_s: float = 1.0,
        probe_timeout_s: float = 2.0,
        on_change: Callable[[CircuitState, CircuitState], None] = lambda _old, _new: None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.name = name
        self._probe = probe
        self._check = check
        self.suspect_after_s = suspect_after_s
        self.open_on_timeout = open_on_timeout
        """Whether a call ``run`` gives up on after its timeout opens the circuit (a store
        behind a connection: yes; an in-process store that is merely slow: no)."""
        self._checking: asyncio.Task[None] | None = None
        self._checked_at = float("-inf")
        self._opened_event = asyncio.Event()
        self.probe_interval_s = probe_interval_s
        self.probe_timeout_s = probe_timeout_s
        self._on_change = on_change
        self._clock = clock
        self._sleep = sleep
        self._state = CircuitState.CLOSED
        self._opened_at: float | None = None
        self._prober: asyncio.Task[None] | None = None
        self._closed = asyncio.Event()
        self._closed.set()
        self.opened = 0
        """How often the circuit opened (since start)."""
        on_change(self._state, self._state)

    @property
    def state(self) -> CircuitState:
        """The current state."""
        return self._state

    def allow(self) -> bool:
        """Whether a request may use the store now (only while the circuit is closed)."""
        return self._state is CircuitState.CLOSED

    def _set(self, state: CircuitState) -> None:
        if state is not self._state:
            old, self._state = self._state, state
            self._on_change(old, state)
        if state is CircuitState.CLOSED:
            self._closed.set()
            self._opened_event.clear()
        else:
            self._closed.clear()
            self._opened_event.set()

    def failure(self, exc: BaseException, *, operation: str) -> bool:
        """Report a failed store call; opens the circuit when ``exc`` is an outage.

        Returns whether it was one. Needs a running event loop (the probe is a task).
        """
        if not is_outage(exc):
            return False
        if self._state is CircuitState.CLOSED:
            self.opened += 1
            self._opened_at = self._clock()
            self._set(CircuitState.OPEN)
            log.warning(
                "%s unreachable (%s during %s): circuit open; requests skip retrieval and "
                "spool their writes until a probe reaches it (every %.1fs)",
                self.name, describe(exc), operation, self.probe_interval_s,
            )  # fmt: skip
            if self._prober is None or self._prober.done():
                self._prober = asyncio.get_running_loop().create_task(
                    self._probe_until_closed(), name=f"dmt-circuit-probe-{self.name}"
                )
        return True

    async def run(self, call: Awaitable[T], *, timeout_s: float, operation: str) -> T:
        """Await ``call`` unless the circuit is open; give up after ``timeout_s`` or as soon
        as the circuit opens (``CircuitOpenError``). Failures are reported (``failure``)."""
        if not self.allow():
            if asyncio.iscoroutine(call):
                call.close()  # never started: no "never awaited" warning
            raise CircuitOpenError(f"{self.name} circuit open")
        task = asyncio.ensure_future(call)
        opened = asyncio.ensure_future(self._opened_event.wait())
        watch = asyncio.ensure_future(self._suspect(task, operation))
        try:
            done, _ = await asyncio.wait(
                {task, opened}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
            )
            if task in done:
                try:
                    return task.result()
                except Exception as exc:
                    self.failure(exc, operation=operation)
                    raise
            task.cancel()
            if opened in done:
                raise CircuitOpenError(f"{self.name} circuit open")
            timeout = TimeoutError(f"{operation} gave no answer in {timeout_s:g}s")
            if self.open_on_timeout:
                self.failure(timeout, operation=operation)
            raise timeout
        finally:
            opened.cancel()
            watch.cancel()

    async def _suspect(self, task: asyncio.Future[Any], operation: str) -> None:
        """Once ``task`` is slow, check whether the store is reachable at all."""
        if self._check is None:
            return
        await asyncio.sleep(self.suspect_after_s)
        if task.done() or not self.allow():
            return
        if self._checking is None or self._checking.done():
            if self._clock() - self._checked_at < self.probe_interval_s:
                return  # checked a moment ago and it answered: the store is just slow
            self._checked_at = self._clock()
            self._checking = asyncio.ensure_future(self._check_once(operation))
        await asyncio.shield(self._checking)

    async def _check_once(self, operation: str) -> None:
        assert self._check is not None
        try:
            await asyncio.wait_for(self._check(), timeout=self.probe_timeout_s)
        except Exception as exc:
            self.failure(exc, operation=f"{operation} (reachability check)")

    async def probe_once(self) -> bool:
        """One half-open trial: run the probe; close the circuit on success, else reopen it."""
        self._set(CircuitState.HALF_OPEN)
        try:
            await asyncio.wait_for(self._probe(), timeout=self.probe_timeout_s)
        except Exception as exc:
            if not is_outage(exc):  # the store answered, with an error: it is reachable
                log.warning("%s probe answered with an error (%s); closing the circuit",
                            self.name, describe(exc))  # fmt: skip
            else:
                self._set(CircuitState.OPEN)
                log.debug("%s probe failed: %s", self.name, describe(exc))
                return False
        down_s = self._clock() - self._opened_at if self._opened_at is not None else 0.0
        self._set(CircuitState.CLOSED)
        log.warning("%s reachable again after %.1fs: circuit closed", self.name, down_s)
        return True

    async def _probe_until_closed(self) -> None:
        while self._state is not CircuitState.CLOSED:
            await self._sleep(self.probe_interval_s)
            if await self.probe_once():
                return

    async def wait_closed(self) -> None:
        """Return once the circuit is closed (at once if it is)."""
        await self._closed.wait()

    async def aclose(self) -> None:
        """Stop the probe (the process is shutting down)."""
        if self._checking is not None:
            self._checking.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._checking
        if self._prober is not None:
            self._prober.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._prober
            self._prober = None
