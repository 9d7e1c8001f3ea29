"""The memory service alone: the admin operations over queued and stored memories, the
scope an exchange carries, and the layering that keeps routes on the service.

The backend is the shipped in-memory backend (a real implementation of the protocol)
and the auditor the shipped ScriptedAuditor (a fake: these tests are about the
service's bookkeeping, not judgement). The worker is built but not started, so what
is queued stays queued until a test moves it with ``worker.process``.
"""

from __future__ import annotations

import ast
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

import dmt_proxy
from dmt_proxy.audit.auditor import AuditorOptions, LLMAuditor
from dmt_proxy.audit.protocol import AuditorUnavailable
from dmt_proxy.exchange import Exchange, RequestContext
from dmt_proxy.memory.backends.in_memory import InMemoryBackend
from dmt_proxy.memory.base import MemoryRecord, MemoryStoreError, Scope
from dmt_proxy.memory.service import DurableMemoryService
from dmt_proxy.memory.write.outbox import SqliteOutbox
from dmt_proxy.memory.write.storage import StorageClosed
from dmt_proxy.memory.write.trail import SqliteTrail
from dmt_proxy.memory.write.worker import OutboxWorker
from dmt_proxy.metrics import Metrics
from dmt_proxy.policy import Mode, Policy, parse_policy
from dmt_proxy.tags import AuditStatus, BiasTag
from dmt_proxy.testing.auditor import ScriptedAuditor
from dmt_proxy.testing.chat import ScriptedChatModel
from dmt_proxy.turns import MemoryAccess
from dmt_proxy.upstream.base import ModelEndpoint

PACKAGE = Path(dmt_proxy.__file__).parent
ALICE, BOB = Scope(user="alice"), Scope(user="bob")


class Parts:
    def __init__(
        self, state_dir: Path, auditor: ScriptedAuditor, policy: Policy | None = None
    ) -> None:
        policy = policy or parse_policy(
            {"version": 1, "mode": "dmt", "memory": {"backend": "memory"}}
        )
        metrics = Metrics()
        self.backend = InMemoryBackend()
        self.outbox = SqliteOutbox(state_dir / "outbox.sqlite3")
        self.worker = OutboxWorker(outbox=self.outbox, backend=self.backend, backend_name="memory",
                                   auditor=auditor, policy=policy.audit, metrics=metrics)  # fmt: skip
        self.service = DurableMemoryService(backend=self.backend, backend_name="memory",
                                            outbox=self.outbox, worker=self.worker, policy=policy,
                                            metrics=metrics)  # fmt: skip

    async def record(self, scope: Scope, query: str, mode: Mode = Mode.DMT) -> str:
        await self.service.record(
            Exchange(scope=scope, query=query, answer="ok", request_id="r", mode=mode)
        )
        return (await self.outbox.pending())[-1].id


@pytest.fixture
async def parts(tmp_path: Path) -> AsyncIterator[Parts]:
    # The auditor is down: a row the worker moves is stored (pending) but stays queued.
    down = AuditorUnavailable("down", upstream="a", retryable=True)
    made = Parts(tmp_path, ScriptedAuditor([down]))
    yield made
    await made.service.aclose()


async def test_list_merges_queued_writes_with_stored_records(parts: Parts) -> None:
    old = MemoryRecord.from_interaction(ALICE, "Stored long ago.", "ok",
                                        created_at=datetime(2020, 1, 1, tzinfo=UTC))  # fmt: skip
    await parts.backend.write(ALICE, old)
    queued = await parts.record(ALICE, "Still queued.")
    moved = await parts.record(ALICE, "Stored, audit pending.")
    await parts.record(BOB, "Bob's own.")
    item = next(i for i in await parts.outbox.pending() if i.id == moved)
    await parts.worker.process(item)  # stored under its final id; the row waits for the auditor
    assert [i.stored for i in await parts.outbox.pending(ALICE.user)] == [False, True]

    listed = await parts.service.list(ALICE)
    assert [e.id for e in listed] == [old.id, queued, moved]  # oldest first, each once
    assert [e.audit_status for e in listed] == [AuditStatus.PENDING] * 3
    assert listed[1].text == "User: Still queued.\nAssistant: ok" and listed[1].user == "alice"
    assert [e.text for e in await parts.service.list(BOB)] == ["User: Bob's own.\nAssistant: ok"]


