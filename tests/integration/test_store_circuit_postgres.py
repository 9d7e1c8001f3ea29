"""The store's circuit breaker in front of a real, throwaway PostgreSQL outbox behind the spool."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from dmt_proxy.exchange import Exchange
from dmt_proxy.memory.circuit import (
    CircuitBreaker,
)
from dmt_proxy.memory.write.outbox import SqliteOutbox
from dmt_proxy.metrics import Metrics
from dmt_proxy.modes import Mode
from tests.unit.test_store_circuit import ALICE, Probe


@pytest.mark.postgres
async def test_an_open_circuit_spools_writes_without_trying_the_database(
    pg_dsn: str, tmp_path: Path
) -> None:
    from dmt_proxy.memory.write.pg_outbox import PostgresOutbox
    from dmt_proxy.memory.write.spool import SpooledOutbox

    primary = await PostgresOutbox.open(pg_dsn, prefix="circuit_")
    metrics = Metrics()
    probe = Probe()
    circuit = CircuitBreaker("test store", probe=probe, probe_interval_s=3600)
    outbox = SpooledOutbox(primary, SqliteOutbox(tmp_path / "spool.sqlite3"), metrics=metrics,
                           circuit=circuit)  # fmt: skip
    said = functools.partial(Exchange, scope=ALICE, answer="ok", request_id="r", mode=Mode.DMT)
    try:
        await primary.cancel_user("alice")
        first = await outbox.enqueue(said(query="up"))
        circuit.failure(ConnectionRefusedError(), operation="retrieval")
        spooled = await outbox.enqueue(said(query="down"))
        assert [i.id for i in await primary.pending("alice")] == [first]
        assert [i.id for i in await outbox.spool.pending("alice")] == [spooled]
        assert metrics.outbox_spooled._value.get() == 1
        # Not a failed call to the database: none was made.
        assert metrics.database_unavailable.labels("outbox", "enqueue")._value.get() == 0
    finally:
        await circuit.aclose()
        await primary.cancel_user("alice")
        await outbox.aclose()
