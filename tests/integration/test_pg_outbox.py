"""The PostgreSQL outbox: leased claims, reclaim after a dead worker, exactly-once storage,
schema versions, and how the memory service picks its outbox.

A real PostgreSQL server (``dmt_proxy/testing/pg.py``). Several ``PostgresOutbox``
instances on one database stand for several live workers; a dead worker is a real
process (``tests/pg_dead_worker.py``) killed with SIGKILL after it claimed rows. The
memory backend is the real ``postgres`` backend; the auditor is the shipped
ScriptedAuditor (a fake: these tests are about delivery, not judgement).
"""

from __future__ import annotations

import asyncio
import select
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import psycopg
import pytest

from dmt_proxy.embedder import LocalEmbedder
from dmt_proxy.errors import ConfigError
from dmt_proxy.exchange import Exchange
from dmt_proxy.memory.assembly import build_outbox
from dmt_proxy.memory.base import MemoryBackend, Scope
from dmt_proxy.memory.registry import BackendConfig, create_backend
from dmt_proxy.memory.write.outbox import Outbox, OutboxItem, SqliteOutbox
from dmt_proxy.memory.write.pg_outbox import PG_OUTBOX_SCHEMA_VERSION, PostgresOutbox
from dmt_proxy.memory.write.spool import SpooledOutbox
from dmt_proxy.memory.write.worker import OutboxWorker
from dmt_proxy.metrics import Metrics
from dmt_proxy.modes import Mode
from dmt_proxy.policy import parse_policy
from dmt_proxy.provenance import Channel, Origin
from dmt_proxy.settings import Settings
from dmt_proxy.tags import AuditStatus
from dmt_proxy.testing.auditor import ScriptedAuditor
from tests.timing import budget

pytestmark = pytest.mark.postgres

SHORT_LEASE_S = budget(0.6)
"""A lease a test waits out while the heartbeat renews it every third of it: a stall of this
process for two thirds of it would let it lapse, so it grows with a slow machine."""

ALICE, BOB = Scope(user="alice"), Scope(user="bob", session="s1")
Opener = Callable[..., Coroutine[Any, Any, PostgresOutbox]]


@pytest.fixture
async def open_outbox(pg_dsn: str) -> AsyncIterator[Opener]:
    """Open outboxes ("workers") on one fresh database; all are closed afterwards."""
    opened: list[PostgresOutbox] = []

    async def opener(**kwargs: Any) -> PostgresOutbox:
        outbox = await PostgresOutbox.open(pg_dsn, **kwargs)
        opened.append(outbox)
        return outbox

    yield opener
    for outbox in opened:
        await outbox.aclose()


async def enqueue(outbox: Outbox, scope: Scope, n: int, mode: Mode = Mode.DMT) -> list[str]:
    ids = []
    for i in range(n):
        ids.append(await outbox.enqueue(Exchange(scope=scope, query=f"Question {i}?",
                                                 answer="Answer.", request_id=f"req_{i}",
                                                 mode=mode)))  # fmt: skip
    return ids


async def test_enqueue_pending_stats_and_the_protocol(open_outbox: Opener) -> None:
    outbox = await open_outbox()
    assert isinstance(outbox, PostgresOutbox) and outbox.found_version == 0
    ids = await enqueue(outbox, ALICE, 2) + await enqueue(outbox, BOB, 1)
    assert [i.id for i in await outbox.pending()] == ids
    [bobs] = await outbox.pending(BOB.user)
    assert bobs.exchange == Exchange(scope=BOB, query="Question 0?", answer="Answer.",
                                     request_id="req_0", mode=Mode.DMT)  # fmt: skip
    assert not bobs.stored
    depth, age = await outbox.stats()
    assert depth == 3 and 0 <= age < 60
    assert await outbox.cancel(ids[0]) is True and await outbox.cancel(ids[0]) is False
    assert await outbox.cancel_user(ALICE.user) == 1
    assert await outbox.stats() == (1, pytest.approx(age, abs=60))
    reopened = await open_outbox()
    assert reopened.found_version == PG_OUTBOX_SCHEMA_VERSION


async def test_claims_are_exclusive_and_leased(open_outbox: Opener, pg_dsn: str) -> None:
    # Leases that cannot run out during the test: no claim here may depend on the heartbeat.
    one, two = await open_outbox(lease_s=600), await open_outbox(lease_s=600)
    ids = await enqueue(one, ALICE, 20)
    first, second = await asyncio.gather(one.due(10), two.due(10))
    claimed = [i.id for i in first] + [i.id for i in second]
    assert len(first) == len(second) == 10 and sorted(claimed) == sorted(ids)  # SKIP LOCKED
    assert await one.due(10) == [] and await two.due(10) == []  # held by their leases
    with psycopg.connect(pg_dsn) as conn:
        holders = {r[0] for r in conn.execute("SELECT DISTINCT leased_by FROM dmt_outbox")}
    assert holders == {one.worker_id, two.worker_id}

    # A released row (retry_later) is due again after its delay, for whoever asks first.
    await one.retry_later(first[0].id, "backend write: down", 0.0)
    [again] = await two.due(10)
    assert again.id == first[0].id and again.attempts == 1 and again.last_error is not None
    await two.done(again.id)
    assert await one.stats() == (19, pytest.approx(0, abs=60))


