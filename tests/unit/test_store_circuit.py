"""The store's circuit breaker: which errors open it, how its probe closes it, and what
retrieval and the spooled enqueue do while it is open.

The state machine runs on an injected sleep, so no test waits on a clock. Retrieval
runs on the shipped in-memory backend; the enqueue on the real PostgreSQL outbox
(tests/integration/test_store_circuit_postgres.py) behind a spool. The database stopped for real, mid-load, is
``tests/reliability/test_rel_db_down.py``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import psycopg
import psycopg_pool
import pytest

from dmt_proxy.exchange import MemoryAccess, RequestContext
from dmt_proxy.memory.assembly import store_circuit
from dmt_proxy.memory.backends.in_memory import InMemoryBackend
from dmt_proxy.memory.base import MemoryStoreError, Scope
from dmt_proxy.memory.circuit import (
    CircuitBreaker,
    CircuitOpenError,
    CircuitState,
    PoolReconnectWarnings,
    describe,
    is_outage,
)
from dmt_proxy.memory.service import CIRCUIT_OPEN, DurableMemoryService
from dmt_proxy.memory.write.outbox import SqliteOutbox
from dmt_proxy.memory.write.worker import OutboxWorker
from dmt_proxy.metrics import Metrics
from dmt_proxy.policy import Mode, parse_policy
from dmt_proxy.turns import RetrievalStatus

ALICE = Scope(user="alice")


def wrapped(cause: BaseException) -> MemoryStoreError:
    try:
        raise MemoryStoreError(f"postgres store failed: {cause}") from cause
    except MemoryStoreError as exc:
        return exc


@pytest.mark.parametrize(
    "exc",
    [ConnectionRefusedError(111, "Connection refused"), TimeoutError(),
     psycopg.OperationalError("connection failed: Connection refused"),
     psycopg_pool.PoolTimeout("couldn't get a connection after 5.00 sec"),
     wrapped(psycopg.OperationalError("server closed the connection unexpectedly"))],
    ids=["refused", "timeout", "operational", "pool-timeout", "wrapped"],
)  # fmt: skip
def test_a_refused_lost_or_timed_out_connection_is_an_outage(exc: BaseException) -> None:
    assert is_outage(exc)


@pytest.mark.parametrize(
    "exc",
    [psycopg.errors.UndefinedTable("relation does not exist"),
     psycopg.errors.UniqueViolation("duplicate key"), MemoryStoreError("disk full"),
     ValueError("bug")],
    ids=["bad-query", "constraint", "store-error", "bug"],
)  # fmt: skip
def test_an_error_from_a_reachable_store_is_not_an_outage(exc: BaseException) -> None:
    assert not is_outage(exc)


def test_describe_names_the_cause_even_when_the_error_has_no_message() -> None:
    assert describe(TimeoutError()) == "TimeoutError: no answer in time"
    assert describe(ConnectionRefusedError("refused\nmore")) == "ConnectionRefusedError: refused"
    assert describe(KeyError()) == "KeyError"


class Probe:
    """A probe whose answer the test sets; counts its calls."""

    def __init__(self) -> None:
        self.up = False
        self.calls = 0

    async def __call__(self) -> None:
        self.calls += 1
        if not self.up:
            raise ConnectionRefusedError(111, "Connection refused")


def breaker(probe: Probe, changes: list[tuple[CircuitState, CircuitState]]) -> CircuitBreaker:
    async def no_wait(_s: float) -> None:
        await asyncio.sleep(0)

    return CircuitBreaker("test store", probe=probe, sleep=no_wait,
                          on_change=lambda old, new: changes.append((old, new)))  # fmt: skip


async def test_an_outage_opens_the_circuit_until_a_probe_succeeds() -> None:
    probe, changes = Probe(), []
    circuit = breaker(probe, changes)
    try:
        assert circuit.allow() and circuit.state is CircuitState.CLOSED
        assert not circuit.failure(ValueError("bad row"), operation="enqueue")
        assert circuit.allow(), "an error from a reachable store leaves the circuit closed"

        assert circuit.failure(ConnectionRefusedError(), operation="retrieval")
        assert not circuit.allow() and circuit.state in (CircuitState.OPEN, CircuitState.HALF_OPEN)
        while probe.calls < 3:  # the probe keeps failing: open, half-open, open...
            await asyncio.sleep(0)
        assert not circuit.allow()
        assert circuit.failure(TimeoutError(), operation="enqueue")
        assert circuit.opened == 1, "a failure while open does not open it again"

        probe.up = True
        await asyncio.wait_for(circuit.wait_closed(), timeout=5)
        assert circuit.allow() and circuit.state is CircuitState.CLOSED
    finally:
        await circuit.aclose()
    assert changes[0] == (CircuitState.CLOSED, CircuitState.CLOSED)  # the initial export
    assert changes[1] == (CircuitState.CLOSED, CircuitState.OPEN)
    assert (CircuitState.OPEN, CircuitState.HALF_OPEN) in changes
    assert (CircuitState.HALF_OPEN, CircuitState.OPEN) in changes
    assert changes[-1] == (CircuitState.HALF_OPEN, CircuitState.CLOSED)


async def test_a_probe_answered_with_an_error_closes_the_circuit() -> None:
    async def rejects() -> None:
        raise psycopg.errors.UndefinedTable("relation does not exist")

    circuit = CircuitBreaker("test store", probe=rejects)
    circuit.failure(ConnectionRefusedError(), operation="retrieval")
    assert await circuit.probe_once()
    assert circuit.allow()
    await circuit.aclose()


def service(tmp_path: Path, metrics: Metrics) -> tuple[DurableMemoryService, CircuitBreaker]:
    policy = parse_policy({"version": 1, "mode": "dmt", "memory": {"backend": "memory"}})
    backend = InMemoryBackend()
    outbox = SqliteOutbox(tmp_path / "outbox.sqlite3")
    worker = OutboxWorker(outbox=outbox, backend=backend, backend_name="memory", auditor=None,
                          policy=policy.audit, metrics=metrics)  # fmt: skip
    circuit = store_circuit(backend, metrics, lambda: outbox)
    memory = DurableMemoryService(backend=backend, backend_name="memory", outbox=outbox,
                                  worker=worker, policy=policy, metrics=metrics,
                                  circuit=circuit)  # fmt: skip
    return memory, circuit


async def test_retrieval_skips_the_store_at_once_while_the_circuit_is_open(
    tmp_path: Path,
) -> None:
    metrics = Metrics()
    memory, circuit = service(tmp_path, metrics)
    ctx = RequestContext(request_id="r", mode=Mode.DMT, memory=MemoryAccess.READ_WRITE,
                         scope=ALICE)  # fmt: skip
    try:
        assert (await memory.retrieve(ctx, "hello")).outcome.status is RetrievalStatus.SEARCHED
        assert metrics.store_circuit_state._value.get() == 0
        circuit.failure(ConnectionRefusedError(111, "Connection refused"), operation="retrieval")
        assert metrics.store_circuit_state._value.get() == 1
        assert metrics.store_circuit_opened._value.get() == 1

        started = time.perf_counter()
        skipped = await memory.retrieve(ctx, "hello")
        # At once, without waiting on the store: the bound is under any wait of the circuit's
        # (0.25 s before it checks a slow call, 1 s between probes) yet far above the call
        # itself, which a loaded machine or a garbage collection may stretch by tens of ms.
        assert time.perf_counter() - started < 0.2
        assert skipped.outcome.status is RetrievalStatus.UNAVAILABLE
        assert skipped.outcome.failure == CIRCUIT_OPEN
        assert not skipped.reusable, "a later step of the turn tries the store again"

        # The probe (listing a reserved scope of the in-memory store) succeeds at once.
        await asyncio.wait_for(circuit.wait_closed(), timeout=5)
        assert metrics.store_circuit_state._value.get() == 0
        assert (await memory.retrieve(ctx, "hello")).outcome.status is RetrievalStatus.SEARCHED
    finally:
        await memory.aclose()


async def test_a_slow_call_to_an_unreachable_store_stops_as_soon_as_the_check_fails() -> None:
    """A pool hides a refused connection (the caller just waits): the check finds it."""
    probe = Probe()
    checks: list[float] = []

    async def check() -> None:
        checks.append(time.perf_counter())
        raise ConnectionRefusedError(111, "Connection refused")

    circuit = CircuitBreaker("test store", probe=probe, check=check, suspect_after_s=0.05,
                             probe_interval_s=3600)  # fmt: skip
    try:
        started = time.perf_counter()
        results = await asyncio.gather(
            *(circuit.run(asyncio.sleep(10), timeout_s=5, operation="retrieval") for _ in range(3)),
            return_exceptions=True,
        )
        assert time.perf_counter() - started < 1
        assert all(isinstance(r, CircuitOpenError) for r in results), results
        assert len(checks) == 1, "one check for all the waiting calls"
        assert circuit.state is CircuitState.OPEN
        with pytest.raises(CircuitOpenError):  # not even started while open
            await circuit.run(asyncio.sleep(0), timeout_s=5, operation="enqueue")
    finally:
        await circuit.aclose()


async def test_a_slow_call_to_a_reachable_store_is_waited_for() -> None:
    async def check() -> None:
        return None

    async def slow() -> str:
        await asyncio.sleep(0.2)
        return "answer"

    circuit = CircuitBreaker("test store", probe=Probe(), check=check, suspect_after_s=0.01)
    try:
        assert await circuit.run(slow(), timeout_s=5, operation="retrieval") == "answer"
        assert circuit.allow()
        with pytest.raises(TimeoutError):  # too slow even so: a timeout, which opens it
            await circuit.run(slow(), timeout_s=0.05, operation="retrieval")
        assert not circuit.allow()
    finally:
        await circuit.aclose()


async def test_a_slow_in_process_store_is_not_taken_for_a_down_one(tmp_path: Path) -> None:
    """Without a database (a local store), a timeout answers one request without memory
    and leaves the circuit closed; only a connection error opens it."""

    async def slow() -> None:
        await asyncio.sleep(1)

    circuit = store_circuit(InMemoryBackend(), Metrics(), lambda: None)
    try:
        with pytest.raises(TimeoutError):
            await circuit.run(slow(), timeout_s=0.05, operation="retrieval")
        assert circuit.allow()

        async def refused() -> None:
            raise ConnectionRefusedError(111, "Connection refused")

        with pytest.raises(ConnectionRefusedError):
            await circuit.run(refused(), timeout_s=1, operation="retrieval")
        assert not circuit.allow()
    finally:
        await circuit.aclose()


def test_pool_reconnection_warnings_are_let_through_once_a_minute_per_pool() -> None:
    now = [0.0]
    quiet = PoolReconnectWarnings(clock=lambda: now[0])

    def record(msg: str, *args: object) -> logging.LogRecord:
        return logging.LogRecord("psycopg.pool", logging.WARNING, __file__, 1, msg, args, None)

    refused = "connection failed: Connection refused"
    assert quiet.filter(record("error connecting in %r: %s", "dmt-memory", refused))
    assert not quiet.filter(record("error connecting in %r: %s", "dmt-memory", refused))
    assert quiet.filter(record("error connecting in %r: %s", "dmt-outbox", refused))
    assert quiet.filter(record("discarding broken connection: %s", "conn"))  # others pass
    assert quiet.filter(record("discarding broken connection: %s", "conn"))
    now[0] = 61.0
    assert quiet.filter(record("error connecting in %r: %s", "dmt-memory", refused))