async def test_get_delete_and_delete_all_reach_queue_and_store(parts: Parts) -> None:
    stored = MemoryRecord.from_interaction(ALICE, "Stored.", "ok")
    await parts.backend.write(ALICE, stored)
    queued = await parts.record(ALICE, "Queued.")
    got = await parts.service.get(queued)
    assert got is not None and got.audit_status is AuditStatus.PENDING
    assert (await parts.service.get(stored.id)) is not None
    assert await parts.service.get("mem_nothing") is None

    assert await parts.service.delete(queued) is True  # cancels the queued write
    assert await parts.outbox.pending() == []
    assert await parts.service.delete(queued) is False

    await parts.record(ALICE, "Queued again.")
    await parts.record(BOB, "Bob's.")
    assert await parts.service.delete_all(ALICE) == 2  # one stored, one queued
    assert await parts.service.list(ALICE) == []
    assert len(await parts.service.list(BOB)) == 1
    stats = await parts.service.outbox_stats()
    assert stats.depth == 1 and stats.oldest_pending_age_s >= 0


async def test_an_exchange_is_stored_under_its_scope(tmp_path: Path) -> None:
    parts = Parts(tmp_path, ScriptedAuditor())
    session = Scope(user="alice", agent="planner", session="s1")
    await parts.record(session, "Remember this.", mode=Mode.OFF)
    [item] = await parts.outbox.pending()
    assert item.exchange.scope == session and item.exchange.mode is Mode.OFF
    await parts.worker.process(item)
    [record] = await parts.backend.list(ALICE)
    assert record.scope == session and record.audit_status is AuditStatus.UNAUDITED
    assert await parts.backend.list(Scope(user="alice", session="s2")) == []
    await parts.service.aclose()


async def test_the_sqlite_outbox_hands_a_row_out_once_until_it_is_finished(
    parts: Parts,
) -> None:
    """Like the leases of the shared outbox: a row in progress is not handed out again."""
    first = await parts.record(ALICE, "One.")
    second = await parts.record(ALICE, "Two.")
    assert [i.id for i in await parts.outbox.due(1)] == [first]
    assert [i.id for i in await parts.outbox.due(5)] == [second]
    assert await parts.outbox.due(5) == []
    await parts.outbox.retry_later(first, "backend write: down", 0.0)
    await parts.outbox.done(second)
    assert [i.id for i in await parts.outbox.due(5)] == [first]


async def test_a_closed_outbox_or_trail_says_so_with_its_own_error(tmp_path: Path) -> None:
    """Both share the SQLite storage base; its error is drawn in the tree and stays the
    ``RuntimeError`` a closed outbox raised before."""
    outbox = SqliteOutbox(tmp_path / "outbox.sqlite3")
    trail = SqliteTrail(tmp_path / "outbox.sqlite3")
    await outbox.aclose()
    trail.close()
    with pytest.raises(StorageClosed, match="outbox is closed"):
        outbox._db  # noqa: B018 - the property is the check
    with pytest.raises(RuntimeError, match="review trail is closed"):
        trail._db  # noqa: B018
    assert issubclass(StorageClosed, MemoryStoreError)