def start_dead_worker(
    dsn: str, lease_s: float, n: int, mode: str
) -> tuple[subprocess.Popen[bytes], list[str]]:
    """Start ``tests/pg_dead_worker.py``; returns it and the ids it claimed, once it reports."""
    proc = subprocess.Popen([sys.executable, "-m", "tests.pg_dead_worker", dsn, str(lease_s),
                             str(n), mode], stdout=subprocess.PIPE)  # fmt: skip
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 120)
    line = proc.stdout.readline().decode() if ready else ""
    if not line:
        kill(proc)
        raise AssertionError(f"dead worker did not report (exit {proc.poll()})")
    return proc, line.split()[1:]


def kill(proc: subprocess.Popen[bytes]) -> None:
    proc.kill()  # SIGKILL: no lease released, no heartbeat any more
    proc.wait(timeout=10)
    if proc.stdout is not None:
        proc.stdout.close()


async def reclaim(outbox: PostgresOutbox, timeout_s: float = 30.0) -> list[OutboxItem]:
    """Poll ``due`` until rows come back (a dead worker's leases ran out)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        items = await outbox.due(10)
        if items:
            return items
        await asyncio.sleep(0.05)
    return []


async def test_a_dead_workers_rows_are_claimed_again_after_the_lease(
    open_outbox: Opener, pg_dsn: str
) -> None:
    alive = await open_outbox(lease_s=3.0)
    ids = await enqueue(alive, ALICE, 3)
    dead, claimed = await asyncio.to_thread(start_dead_worker, pg_dsn, 3.0, 3, "claim")
    killed_at = time.monotonic()
    kill(dead)
    assert claimed == ids and await alive.due(10) == []  # still leased to the dead worker
    reclaimed = await reclaim(alive)
    assert [i.id for i in reclaimed] == ids and all(i.attempts == 0 for i in reclaimed)
    # Claimed again once the lease ran out, not much later: a second (scaled) for the polls.
    assert time.monotonic() - killed_at < 3.0 + budget(1.0)


async def test_a_live_worker_keeps_its_rows_past_the_lease(open_outbox: Opener) -> None:
    """The heartbeat renews the rows in progress, and only those."""
    holder = await open_outbox(lease_s=SHORT_LEASE_S)
    other = await open_outbox(lease_s=SHORT_LEASE_S)
    first, second = await enqueue(holder, ALICE, 2)
    assert [i.id for i in await holder.due(2)] == [first, second]
    await holder.retry_later(second, "backend write: down", 0.0)  # released, not renewed
    await asyncio.sleep(2.5 * SHORT_LEASE_S)  # more than two leases
    assert [i.id for i in await other.due(10)] == [second]
    await holder.done(first)
    assert await other.stats() == (1, pytest.approx(0, abs=60))


async def test_a_closed_worker_releases_its_rows_at_once(open_outbox: Opener) -> None:
    leaving, staying = await open_outbox(lease_s=600), await open_outbox(lease_s=600)
    ids = await enqueue(leaving, ALICE, 2)
    assert len(await leaving.due(10)) == 2
    await leaving.aclose()
    assert [i.id for i in await staying.due(10)] == ids


@pytest.fixture
async def backend(pg_dsn: str, tmp_path: Path) -> AsyncIterator[MemoryBackend]:
    config = BackendConfig(state_dir=tmp_path, embedder=LocalEmbedder(), options={"dsn": pg_dsn})
    opened = await create_backend("postgres", config)
    yield opened
    await opened.close()


def worker(outbox: Outbox, backend: MemoryBackend, auditor: ScriptedAuditor) -> OutboxWorker:
    policy = parse_policy({"version": 1, "mode": "dmt", "memory": {"backend": "postgres"}})
    return OutboxWorker(outbox=outbox, backend=backend, backend_name="postgres",
                        auditor=auditor, policy=policy.audit, metrics=Metrics())  # fmt: skip


async def test_a_worker_killed_mid_audit_stores_exactly_once(
    open_outbox: Opener, backend: MemoryBackend, pg_dsn: str
) -> None:
    """A worker process stores the records (pending) and is killed during the audits;
    after its leases run out another worker finishes them: one record per acknowledged
    write, under the row's memory id, each audited once by the live worker."""
    outbox = await open_outbox(lease_s=2.0)
    ids = await enqueue(outbox, ALICE, 3)
    dead, auditing = await asyncio.to_thread(start_dead_worker, pg_dsn, 2.0, 3, "audit")
    kill(dead)
    assert auditing == ids
    assert [r.audit_status for r in await backend.list(ALICE)] == [AuditStatus.PENDING] * 3
    reclaimed = await reclaim(outbox)
    assert [i.id for i in reclaimed] == ids and all(i.stored for i in reclaimed)
    auditor = ScriptedAuditor()
    live = worker(outbox, backend, auditor)
    for item in reclaimed:
        await live.process(item)
    records = await backend.list(ALICE)
    assert [r.id for r in records] == ids  # the memory ids of the rows: nothing duplicated
    assert [r.audit_status for r in records] == [AuditStatus.CLEAN] * 3
    assert [c.candidate_id for c in auditor.calls] == ids
    assert await outbox.stats() == (0, 0.0)


