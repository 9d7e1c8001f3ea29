"""The outbox worker while the outbox database is unreachable: a verdict is kept, never
asked for again, and the outage is logged as one warning naming its cause.

``FlakyOutbox`` is a test double: the real SQLite outbox behind a switch that makes
chosen calls raise the error psycopg raises for a refused connection. A real server
cannot be made to refuse exactly the verdict's save on demand; the database stopped
for real mid-load is ``tests/reliability/test_rel_db_down.py``.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import psycopg
import pytest

from dmt_proxy.exchange import Exchange
from dmt_proxy.memory.backends.in_memory import InMemoryBackend
from dmt_proxy.memory.base import Scope
from dmt_proxy.memory.write.outbox import OutboxItem, SqliteOutbox
from dmt_proxy.memory.write.worker import OutboxWorker
from dmt_proxy.metrics import Metrics
from dmt_proxy.modes import Mode
from dmt_proxy.policy import parse_policy
from dmt_proxy.tags import AuditStatus
from dmt_proxy.testing.auditor import ScriptedAuditor

ALICE = Scope(user="alice")
REFUSED = "connection failed: connection to server at 127.0.0.1 port 5 failed: Connection refused"


class FlakyOutbox(SqliteOutbox):
    """The SQLite outbox, whose ``failing`` calls raise a refused connection ``times`` times."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.failing: dict[str, int] = {}

    def _gate(self, op: str) -> None:
        if self.failing.get(op, 0) > 0:
            self.failing[op] -= 1
            raise psycopg.OperationalError(REFUSED)

    async def save_verdict(self, item_id: str, verdict: dict[str, Any]) -> None:
        self._gate("save_verdict")
        await super().save_verdict(item_id, verdict)

    async def mark_stored(self, item_id: str) -> None:
        self._gate("mark_stored")
        await super().mark_stored(item_id)

    async def retry_later(self, item_id: str, error: str, delay_s: float) -> None:
        try:
            self._gate("retry_later")
        except psycopg.OperationalError:
            self._held.discard(item_id)  # as the real outboxes do when the update fails
            raise
        await super().retry_later(item_id, error, delay_s)


def worker_on(outbox: FlakyOutbox, auditor: ScriptedAuditor) -> OutboxWorker:
    policy = parse_policy({"version": 1, "mode": "dmt", "memory": {"backend": "memory"}})
    worker = OutboxWorker(outbox=outbox, backend=InMemoryBackend(), backend_name="memory",
                          auditor=auditor, policy=policy.audit, metrics=Metrics())  # fmt: skip
    worker.save_retry_s = 0.01
    return worker


async def queued(outbox: FlakyOutbox) -> OutboxItem:
    await outbox.enqueue(
        Exchange(scope=ALICE, query="I like tea.", answer="ok", request_id="r", mode=Mode.DMT)
    )
    [item] = await outbox.due(1)
    return item


async def test_a_verdict_whose_save_fails_is_kept_not_audited_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    outbox = FlakyOutbox(tmp_path / "outbox.sqlite3")
    auditor = ScriptedAuditor()
    worker = worker_on(outbox, auditor)
    try:
        item = await queued(outbox)
        outbox.failing["save_verdict"] = 3
        with caplog.at_level(logging.INFO, logger="dmt_proxy.memory.write.worker"):
            await worker.process(item)
        assert len(auditor.calls) == 1, "the memory was audited again"
        assert outbox.failing["save_verdict"] == 0
        assert (await outbox.stats())[0] == 0, "the row is done"
        [record] = await worker.backend.list(ALICE)
        assert record.audit_status is AuditStatus.CLEAN
        warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(warnings) == 1 and "Connection refused" in warnings[0].getMessage()
        assert warnings[0].exc_info is None
    finally:
        await outbox.aclose()


async def test_an_outage_mid_row_is_one_warning_with_its_cause_not_a_traceback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    outbox = FlakyOutbox(tmp_path / "outbox.sqlite3")
    worker = worker_on(outbox, ScriptedAuditor())
    try:
        item = await queued(outbox)
        # The record reached the store, then the database went before the row was marked:
        # the row is claimed again when its lease runs out (the write is idempotent).
        outbox.failing.update(mark_stored=1)
        worker._in_flight.add(item.id)
        sem = asyncio.Semaphore(0)
        with caplog.at_level(logging.INFO, logger="dmt_proxy.memory.write.worker"):
            await worker._guarded(item, sem)
        records = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert [r.levelname for r in records] == ["WARNING"]
        assert REFUSED in records[0].getMessage() and records[0].exc_info is None
        assert "OperationalError" in records[0].getMessage()
        # Released, not left in progress (a held row's lease would be renewed forever).
        assert item.id not in outbox._held
        [row] = await outbox.pending()
        assert row.attempts == 1 and "database unreachable" in (row.last_error or "")
    finally:
        await outbox.aclose()


async def test_a_row_whose_reschedule_fails_too_is_released_all_the_same(
    tmp_path: Path,
) -> None:
    outbox = FlakyOutbox(tmp_path / "outbox.sqlite3")
    worker = worker_on(outbox, ScriptedAuditor())
    try:
        item = await queued(outbox)
        outbox.failing.update(mark_stored=1, retry_later=1)
        await worker._guarded(item, asyncio.Semaphore(0))
        assert item.id not in outbox._held
    finally:
        await outbox.aclose()


async def test_stopping_the_worker_mid_audit_leaves_the_row_for_later_and_logs_no_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A shutdown while a row is being audited: before, the row's task outlived the worker
    and met the closed outbox ('outbox item ... failed unexpectedly: outbox is closed')."""
    outbox = FlakyOutbox(tmp_path / "outbox.sqlite3")
    auditor = ScriptedAuditor(delay_s=0.3)  # answers after the worker has stopped
    worker = worker_on(outbox, auditor)
    await outbox.enqueue(
        Exchange(scope=ALICE, query="I like tea.", answer="ok", request_id="r", mode=Mode.DMT)
    )
    worker.start()
    for _ in range(500):  # until the auditor holds the row (at most 5 s)
        if auditor.calls:
            break
        await asyncio.sleep(0.01)
    assert auditor.calls, "the worker never reached the auditor"
    with caplog.at_level(logging.WARNING):
        await worker.stop()
        await outbox.aclose()
        await asyncio.sleep(0.6)  # a task left running would answer and meet the closed outbox
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    reopened = SqliteOutbox(tmp_path / "outbox.sqlite3")
    try:
        depth, _ = await reopened.stats()
        assert depth == 1  # still there: claimed again once its lease runs out
    finally:
        await reopened.aclose()