async def test_the_worker_decides_and_counts_each_audit_once(tmp_path: Path) -> None:
    """Outcomes, tags and latency are counted by the worker, once per memory, whatever
    the auditor: the LLM auditor (here on the shipped scripted chat model, a fake
    upstream) returns verdicts and counts nothing itself."""
    biased = json.dumps({
        "rationale": "Generalizes about older workers.", "bias_detected": True,
        "bias_type": "age", "target_group": "older workers", "tendency": "favoring youth",
        "score": 0.9,
    })  # fmt: skip
    clean = json.dumps({
        "rationale": "A physics question.", "bias_detected": False, "bias_type": None,
        "target_group": "", "tendency": "", "score": 0.05,
    })  # fmt: skip
    invalid = ["I think it is biased.", '{"score": 2}']
    policy = parse_policy({"version": 1, "mode": "dmt", "memory": {"backend": "memory"},
                           "audit": {"tau": 0.5, "action_per_domain": {"age": "quarantine"}}})  # fmt: skip
    chat = ScriptedChatModel([biased, clean, *invalid])
    auditor = LLMAuditor(chat, ModelEndpoint(model="m"), options=AuditorOptions(verdict="json"),
                         policy=policy.audit)  # fmt: skip
    metrics = Metrics()
    backend, outbox = InMemoryBackend(), SqliteOutbox(tmp_path / "outbox.sqlite3")
    worker = OutboxWorker(outbox=outbox, backend=backend, backend_name="memory",
                          auditor=auditor, policy=policy.audit, metrics=metrics)  # fmt: skip

    def value(name: str, **labels: str) -> float:
        return metrics.registry.get_sample_value(name, labels) or 0.0

    try:
        for text in ("Older staff can't learn new tools.", "What is the speed of light?"):
            await outbox.enqueue(
                Exchange(scope=ALICE, query=text, answer="ok", request_id="r", mode=Mode.DMT)
            )
            [item] = await outbox.due(1)
            await worker.process(item)
        assert value("dmt_audits_total", outcome="tagged") == 1
        assert value("dmt_audits_total", outcome="clean") == 1
        assert value("dmt_tags_total", bias_type="age", action="quarantine") == 1
        assert value("dmt_audit_duration_seconds_count") == 2
        assert [r.audit_status for r in await backend.list(ALICE)] == [
            AuditStatus.QUARANTINED, AuditStatus.CLEAN]  # fmt: skip

        await outbox.enqueue(
            Exchange(scope=ALICE, query="Hm.", answer="ok", request_id="r", mode=Mode.DMT)
        )
        [item] = await outbox.due(1)
        await worker.process(item)  # two invalid replies: a failed verdict, counted once
        assert value("dmt_audits_total", outcome="failed") == 1
        assert sum(value("dmt_audits_total", outcome=o) for o in ("tagged", "clean")) == 2
    finally:
        await outbox.aclose()


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_memory_routes_only_call_the_service() -> None:
    ours = {m for m in _imports(PACKAGE / "api" / "routes_memory.py") if m.startswith("dmt_proxy")}
    beyond_api = {m for m in ours if not m.startswith("dmt_proxy.api")}
    # Plain types and errors, and the service: no outbox, worker, auditor or backend.
    assert beyond_api == {"dmt_proxy.errors", "dmt_proxy.memory.base", "dmt_proxy.memory.service",
                          "dmt_proxy.provenance"}  # fmt: skip


@pytest.mark.parametrize("retrieval", ["search", "recent"])
async def test_recent_retrieval_shows_the_newest_memories_whatever_the_question(
    tmp_path: Path, retrieval: str
) -> None:
    """``recent``: the top_k newest of the user's memories, related to the question or not,
    never a quarantined one; ``search`` shows only what the question matches."""
    policy = parse_policy(
        {"version": 1, "memory": {"backend": "memory", "top_k": 2, "retrieval": retrieval}}
    )
    parts = Parts(tmp_path, ScriptedAuditor([]), policy)
    quarantine = BiasTag(bias_type="age", target_group="older workers",
                         tendency="disfavoring", score=0.9)  # fmt: skip
    texts = ["My dog is Rex", "Taxes are due in April", "I moved to Lisbon", "Old people are slow"]
    for day, text in enumerate(texts, start=1):
        kept = AuditStatus.QUARANTINED if text.startswith("Old") else AuditStatus.CLEAN
        await parts.backend.write(ALICE, MemoryRecord(
            scope=ALICE, text=text, created_at=datetime(2026, 1, day, tzinfo=UTC),
            audit_status=kept, tag=quarantine if kept is AuditStatus.QUARANTINED else None,
        ))  # fmt: skip
    await parts.backend.write(BOB, MemoryRecord(scope=BOB, text="Bob's dog is Max"))
    ctx = RequestContext(request_id="r", mode=Mode.OFF, memory=MemoryAccess.READ_ONLY, scope=ALICE)
    shown = await parts.service.retrieve(ctx, "what is my dog called")
    block = shown.messages[0]["content"] if shown.messages else ""
    expected = (
        ["Taxes are due in April", "I moved to Lisbon"]
        if retrieval == "recent"
        else ["My dog is Rex"]
    )
    assert [t for t in [*texts, "Bob's dog is Max"] if t in block] == expected
    assert shown.outcome.memories == len(expected)
    await parts.service.aclose()
