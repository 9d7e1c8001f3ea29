"""The outbox row format: an ``Exchange`` goes in typed, is stored as the same text columns
rows have always had, and comes back typed; a row written by an earlier release reads.

The real SQLite outbox; the PostgreSQL table is checked in tests/integration/test_pg_outbox.py
and older layouts in tests/reliability/test_rel_upgrade.py.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from dmt_proxy.exchange import Exchange
from dmt_proxy.memory.base import Scope
from dmt_proxy.memory.write.outbox import ROW_SCHEMA_VERSION, SqliteOutbox
from dmt_proxy.modes import Mode
from dmt_proxy.tags import AuditStatus

SCOPE = Scope(user="alice", agent="planner", session="s1")


async def test_an_exchange_is_stored_as_text_columns_and_read_back_typed(tmp_path: Path) -> None:
    path = tmp_path / "outbox.sqlite3"
    outbox = SqliteOutbox(path)
    exchange = Exchange(scope=SCOPE, query="q", answer="a", request_id="r1", mode=Mode.DMT_TAGS)
    memory_id = await outbox.enqueue(exchange)
    [item] = await outbox.pending()
    assert item.id == memory_id and item.exchange == exchange
    assert item.exchange.mode is Mode.DMT_TAGS
    await outbox.aclose()
    with sqlite3.connect(path) as db:
        row = db.execute(
            "SELECT user_id, agent_id, session_id, query, answer, request_id, mode, stored,"
            " verdict, schema_version, origin FROM outbox"
        ).fetchone()
    assert row[:-1] == ("alice", "planner", "s1", "q", "a", "r1", "dmt-tags", 0, None,
                        ROW_SCHEMA_VERSION)  # fmt: skip
    # The origin is JSON text (an exchange that names none is a chat write, nothing known).
    assert json.loads(row[-1]) == {"channel": "chat", "tenant": None, "key_id": None,
                                   "model": None}  # fmt: skip


async def test_a_row_written_before_the_exchange_travelled_whole_still_reads(
    tmp_path: Path,
) -> None:
    # The row as the release before wrote it (keyword arguments, ``mode.value``): same table.
    path = tmp_path / "outbox.sqlite3"
    SqliteOutbox(path).close()
    verdict = {"bias_detected": False, "score": 0.1}
    with sqlite3.connect(path) as db:
        db.execute(
            "INSERT INTO outbox (id, user_id, agent_id, session_id, query, answer, request_id,"
            " mode, created_at, attempts, next_attempt_at, last_error, stored, verdict,"
            " schema_version) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            ("mem_old", "bob", None, None, "Old question?", "Old answer.", "admin", "ssp+dmt",
             1_700_000_000.0, 2, 1_700_000_000.0, "auditor: timeout", 1, json.dumps(verdict), 2),
        )  # fmt: skip
    outbox = SqliteOutbox(path)
    [item] = await outbox.due()
    # Written before origins were recorded: its origin is unknown, not guessed.
    assert item.exchange == Exchange(scope=Scope(user="bob"), query="Old question?",
                                     answer="Old answer.", request_id="admin",
                                     mode=Mode.SSP_DMT, origin=None)  # fmt: skip
    assert (item.attempts, item.stored, item.verdict) == (2, True, verdict)
    assert item.last_error == "auditor: timeout" and item.schema_version == 2
    record = item.record(AuditStatus.PENDING)
    assert record.metadata == {"request_id": "admin", "mode": "ssp+dmt"}
    assert record.provenance is None
    assert record.text == "User: Old question?\nAssistant: Old answer."
    await outbox.aclose()


async def test_a_row_this_release_cannot_read_does_not_stop_the_others(tmp_path: Path) -> None:
    # A newer release may write a mode this one does not know (a rolling upgrade on a shared
    # outbox): that row is left in the table and every other row is still handed out.
    path = tmp_path / "outbox.sqlite3"
    outbox = SqliteOutbox(path)
    kept = await outbox.enqueue(Exchange(scope=SCOPE, query="q", answer="a", request_id="r1",
                                         mode=Mode.DMT))  # fmt: skip
    newer = await outbox.enqueue(Exchange(scope=SCOPE, query="q2", answer="a2",
                                          request_id="r2", mode=Mode.DMT))  # fmt: skip
    await outbox.aclose()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE outbox SET mode = 'dmt-v9' WHERE id = ?", (newer,))
    outbox = SqliteOutbox(path)
    assert [i.id for i in await outbox.due()] == [kept]
    await outbox.aclose()
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT COUNT(*) FROM outbox").fetchone() == (2,)
