"""The local spool in front of the PostgreSQL outbox: exactly-once forwarding by memory id.

A real PostgreSQL server (``dmt_proxy/testing/pg.py``); the outage itself (a server
stopped with ``pg_ctl`` mid-load) is ``tests/reliability/test_rel_db_down.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dmt_proxy.exchange import Exchange
from dmt_proxy.memory.base import Scope
from dmt_proxy.memory.write.outbox import SqliteOutbox
from dmt_proxy.memory.write.pg_outbox import PostgresOutbox
from dmt_proxy.memory.write.spool import SpooledOutbox
from dmt_proxy.metrics import Metrics
from dmt_proxy.modes import Mode

pytestmark = pytest.mark.postgres

ALICE = Scope(user="alice")


def said(query: str) -> Exchange:
    return Exchange(scope=ALICE, query=query, answer="ok", request_id="r", mode=Mode.DMT)


async def test_a_spooled_write_is_forwarded_once_even_if_it_already_committed(
    pg_dsn: str, tmp_path: Path
) -> None:
    primary = await PostgresOutbox.open(pg_dsn)
    metrics = Metrics()
    outbox = SpooledOutbox(primary, SqliteOutbox(tmp_path / "spool.sqlite3"), metrics=metrics)
    try:
        # The insert committed although the proxy gave up waiting, and it spooled the row too.
        await primary.enqueue(said("twice"), item_id="mem_twice")
        await outbox.spool.enqueue(said("twice"), item_id="mem_twice")
        await outbox.spool.enqueue(said("spooled"), item_id="mem_spooled")
        listed = await outbox.pending("alice")
        assert [i.id for i in listed] == ["mem_twice", "mem_spooled"]  # listed once each
        assert (await outbox.stats())[0] == 3  # two in the spool, one shared

        assert await outbox.flush() == 2
        assert await outbox.flush() == 0  # forwarding again is a no-op
        assert sorted(i.id for i in await primary.pending()) == ["mem_spooled", "mem_twice"]
        assert (await outbox.spool.stats())[0] == 0
        assert metrics.outbox_spool_forwarded._value.get() == 2

        # Forwarded rows keep their creation time and are claimed like any other.
        assert {i.id for i in await outbox.due(10)} == {"mem_spooled", "mem_twice"}
    finally:
        await outbox.aclose()
