"""Restart and upgrade: state written by this version is read back, and older state migrates.

The outbox carries its layout version in ``PRAGMA user_version`` and a payload version on
every row; a file from the unversioned layout (before versions existed) is migrated in
place, and a file from a newer release is refused. The in-memory backend's snapshot
carries its own version. The memory backend is the shipped in-memory one (real code).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from dmt_proxy.errors import ConfigError
from dmt_proxy.exchange import Exchange
from dmt_proxy.memory.backends.in_memory import SNAPSHOT_VERSION, InMemoryBackend
from dmt_proxy.memory.base import RECORD_SCHEMA_VERSION, MemoryRecord, Scope
from dmt_proxy.memory.write.outbox import OUTBOX_SCHEMA_VERSION, ROW_SCHEMA_VERSION, SqliteOutbox
from dmt_proxy.memory.write.worker import OutboxWorker, drain
from dmt_proxy.metrics import Metrics
from dmt_proxy.modes import Mode
from dmt_proxy.policy import AuditPolicy
from dmt_proxy.tags import AuditStatus, BiasTag

# The outbox layout exactly as shipped before versioning (f64629a and earlier), verbatim:
# the migration test must open a file that old code really wrote.
LEGACY_V0_DDL = """
CREATE TABLE IF NOT EXISTS outbox (
    id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL,
    agent_id TEXT,
    session_id TEXT,
    query TEXT NOT NULL,
    answer TEXT NOT NULL,
    request_id TEXT NOT NULL,
    mode TEXT NOT NULL,
    created_at REAL NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt_at REAL NOT NULL,
    last_error TEXT,
    stored INTEGER NOT NULL DEFAULT 0,
    verdict TEXT
);
CREATE INDEX IF NOT EXISTS outbox_due ON outbox (next_attempt_at);
"""


def write_legacy_outbox(path: Path) -> None:
    with sqlite3.connect(path) as db:
        db.executescript(LEGACY_V0_DDL)
        rows = [
            ("mem_old_1", "alice", None, None, "Old question one?", "Old answer.", "req_1",
             "off", 1_700_000_000.0, 0, 1_700_000_000.0, None, 0, None),
            ("mem_old_2", "bob", None, None, "Old question two?", "Old answer.", "req_2",
             "dmt", 1_700_000_001.0, 2, 1_700_000_001.0, "auditor: timeout", 1,
             json.dumps({"bias_detected": False, "score": 0.0, "rationale": "fine"})),
        ]  # fmt: skip
        db.executemany("INSERT INTO outbox VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)", rows)
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == 0


async def test_outbox_rows_survive_close_and_reopen(tmp_path: Path) -> None:
    path = tmp_path / "outbox.sqlite3"
    outbox = SqliteOutbox(path)
    assert outbox.found_version == 0  # a new file
    first = await outbox.enqueue(
        Exchange(scope=Scope(user="alice"), query="q1", answer="a1", request_id="r1", mode=Mode.DMT)
    )
    second = await outbox.enqueue(
        Exchange(scope=Scope(user="bob"), query="q2", answer="a2", request_id="r2", mode=Mode.OFF)
    )
    await outbox.mark_stored(first)
    await outbox.save_verdict(first, {"bias_detected": False, "score": 0.1})
    await outbox.retry_later(second, "backend write: disk full", 0.0)
    await outbox.aclose()

    reopened = SqliteOutbox(path)
    assert reopened.found_version == OUTBOX_SCHEMA_VERSION
    items = {i.id: i for i in await reopened.pending()}
    assert set(items) == {first, second}
    a, b = items[first], items[second]
    assert a.exchange == Exchange(scope=Scope(user="alice"), query="q1", answer="a1",
                                  request_id="r1", mode=Mode.DMT)  # fmt: skip
    assert a.stored and a.verdict == {"bias_detected": False, "score": 0.1}
    assert not b.stored and b.attempts == 1 and b.last_error == "backend write: disk full"
    assert {a.schema_version, b.schema_version} == {ROW_SCHEMA_VERSION}
    await reopened.aclose()
    assert (
        sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == OUTBOX_SCHEMA_VERSION
    )


async def test_unversioned_outbox_is_migrated_and_drained(tmp_path: Path) -> None:
    path = tmp_path / "outbox.sqlite3"
    write_legacy_outbox(path)
    outbox = SqliteOutbox(path)
    assert outbox.found_version == 0
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == OUTBOX_SCHEMA_VERSION
        columns = [row[1] for row in db.execute("PRAGMA table_info(outbox)")]
    assert columns[-2:] == ["schema_version", "origin"]  # 0 -> 1 -> 2, in one open
    items = {i.id: i for i in await outbox.pending()}
    assert items["mem_old_1"].exchange.query == "Old question one?"
    assert items["mem_old_2"].exchange.mode is Mode.DMT  # the column's text, read typed
    assert items["mem_old_2"].stored and items["mem_old_2"].attempts == 2
    # Rows of the unversioned layout keep the payload format they were written in (1).
    assert {i.schema_version for i in items.values()} == {1} and ROW_SCHEMA_VERSION == 3
    # Nor do they know where they came from: their memories get no provenance.
    assert {i.exchange.origin for i in items.values()} == {None}
    # New rows go in next to migrated ones.
    await outbox.enqueue(
        Exchange(scope=Scope(user="carol"), query="new", answer="a", request_id="r3", mode=Mode.OFF)
    )

    # The worker of this version processes the old rows into the backend.
    backend = InMemoryBackend()
    # mem_old_2 was marked stored by the old process, so its record must already exist.
    await backend.write(Scope(user="bob"), MemoryRecord(id="mem_old_2", scope=Scope(user="bob"),
                                                        text="User: Old question two?\nAssistant: Old answer."))  # fmt: skip
    worker = OutboxWorker(outbox=outbox, backend=backend, backend_name="memory", auditor=None,
                          policy=AuditPolicy(), metrics=Metrics())  # fmt: skip
    worker.start()
    try:
        assert await drain(worker, timeout_s=10)
    finally:
        await worker.stop()
    assert [r.text for r in await backend.list(Scope(user="alice"))] == [
        "User: Old question one?\nAssistant: Old answer."
    ]
    assert len(await backend.list(Scope(user="carol"))) == 1
    await outbox.aclose()


def test_migration_is_idempotent_across_opens(tmp_path: Path) -> None:
    path = tmp_path / "outbox.sqlite3"
    write_legacy_outbox(path)
    SqliteOutbox(path).close()
    again = SqliteOutbox(path)
    assert again.found_version == OUTBOX_SCHEMA_VERSION
    again.close()
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT COUNT(*) FROM outbox").fetchone()[0] == 2


def test_outbox_from_a_newer_release_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "outbox.sqlite3"
    SqliteOutbox(path).close()
    with sqlite3.connect(path) as db:
        db.execute(f"PRAGMA user_version = {OUTBOX_SCHEMA_VERSION + 1}")
    with pytest.raises(ConfigError, match="newer than this dmt-proxy understands"):
        SqliteOutbox(path)
    # Refusing must not touch the file.
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == OUTBOX_SCHEMA_VERSION + 1


async def test_in_memory_snapshot_carries_a_version_and_round_trips(tmp_path: Path) -> None:
    snapshot = tmp_path / "snapshot.json"
    scope = Scope(user="alice", agent="agent-1")
    tag = BiasTag(bias_type="age", target_group="older workers", tendency="favoring youth",
                  score=0.8, rationale="stereotype", auditor="scripted@fake")  # fmt: skip
    backend = InMemoryBackend(snapshot=snapshot)
    written = [
        await backend.write(scope, MemoryRecord.from_interaction(scope, "q1", "a1", id="m1")),
        await backend.write(scope, MemoryRecord.from_interaction(
            scope, "q2", "a2", id="m2", audit_status=AuditStatus.TAGGED, tag=tag,
            metadata={"request_id": "r2", "mode": "dmt"})),
    ]  # fmt: skip
    await backend.close()
    assert json.loads(snapshot.read_text())["version"] == SNAPSHOT_VERSION

    reopened = InMemoryBackend(snapshot=snapshot)
    assert await reopened.list(scope) == written
    await reopened.close()


def test_records_stored_before_the_version_field_read_as_format_1() -> None:
    # The letta and in-memory stores keep the record's JSON body; bodies written before
    # schema_version existed lack it and must still load (as format 1, the only format then).
    record = MemoryRecord.from_interaction(Scope(user="alice"), "Old question?", "Old answer.")
    body = json.loads(record.model_dump_json())
    assert body.pop("schema_version") == RECORD_SCHEMA_VERSION == 3
    assert body.pop("provenance") is None  # a body of format 1 or 2 has no provenance
    legacy = MemoryRecord.model_validate(body)
    assert legacy.schema_version == 1 and legacy.text == record.text