async def test_a_newer_outbox_schema_is_refused(open_outbox: Opener, pg_dsn: str) -> None:
    await (await open_outbox()).aclose()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("UPDATE dmt_schema_version SET version = 7 WHERE component = 'outbox'")
    with pytest.raises(ConfigError, match="schema version 7, newer than this dmt-proxy"):
        await PostgresOutbox.open(pg_dsn)
    with pytest.raises(ConfigError, match="table prefix"):
        await PostgresOutbox.open(pg_dsn, prefix="Bad-Prefix")


async def test_an_outbox_of_layout_1_is_migrated_and_new_rows_carry_their_origin(
    open_outbox: Opener, pg_dsn: str, tmp_path: Path
) -> None:
    first = await open_outbox()
    [old] = await enqueue(first, ALICE, 1)
    await first.aclose()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # the table as layout 1 had it
        conn.execute("ALTER TABLE dmt_outbox DROP COLUMN origin")
        conn.execute("UPDATE dmt_schema_version SET version = 1 WHERE component = 'outbox'")
    outbox = await open_outbox()
    assert outbox.found_version == 1 and PG_OUTBOX_SCHEMA_VERSION == 2
    [item] = await outbox.pending()
    assert item.id == old and item.exchange.origin is None  # unknown, not guessed
    assert item.record(AuditStatus.PENDING).provenance is None
    # New rows carry theirs, a NUL in the model name included (jsonb refuses the escape).
    origin = Origin(channel=Channel.RESPONSES, tenant="acme", key_id="0123456789abcdef",
                    model="m\x00x")  # fmt: skip
    new = await outbox.enqueue(Exchange(scope=BOB, query="q", answer="a", request_id="req_n",
                                        mode=Mode.DMT, origin=origin))  # fmt: skip
    # And a spooled row keeps its origin when it is forwarded.
    spool = SqliteOutbox(tmp_path / "spool.sqlite3")
    spooled_id = await spool.enqueue(Exchange(scope=BOB, query="q2", answer="a2",
                                              request_id="req_s", mode=Mode.DMT, origin=origin))  # fmt: skip
    [spooled] = await spool.pending()
    await outbox.forward(spooled)
    await spool.aclose()
    items = {i.id: i for i in await outbox.pending()}
    kept = origin.model_copy(update={"model": "m\ufffdx"})
    assert items[new].exchange.origin == kept and items[spooled_id].exchange.origin == kept
    assert items[spooled_id].created_at == pytest.approx(spooled.created_at, abs=1e-3)
    provenance = items[new].record(AuditStatus.PENDING).provenance
    assert provenance is not None and provenance.channel is Channel.RESPONSES


async def test_the_service_picks_its_outbox(tmp_path: Path, pg_dsn: str) -> None:
    postgres = parse_policy({"version": 1, "memory": {"backend": "postgres"}})
    memory = parse_policy({"version": 1, "memory": {"backend": "memory"}})
    auto = Settings.from_env({}, state_dir=tmp_path, database_url=pg_dsn)

    chosen = await build_outbox(auto, postgres)
    assert isinstance(chosen, SpooledOutbox) and isinstance(chosen.primary, PostgresOutbox)
    await chosen.aclose()
    chosen = await build_outbox(auto, memory)
    assert isinstance(chosen, SqliteOutbox)
    await chosen.aclose()
    shared = Settings.from_env({"DMT_OUTBOX": "postgres", "DMT_WORKER": "off"},
                               state_dir=tmp_path, database_url=pg_dsn)  # fmt: skip
    chosen = await build_outbox(shared, memory)
    assert isinstance(chosen, SpooledOutbox) and isinstance(chosen.primary, PostgresOutbox)
    await chosen.aclose()

    with pytest.raises(ConfigError, match=r"DMT_WORKER=off .* needs the shared PostgreSQL outbox"):
        await build_outbox(Settings.from_env({"DMT_WORKER": "off"}, state_dir=tmp_path), memory)
    with pytest.raises(ConfigError, match="needs a database: set DMT_DATABASE_URL"):
        await build_outbox(Settings.from_env({"DMT_OUTBOX": "postgres"}, state_dir=tmp_path),
                           memory)  # fmt: skip
